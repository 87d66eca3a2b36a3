// An example of a custom transport written against the public API only: an in-process
// "pipe" transport with named endpoints (`pipe://name`). It shows how little a transport needs
// to pass the conformance suite when it builds on `AsyncMessageQueue`: one bounded queue per
// direction gives ordering, whole messages and backpressure; finishing the queues gives the
// close semantics. The Transport README walks through it.

import PeerSyncCore
import PeerSyncTransport
import Synchronization

/// The shared state of one connection: a bounded inbox per end and the close info of each end.
final class PipeLink: Sendable {
    /// `inboxes[i]` holds the messages for end `i`.
    let inboxes = [AsyncMessageQueue<TransportMessage>(maxCount: 32, maxBytes: 1 << 20),
                   AsyncMessageQueue<TransportMessage>(maxCount: 32, maxBytes: 1 << 20)]
    /// The close info of each end. Guarded by this mutex.
    let closeInfos = Mutex<[CloseInfo?]>([nil, nil])
}

final class PipeConnection: MessageConnection {
    let link: PipeLink
    let side: Int
    let remoteAddress: String?

    init(link: PipeLink, side: Int, remoteAddress: String) {
        self.link = link
        self.side = side
        self.remoteAddress = remoteAddress
    }

    var kind: TransportKind { .custom("pipe") }
    var peerCertificateChain: [[UInt8]] { [] }
    var maxMessageSize: Int { 32 << 20 }
    var closeInfo: CloseInfo? { link.closeInfos.withLock { $0[side] } }

    func send(_ message: TransportMessage) async throws {
        guard message.byteCount <= maxMessageSize else {
            throw PeerSyncError(.tooLarge, "message larger than maxMessageSize")
        }
        if let info = closeInfo {
            throw PeerSyncError(info.wasClean ? .connectionClosed : .connectionReset, "the connection is closed")
        }
        // Suspends while the peer's inbox is full: that is the backpressure. Throws once the
        // inbox is finished by a close (connectionClosed) or an abort (connectionReset).
        try await link.inboxes[1 - side].send(message)
    }

    func receive() async throws -> TransportMessage? {
        try await link.inboxes[side].receive()
    }

    func close(code: CloseCode, reason: String) async {
        let info = CloseInfo(code: code.isSendable ? code : .normal, reason: reason)
        link.closeInfos.withLock { infos in
            // The first close decides, for this end and for the peer.
            if infos[side] == nil { infos[side] = info }
            if infos[1 - side] == nil { infos[1 - side] = info }
        }
        link.inboxes[side].finish(discardingBuffered: true)  // we read nothing more
        link.inboxes[1 - side].finish()                       // the peer reads what we sent, then nil
    }

    /// Drops the link without a close handshake.
    func abort() {
        let info = CloseInfo(code: .abnormalClosure, reason: "aborted")
        link.closeInfos.withLock { infos in
            for i in 0..<2 where infos[i] == nil { infos[i] = info }
        }
        let error = PeerSyncError(.connectionReset, "the peer vanished")
        for inbox in link.inboxes { inbox.finish(throwing: error) }
    }
}

final class PipeListener: TransportListener {
    let endpoint: Endpoint
    let backlog = AsyncMessageQueue<PipeConnection>(maxCount: 16)
    let registry: PipeRegistry

    init(endpoint: Endpoint, registry: PipeRegistry) {
        self.endpoint = endpoint
        self.registry = registry
    }

    func accept() async throws -> (any MessageConnection)? {
        try await backlog.receive()
    }

    func close() async {
        registry.state.withLock { if $0.listeners[endpoint.authority] === self { $0.listeners[endpoint.authority] = nil } }
        for waiting in backlog.finish(discardingBuffered: true) {
            await waiting.close(code: .goingAway, reason: "listener closed")
        }
    }
}

/// Named listeners of one `PipeTransport` world.
final class PipeRegistry: Sendable {
    struct State {
        var listeners: [String: PipeListener] = [:]
        var nextPort = 1
    }
    /// Listeners by `host[:port]`. Guarded by this mutex.
    let state = Mutex(State())
}

struct PipeTransport: Transport {
    let registry = PipeRegistry()

    var kind: TransportKind { .custom("pipe") }
    var schemes: Set<String> { ["pipe"] }

    func connect(to endpoint: Endpoint, options: NoTransportOptions) async throws -> any MessageConnection {
        try checkScheme(of: endpoint)
        guard let listener = registry.state.withLock({ $0.listeners[endpoint.authority] }) else {
            throw PeerSyncError(.connectionRefused, "nothing listens at \(endpoint)")
        }
        let link = PipeLink()
        let client = PipeConnection(link: link, side: 0, remoteAddress: endpoint.description)
        let server = PipeConnection(link: link, side: 1, remoteAddress: "pipe-client")
        guard (try? listener.backlog.trySend(server)) == true else {
            throw PeerSyncError(.connectionRefused, "the listener at \(endpoint) is closed or busy")
        }
        return client
    }

    func listen(on endpoint: Endpoint, options: NoTransportOptions) async throws -> any TransportListener {
        try checkScheme(of: endpoint)
        return try registry.state.withLock { state in
            var bound = endpoint
            if endpoint.port == 0 {  // port 0: pick a free one
                bound = endpoint.with(port: state.nextPort)
                state.nextPort += 1
            }
            guard state.listeners[bound.authority] == nil else {
                throw PeerSyncError(.addressInUse, "\(bound) is taken")
            }
            let listener = PipeListener(endpoint: bound, registry: registry)
            state.listeners[bound.authority] = listener
            return listener
        }
    }
}
