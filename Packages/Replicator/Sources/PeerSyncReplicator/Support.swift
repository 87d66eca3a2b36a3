import PeerSyncBLIP
import PeerSyncCore
import PeerSyncTransport

extension PeerSyncError.Code {
    /// The peer answered a replication request with an error (the context holds its
    /// `domain` and `status`).
    public static let replicationFailed = Self(rawValue: "replicationFailed")
    /// The peer refused the credentials (HTTP 401) or the operation (HTTP 403): permanent.
    public static let unauthorized = Self(rawValue: "unauthorized")
    /// The peer does not serve a configured collection: permanent.
    public static let collectionNotServed = Self(rawValue: "collectionNotServed")
}

/// Carries BLIP frames over a ``MessageConnection``: one binary message per frame; text
/// messages are ignored (as LiteCore does).
struct MessageConnectionChannel: BLIPFrameChannel {
    let connection: any MessageConnection

    func sendFrame(_ frame: [UInt8]) async throws {
        try await connection.send(.binary(frame))
    }

    func receiveFrame() async throws -> [UInt8]? {
        while let message = try await connection.receive() {
            if case .binary(let bytes) = message { return bytes }
        }
        return nil
    }

    func close(code: Int, reason: String) async {
        await connection.close(code: CloseCode(rawValue: UInt16(clamping: code)), reason: reason)
    }
}

extension BLIPConnection {
    /// A BLIP connection over a transport connection: each binary message is one frame, text
    /// messages are ignored. Call ``start()`` after registering handlers.
    public init(connection: any MessageConnection, tuning: BLIPTuning = BLIPTuning()) throws {
        try self.init(channel: MessageConnectionChannel(connection: connection), tuning: tuning)
    }
}

/// Runs `operation`, throwing `.timeout` if it has not finished after `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ what: String,
                              _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw PeerSyncError(.timeout, "no answer from the peer within \(limit)", context: ["waitingFor": what])
        }
        defer { group.cancelAll() }
        guard let result = try await group.next() else {
            throw PeerSyncError(.internalError, "timeout group ended without a result")
        }
        return result
    }
}

extension JSONValue {
    static func parse(_ bytes: [UInt8], _ what: String) throws -> JSONValue {
        do { return try JSONValue(parsing: bytes) } catch {
            throw PeerSyncError(.protocolError, "malformed JSON in \(what)", context: ["error": error.message])
        }
    }

    var json: [UInt8] { canonicalData }
}

/// An error to send back as a BLIP error response.
func blipError(_ domain: String, _ code: Int, _ message: String) -> PeerSyncError {
    PeerSyncError(.replicationFailed, message, context: ["blipDomain": domain, "blipCode": String(code)])
}

extension BLIPMessage {
    /// Throws a typed error if this is an error response.
    func checked(_ what: String) throws -> BLIPMessage {
        guard isError else { return self }
        let domain = errorDomain ?? "BLIP"
        let status = errorCode ?? 0
        let code: PeerSyncError.Code = (domain == "HTTP" && (status == 401 || status == 403)) ? .unauthorized : .replicationFailed
        throw PeerSyncError(code, "\(what) failed: \(domain)/\(status) \(bodyString)",
                            context: ["domain": domain, "status": String(status), "request": what])
    }
}

/// Blob references (`{"@type":"blob","digest":…}`) anywhere in a document body.
func blobReferences(in value: JSONValue) -> [[String: JSONValue]] {
    switch value {
    case .object(let object):
        if object["@type"]?.stringValue == "blob", object["digest"]?.stringValue != nil { return [object] }
        return object.values.flatMap { blobReferences(in: $0) }
    case .array(let array):
        return array.flatMap { blobReferences(in: $0) }
    default:
        return []
    }
}
