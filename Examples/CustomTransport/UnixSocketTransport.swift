// A custom PeerSync transport: message connections over Unix-domain sockets between the
// processes of one machine, written outside the library against the public API of
// PeerSyncTransport only (`Transport`, `TransportListener`, `MessageConnection`,
// `AsyncMessageQueue`, `Endpoint`, `PeerSyncError`). `main.swift` proves it: the transport
// conformance suite passes over it, and a replicator and a passive replication session sync
// two databases in two processes over it.

import Foundation
import PeerSyncCore
import PeerSyncTransport
import Synchronization

import Glibc  // unlink

/// Connections over Unix-domain stream sockets whose files live in one directory.
///
/// Endpoints are `unix://NAME:N`: the socket file `<directory>/NAME.N.sock`. Listening on
/// `unix://NAME:0` picks the first free N from 1 (the bound endpoint says which). Connecting
/// to an endpoint nobody listens on throws `.connectionRefused`; listening on one that is
/// taken (or whose file a crashed process left behind) throws `.addressInUse`. The directory
/// path must be short: a socket path holds at most 107 bytes.
///
/// Thread-safe; `connect` and `listen` run their system calls on threads of their own.
struct UnixSocketTransport: Transport {
    /// The folder of the socket files.
    let directory: String

    init(directory: String) { self.directory = directory }

    var kind: TransportKind { .custom("unix-socket") }
    var schemes: Set<String> { ["unix"] }

    /// The socket file of `endpoint`.
    func socketPath(for endpoint: Endpoint) -> String {
        "\(directory)/\(endpoint.host).\(endpoint.port ?? 0).sock"
    }

    func connect(to endpoint: Endpoint, options: NoTransportOptions) async throws -> any MessageConnection {
        try checkScheme(of: endpoint)
        guard let port = endpoint.port, port > 0 else {
            throw PeerSyncError(.invalidArgument, "a unix:// endpoint to connect to needs a port from 1", context: ["endpoint": "\(endpoint)"])
        }
        let path = socketPath(for: endpoint.with(port: port))
        let socket = try await onThread("unix-socket connect") { try SocketDescriptor.connect(to: path) }
        return UnixSocketConnection(socket: socket, remoteAddress: path)
    }

    func listen(on endpoint: Endpoint, options: NoTransportOptions) async throws -> any TransportListener {
        try checkScheme(of: endpoint)
        let directory = self.directory
        return try await onThread("unix-socket listen") { () throws -> UnixSocketListener in
            if let port = endpoint.port, port > 0 {
                let path = "\(directory)/\(endpoint.host).\(port).sock"
                return UnixSocketListener(socket: try SocketDescriptor.listen(at: path), path: path, endpoint: endpoint)
            }
            for port in 1...65535 {  // port 0 (or none): the first free one
                let path = "\(directory)/\(endpoint.host).\(port).sock"
                do {
                    let socket = try SocketDescriptor.listen(at: path)
                    return UnixSocketListener(socket: socket, path: path, endpoint: endpoint.with(port: port))
                } catch let error as PeerSyncError where error.code == .addressInUse {
                    continue
                }
            }
            throw PeerSyncError(.addressInUse, "every port of \(endpoint.host) is taken", context: ["directory": directory])
        }
    }
}

/// Accepts connections on one socket file: an accepting thread hands them to a bounded backlog.
final class UnixSocketListener: TransportListener {
    let endpoint: Endpoint
    private let socket: SocketDescriptor
    private let path: String
    private let backlog = AsyncMessageQueue<UnixSocketConnection>(maxCount: 16)
    private let closed = Mutex(false)

    init(socket: SocketDescriptor, path: String, endpoint: Endpoint) {
        self.socket = socket
        self.path = path
        self.endpoint = endpoint
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "unix-socket accept"
        thread.start()
    }

    func accept() async throws -> (any MessageConnection)? {
        try await backlog.receive()
    }

    func close() async {
        guard closed.withLock({ closed in defer { closed = true }; return !closed }) else { return }
        unlink(path)             // new peers are refused from now on
        socket.shutdownBoth()    // the accepting thread's accept() returns
        for waiting in backlog.finish(discardingBuffered: true) {
            await waiting.close(code: .goingAway, reason: "listener closed")
        }
    }

    private func acceptLoop() {
        while let client = socket.accept() {
            let connection = UnixSocketConnection(socket: client, remoteAddress: "unix-socket peer of \(path)")
            // A full backlog (or a closed listener) refuses the peer.
            if (try? backlog.trySend(connection)) != true { connection.abort() }
        }
    }
}
