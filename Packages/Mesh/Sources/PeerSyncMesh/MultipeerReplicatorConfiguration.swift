import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncReplicator

/// Settings of a ``MultipeerReplicator`` (Couchbase Lite's `MultipeerReplicatorConfiguration`),
/// plus PeerSync's topology tunables. A value type: the replicator copies it at init.
///
/// The initializer validates what Couchbase Lite validates; the tunables are validated by
/// ``MultipeerReplicator/init(config:networks:)`` (`PeerSyncError.Code.invalidArgument`).
public struct MultipeerReplicatorConfiguration: Sendable {
    /// The group: only peers of the same group see and sync with each other (Couchbase Lite's
    /// rule: 1–63 bytes of UTF-8, no control characters, `.`, `,` or `\`).
    public let peerGroupID: PeerGroupID
    /// This peer's identity: its certificate is presented on every link, as TLS server and as
    /// client, so it carries both key usages. ``MultipeerReplicator/peerID`` is derived from it.
    public let identity: TLSIdentity
    /// Decides which peers are trusted; both ends of every link ask their own.
    public let authenticator: MultipeerCertificateAuthenticator
    /// The collections replicated with every peer, with their filters and resolvers; all of one
    /// database. Never empty.
    public let collections: [MultipeerCollectionConfiguration]
    /// The transports to discover and reach peers on. Default `[.wifi]` (Couchbase Lite's
    /// default). ``MultipeerReplicator/init(config:networks:)`` takes the networks as given;
    /// the Wi-Fi module's `MultipeerReplicator(config:)` builds one per transport listed here.
    public var transports: Set<MultipeerTransport> = [.wifi]
    /// PeerSync: how many times in a row a transport may fail a peer — dials that failed, links
    /// that broke — before a new link to it goes over a less preferred transport that also sees
    /// it (Wi-Fi is preferred to Bluetooth). Default **3**: one broken link and one failed
    /// redial are what a Wi-Fi hiccup or a roaming phone causes, and Wi-Fi's bandwidth is worth
    /// those seconds; a third failure means the peer is out of reach there. The link moves back
    /// to the preferred transport as soon as a dial there succeeds (module README,
    /// "Transports"). At least 1.
    public var transportFallbackFailures = 3

    /// PeerSync: the number of links each peer aims for. Default **4**: the ring every peer
    /// keeps (2 links) plus on average one chord it picks and one picked by another peer (see
    /// the module README, "Topology"). The ring keeps the mesh connected with two disjoint
    /// paths everywhere, so one lost link never isolates a peer; the chords bring the diameter
    /// down to about log₂ N hops (about 5–7 for 64 peers). Every document is offered on every
    /// link, so the cost of a write grows with the degree: 4 is the least that gives both
    /// properties. At least 2.
    public var targetDegree = 4
    /// PeerSync: the most links a peer ever has; a peer at the limit refuses new incoming links
    /// and dials no more. Default **8** (twice the target): room for the bridges that join
    /// parts of the mesh and for links that heal before old ones are pruned, while the
    /// neighbour list still fits in the discovery metadata. At least ``targetDegree``, at most
    /// ``MeshNeighborMetadata/maximumNeighbors``.
    public var maximumDegree = 8
    /// PeerSync: how long to wait before dialling a peer again after a failed dial or a link
    /// that broke: exponential from ``retryDelay``, doubling per failure in a row, capped by
    /// ``maximumRetryDelay``, each wait drawn uniformly from its upper half (jitter, so peers
    /// that failed together do not retry together). Defaults **0.5 s** and **30 s**: a dropped
    /// link is usually back at once, while a peer that keeps failing (gone, untrusted,
    /// flapping) costs at most two attempts a minute. A failure to authenticate jumps straight
    /// to the cap. Both positive, the cap at least the first delay.
    public var retryDelay: Duration = .milliseconds(500)
    /// See ``retryDelay``.
    public var maximumRetryDelay: Duration = .seconds(30)
    /// PeerSync: the time a link may take from the first byte to an authenticated, ready
    /// connection (``MeshLinkContext/handshakeTimeout``), and how long an incoming link from a
    /// peer that discovery has not shown yet is held before it is refused. Default **10 s**: a
    /// TLS handshake on a slow radio link takes a few seconds, and a peer that stalls longer
    /// is dropped instead of wedging the mesh (Couchbase Lite's CBL-8380). Positive. A running
    /// replicator doubles it after each handshake that timed out (up to ×8) and halves it again
    /// after quick dials, so a loaded device still forms links; ``MeshLinkContext/handshakeTimeout``
    /// has the rule.
    public var handshakeTimeout: Duration = .seconds(10)

    /// - Throws: `PeerSyncError.Code.invalidArgument` for an invalid group ID, an identity
    ///   whose certificate lacks client or server key usage (the message names the missing
    ///   one), no collections, collections of different databases, or a collection listed twice.
    public init(peerGroupID: String, identity: TLSIdentity, authenticator: MultipeerCertificateAuthenticator,
                collections: [MultipeerCollectionConfiguration]) throws(PeerSyncError) {
        self.peerGroupID = try PeerGroupID(peerGroupID)
        let usages = identity.certificate.keyUsages
        var missing: [String] = []
        if !usages.contains(.clientAuth) { missing.append("client authentication (clientAuth)") }
        if !usages.contains(.serverAuth) { missing.append("server authentication (serverAuth)") }
        guard missing.isEmpty else {
            throw PeerSyncError(.invalidArgument,
                                "the multipeer identity's certificate must allow both client and server authentication; it lacks \(missing.joined(separator: " and "))",
                                context: ["peerID": identity.peerID])
        }
        guard let first = collections.first else {
            throw PeerSyncError(.invalidArgument, "a multipeer replicator needs at least one collection")
        }
        let database = first.collection.database
        guard collections.allSatisfy({ $0.collection.database === database }) else {
            throw PeerSyncError(.invalidArgument, "all collections of a multipeer replicator must belong to one database")
        }
        var seen = Set<String>()
        for configuration in collections where !seen.insert(configuration.collection.fullName).inserted {
            throw PeerSyncError(.invalidArgument, "the collection \(configuration.collection.fullName) is listed twice",
                                context: ["collection": configuration.collection.fullName])
        }
        self.identity = identity
        self.authenticator = authenticator
        self.collections = collections
    }

    /// The database of the collections.
    public var database: Database { collections[0].collection.database }

    /// Throws ``PeerSyncError/Code/invalidArgument`` naming the first tunable out of range.
    func validateTunables() throws(PeerSyncError) {
        guard !transports.isEmpty else { throw PeerSyncError(.invalidArgument, "transports must not be empty") }
        guard targetDegree >= 2 else {
            throw PeerSyncError(.invalidArgument, "targetDegree must be at least 2, got \(targetDegree)")
        }
        guard maximumDegree >= targetDegree, maximumDegree <= MeshNeighborMetadata.maximumNeighbors else {
            throw PeerSyncError(.invalidArgument,
                                "maximumDegree must be in \(targetDegree)...\(MeshNeighborMetadata.maximumNeighbors), got \(maximumDegree)")
        }
        guard retryDelay > .zero, maximumRetryDelay >= retryDelay else {
            throw PeerSyncError(.invalidArgument, "retryDelay must be positive and maximumRetryDelay at least retryDelay")
        }
        guard handshakeTimeout > .zero else { throw PeerSyncError(.invalidArgument, "handshakeTimeout must be positive") }
        guard transportFallbackFailures >= 1 else {
            throw PeerSyncError(.invalidArgument, "transportFallbackFailures must be at least 1, got \(transportFallbackFailures)")
        }
    }
}

/// Decides which peers a ``MultipeerReplicator`` trusts (Couchbase Lite's
/// `MultipeerCertificateAuthenticator`). It runs on both ends of every link, during the
/// handshake, never on discovery alone; a peer it rejects is never linked and is retried only
/// after the longest back-off.
public struct MultipeerCertificateAuthenticator: Sendable {
    private let check: @Sendable ([Certificate]) -> Bool

    /// Trusts peers whose certificate chains to one of `rootCerts` (X.509 path validation,
    /// validity period, client-auth usage; see `Certificate.validationFailure(ofChain:roots:)`).
    public init(rootCerts: [Certificate]) {
        check = { chain in Certificate.validationFailure(ofChain: chain, roots: rootCerts) == nil }
    }

    /// Trusts the peers `callback` accepts, given the peer ID (SHA-256 of its leaf certificate)
    /// and its chain, leaf first. Called on a transport task during a handshake: quick, no
    /// blocking, no side effects that matter if it is called again for the same peer.
    public init(callback: @escaping @Sendable (_ peerID: PeerID, _ certificates: [Certificate]) -> Bool) {
        check = { chain in
            guard let leaf = chain.first, let peerID = try? PeerID(digest: leaf.sha256Digest) else { return false }
            return callback(peerID, chain)
        }
    }

    /// Whether the peer presenting `chain` (leaf first) is trusted. An empty chain never is.
    public func authenticate(_ chain: [Certificate]) -> Bool {
        !chain.isEmpty && check(chain)
    }
}

/// A multipeer replication filter: the peer the document goes to or comes from, the document
/// (its revision's properties; empty for a deletion) and its flags. Runs on a replication
/// task: quick, no side effects.
public typealias MultipeerReplicationFilter = @Sendable (_ peerID: PeerID, _ document: Document, _ flags: DocumentFlags) -> Bool

/// Resolves a conflict pulled from a peer (Couchbase Lite's `MultipeerConflictResolver`): as
/// `ConflictResolver`, also given the peer the remote revision came from. Returns the
/// document to keep, a merge, or nil to delete; runs on a replication task, possibly
/// concurrently for different documents; throwing leaves the conflict for a later pull and
/// reports the error on that document.
public protocol MultipeerConflictResolver: Sendable {
    /// The document to keep for `conflict`, pulled from `peerID`: the local or remote one, a merge,
    /// or nil to delete (saved as `ConflictResolver` describes).
    func resolve(peerID: PeerID, conflict: Conflict) async throws -> (any DocumentProperties)?
}

/// One collection of a ``MultipeerReplicatorConfiguration`` (Couchbase Lite's
/// `MultipeerCollectionConfiguration`). Every setting applies on every link, whichever side
/// dialled it: the push filter and document IDs choose what a peer may receive from this one,
/// the pull filter which received revisions are stored, the resolver settles conflicts this
/// peer meets while pulling (the side that dialled a link resolves, Couchbase Lite's rule).
public struct MultipeerCollectionConfiguration: Sendable {
    /// The collection.
    public let collection: Collection
    /// Only these documents are replicated. Default nil: all.
    public var documentIDs: [String]?
    /// Only documents for which this returns true are sent to the peer. Default nil: all.
    public var pushFilter: MultipeerReplicationFilter?
    /// Only received revisions for which this returns true are stored. Default nil: all.
    public var pullFilter: MultipeerReplicationFilter?
    /// Resolves conflicts; nil: `ConflictResolvers.default` (Couchbase Lite's rule, the same
    /// winner on every peer).
    public var conflictResolver: (any MultipeerConflictResolver)?

    /// Replicates `collection` entirely, with the default resolver (see the properties).
    public init(collection: Collection) {
        self.collection = collection
    }

    /// One configuration with the defaults per collection.
    public static func fromCollections(_ collections: [Collection]) -> [MultipeerCollectionConfiguration] {
        collections.map { MultipeerCollectionConfiguration(collection: $0) }
    }

    /// The replicator settings for the link to `peerID`: the filters and resolver bound to it.
    func replicationConfiguration(for peerID: PeerID) -> CollectionConfiguration {
        var result = CollectionConfiguration(documentIDs: documentIDs)
        if let filter = pushFilter { result.pushFilter = { document, flags in filter(peerID, document, flags) } }
        if let filter = pullFilter { result.pullFilter = { document, flags in filter(peerID, document, flags) } }
        if let resolver = conflictResolver {
            result.conflictResolver = ConflictResolvers.custom { conflict in try await resolver.resolve(peerID: peerID, conflict: conflict) }
        }
        return result
    }
}
