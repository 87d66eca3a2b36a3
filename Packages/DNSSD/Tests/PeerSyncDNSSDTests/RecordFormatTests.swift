import PeerSyncCore
import PeerSyncDiscovery
@testable import PeerSyncDNSSD
import Testing

/// The pure parts: our TXT record, DNS names in wire form, the configuration, the error
/// mapping and Avahi's alternative names. No daemon needed.
@Suite struct TXTRecordTests {
    func entries(_ texts: [String]) -> [[UInt8]] { texts.map { Array($0.utf8) } }

    @Test func encodesOurKeysThenMetadata() throws {
        var metadata = try PeerMetadata(["zeta": "last", "alpha": "first"])
        try metadata.set(bytes: [0, 0x3D, 0xFF], forKey: "bin")
        let announcement = try PeerAnnouncement(peerID: PeerID("abc123"), group: PeerGroupID("g"), port: 1,
                                                metadata: metadata, protocolVersion: 4)
        let encoded = TXTRecord.entries(for: announcement)
        #expect(encoded == entries(["txtvers=1", "peerid=abc123", "protovers=4", "alpha=first"])
            + [Array("bin=".utf8) + [0, 0x3D, 0xFF]] + entries(["zeta=last"]))
        let decoded = try #require(TXTRecord.decode(encoded))
        #expect(decoded == TXTRecord.Contents(peerID: try PeerID("abc123"), protocolVersion: 4, metadata: metadata))
    }

    @Test func readsLeniently() throws {
        let decoded = try #require(TXTRecord.decode(entries([
            "PeerID=Peer-X", "peerid=ignored-second", "ProtoVers=12", "Color=Blue", "color=second", "flag", "empty=",
            "=novalue", "", "bad key=x", "txtvers=9", "org.freedesktop.avahi.cookie=123",
        ])))
        #expect(decoded.peerID.rawValue == "Peer-X")
        #expect(decoded.protocolVersion == 12)
        #expect(decoded.metadata == (try PeerMetadata(["color": "Blue", "flag": "", "empty": "", "org.freedesktop.avahi.cookie": "123"])))
    }

    @Test func aRecordWithoutAValidPeerIDIsNotOurs() {
        #expect(TXTRecord.decode([]) == nil)
        #expect(TXTRecord.decode(entries(["txtvers=1", "role=x"])) == nil)
        #expect(TXTRecord.decode(entries(["peerid=has space"])) == nil)
        #expect(TXTRecord.decode(entries(["peerid="])) == nil)
        #expect(TXTRecord.decode(entries(["peerid=ok", "protovers=x"]))?.protocolVersion == 0)
        #expect(TXTRecord.decode(entries(["peerid=ok", "protovers=-1"]))?.protocolVersion == 0)
        #expect(TXTRecord.decode(entries(["peerid=ok"]))?.protocolVersion == 0)
    }
}

@Suite struct DNSNameTests {
    @Test func wireFormRoundTrips() {
        let labels = ["My Peer é", "_couchbaseP2P", "_tcp", "local"]
        let wire = DNSName.wire(labels)
        #expect(wire.first == UInt8("My Peer é".utf8.count))
        #expect(wire.last == 0)
        #expect(DNSName.labels(wire) == labels)
        #expect(DNSName.labels(dotted: "_couchbaseP2P._tcp") == ["_couchbaseP2P", "_tcp"])
    }

    @Test func malformedNamesAreRefused() {
        #expect(DNSName.labels([]) == nil)                        // no terminating zero
        #expect(DNSName.labels([3, 0x61, 0x62]) == nil)           // label runs past the end
        #expect(DNSName.labels([0xC0, 0x0C]) == nil)              // a compression pointer
        #expect(DNSName.labels([64] + [UInt8](repeating: 0x61, count: 64) + [0]) == nil)
        #expect(DNSName.labels([0]) == [])
    }

    @Test func comparisonFoldsOnlyASCIICase() {
        #expect(DNSName.same(["_CouchbaseP2P", "_TCP", "Local"], ["_couchbasep2p", "_tcp", "local"]))
        #expect(!DNSName.same(["É"], ["é"]))
        #expect(!DNSName.same(["a"], ["a", "b"]))
    }
}

@Suite struct DNSSDConfigurationTests {
    @Test func defaultsAndValidation() throws {
        let configuration = DNSSDConfiguration()
        try configuration.validate()
        #expect(configuration.serviceType == "_couchbaseP2P._tcp" && configuration.domain == "local")
        #expect(configuration.subtypeName(for: "my group") == "my group._sub._couchbaseP2P._tcp.local")
        var bad = configuration
        for type in ["couchbaseP2P._tcp", "_x._sctp", "_a.b._tcp", "_._tcp", "_waytoolongservicename._tcp", "_under_score._tcp"] {
            bad.serviceType = type
            #expect(throws: PeerSyncError.self, "\(type)") { try bad.validate() }
        }
        bad = configuration
        bad.domain = "a..b"
        #expect(throws: PeerSyncError.self) { try bad.validate() }
        bad = configuration
        bad.interface = ""
        #expect(throws: PeerSyncError.self) { try bad.validate() }
        bad = configuration
        bad.retryInterval = .zero
        #expect(throws: PeerSyncError.self) { try bad.validate() }
    }

    @Test func anUnknownInterfaceIsRefused() {
        var configuration = DNSSDConfiguration()
        configuration.interface = "nosuchif0"
        let error = #expect(throws: PeerSyncError.self) { try DNSSDDiscovery(configuration: configuration) }
        #expect(error?.code == .invalidArgument)
    }
}

@Suite struct AvahiMappingTests {
    @Test func errorCodesMapToOurs() {
        let cases: [(Int32, PeerSyncError.Code, String)] = [
            (-26, .discoveryUnavailable, "avahi-daemon is not running"),   // AVAHI_ERR_NO_DAEMON
            (-23, .discoveryUnavailable, "avahi-daemon went away"),       // AVAHI_ERR_DISCONNECTED
            (-22, .discoveryUnavailable, "system D-Bus"),                 // AVAHI_ERR_DBUS_ERROR
            (-15, .timeout, "Timeout"),                                   // AVAHI_ERR_TIMEOUT
            (-10, .invalidArgument, "Invalid service name"),              // AVAHI_ERR_INVALID_SERVICE_NAME
            (-33, .invalidArgument, "Invalid service subtype"),
            (-8, .discoveryFailed, "Local name collision"),               // AVAHI_ERR_COLLISION
            (-20, .discoveryFailed, "Access denied"),
        ]
        for (code, expected, text) in cases {
            let error = avahiError(code, "doing it")
            #expect(error.code == expected, "\(code)")
            #expect(error.message.hasPrefix("doing it: ") && error.message.contains(text), "\(error)")
            #expect(error.context["avahiError"] == "\(code)")
        }
        #expect(throws: Never.self) { try avahiCheck(0, "fine") }
    }

    /// Our alternative names (the in-process registry's) are Avahi's.
    @Test func alternativeNamesAreAvahis() {
        let names = ["Foo", "Foo #2", "Foo #9", "Foo #1", "Foo #0", "Foo #02", "Foo #", "A #2 b #7", "x #12a",
                     String(repeating: "n", count: 63), String(repeating: "n", count: 59) + " #99",
                     String(repeating: "€", count: 21), String(repeating: "é", count: 29) + " #5", "My Peer (2)"]
        for name in names {
            #expect(AvahiRegistration.alternativeName(after: name) == PeerAnnouncement.alternativeName(after: name), "\(name)")
        }
    }
}
