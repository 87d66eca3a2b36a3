import PeerSyncCore
import PeerSyncPosix

/// The GATT server of a PeerSync peer: one primary service (the peer group's UUID) with the
/// PSM characteristic (read) and the metadata characteristic (read + notify), served over ATT
/// bearers — on a radio the LE ATT fixed channel (L2CAP CID 4), in tests and simulations one
/// end of `SeqPacketSocket.pair()`. The attribute table is `PeerServiceAttributes`.
///
/// One server serves any number of clients (``serve(_:)`` once per connection); each client
/// has its own MTU and its own notification setting (its CCCD write).
/// ``updateMetadata(_:)`` notifies every subscribed client; a notification carries at most
/// MTU − 3 bytes of the value, so a client that receives a full-size notification reads the
/// whole value (``GATTClient`` does).
///
/// Requests it does not support get ATT's Request Not Supported, malformed ones Invalid PDU;
/// commands and stray responses are ignored, as ATT asks. It never closes a connection
/// because of what the client sent.
///
/// Threading: every method from any task. ``serve(_:)`` suspends for the whole connection.
public final class GATTServer: Sendable {
    /// The service UUID.
    public let serviceUUID: BLEUUID
    /// The largest ATT MTU this server accepts (its receive MTU), 23...517. Default 247.
    public let maxMTU: Int

    final class Connection: Sendable {
        let socket: SeqPacketSocket
        // Serializes sends: the response loop and notifications share the socket.
        let sendLock = AsyncLock()
        let session = LockedValue(PeerServiceAttributes.Session())

        init(socket: SeqPacketSocket) { self.socket = socket }

        func send(_ pdu: ATTPDU) async throws {
            try await sendLock.withLock { try await socket.send(pdu.encoded()) }
        }
    }

    private struct State {
        var attributes: PeerServiceAttributes
        var connections: [Int: Connection] = [:]
        var nextConnection = 0
        var stopped = false
    }

    // Guards the values and the connections; never held across a suspension.
    private let state: LockedValue<State>

    /// A server for the group whose service UUID is `serviceUUID`, announcing `psm` and
    /// `metadata` (the TXT record's wire form). Throws `PeerSyncError.Code.tooLarge` when
    /// `metadata` is over 512 bytes (ATT's limit on an attribute value) and
    /// `PeerSyncError.Code.invalidArgument` for `maxMTU` outside 23...517.
    public init(serviceUUID: BLEUUID, psm: UInt16, metadata: [UInt8], maxMTU: Int = 247) throws(PeerSyncError) {
        guard (ATTPDU.defaultMTU...517).contains(maxMTU) else {
            throw PeerSyncError(.invalidArgument, "an ATT MTU must be in 23...517, got \(maxMTU)")
        }
        try Self.checkSize(metadata)
        self.serviceUUID = serviceUUID
        self.maxMTU = maxMTU
        state = LockedValue(State(attributes: PeerServiceAttributes(serviceUUID: serviceUUID, psm: psm, metadata: metadata)))
    }

    /// The metadata value served now.
    public var metadata: [UInt8] { state.withLock { $0.attributes.metadata } }

    /// The PSM served.
    public var psm: UInt16 { state.withLock { $0.attributes.psm } }

    /// How many clients are connected now.
    public var connectionCount: Int { state.withLock { $0.connections.count } }

    /// Replaces the metadata value and notifies every client that enabled notifications.
    /// Each notification carries the value current when it is sent, so after concurrent
    /// updates the last notification a client gets holds the last value. Returns once the
    /// notifications were handed to the sockets; a client whose socket fails is left to its
    /// ``serve(_:)`` to end. Throws `PeerSyncError.Code.tooLarge` over 512 bytes.
    public func updateMetadata(_ metadata: [UInt8]) async throws(PeerSyncError) {
        try Self.checkSize(metadata)
        let subscribed = state.withLock { state -> [Connection] in
            state.attributes.metadata = metadata
            return state.connections.values.filter { $0.session.withLock { $0.notifying } }
        }
        for connection in subscribed {
            try? await connection.sendLock.withLock {
                let (value, mtu) = (self.metadata, connection.session.withLock { $0.mtu })
                try await connection.socket.send(ATTPDU.handleValueNotification(
                    handle: PeerServiceAttributes.metadataValueHandle, value: Array(value.prefix(mtu - 3))).encoded())
            }
        }
    }

    /// Serves one client over `socket` (an ATT bearer) until the client disconnects, the
    /// socket fails, the calling task is cancelled or ``stop()`` runs; then closes `socket`.
    /// Never throws: the end of a connection is not an error of the server.
    public func serve(_ socket: SeqPacketSocket) async {
        let connection = Connection(socket: socket)
        let id = state.withLock { state -> Int? in
            guard !state.stopped else { return nil }
            state.nextConnection += 1
            state.connections[state.nextConnection] = connection
            return state.nextConnection
        }
        guard let id else {
            socket.close()
            return
        }
        defer {
            state.withLock { _ = $0.connections.removeValue(forKey: id) }
            socket.close()
        }
        do {
            // One byte more than the MTU allows, so an oversized PDU is seen (and refused).
            while let bytes = try await socket.receive(maxBytes: maxMTU + 1) {
                let attributes = state.withLock { $0.attributes }
                let response = connection.session.withLock { session in
                    attributes.respond(to: bytes, session: &session, maxMTU: maxMTU)
                }
                if let response { try await connection.send(response) }
            }
        } catch {
            // The client went away or the socket was closed: the connection is over.
        }
    }

    /// Closes every connection and makes later ``serve(_:)`` calls close their socket at once.
    /// Idempotent.
    public func stop() {
        state.withLock { $0.stopped = true }
        dropConnections()
    }

    /// Closes the connections served now (as when the link layer drops them); later
    /// ``serve(_:)`` calls are served as usual.
    func dropConnections() {
        let connections = state.withLock { Array($0.connections.values) }
        for connection in connections { connection.socket.close() }
    }

    private static func checkSize(_ metadata: [UInt8]) throws(PeerSyncError) {
        guard metadata.count <= PeerServiceAttributes.maxValueLength else {
            throw PeerSyncError(.tooLarge, "the metadata characteristic holds at most \(PeerServiceAttributes.maxValueLength) bytes (ATT's limit), got \(metadata.count)")
        }
    }
}
