import PeerSyncCore

/// A BLIP error reply as a value: the `Error-Domain` and `Error-Code` properties and the
/// message in the body (protocol §3). Domains in use: `BLIP` (the messaging layer: 404 no
/// handler, 500 handler failure, 503 session gone), `HTTP` (HTTP-style statuses of the
/// replication protocol: 400, 403, 404, 409, 422, 507, …) and `LiteCore` (LiteCore's own
/// codes, e.g. 7 NotFound).
///
/// A handler that throws a `PeerSyncError` carrying a `BLIPError` (see
/// `PeerSyncError.init(_:blip:context:)` and `PeerSyncError.blipError`) is answered with exactly
/// that error reply; any other thrown error is answered `BLIP`/500 with the error's message.
public struct BLIPError: PeerSyncErrorDetail, CustomStringConvertible {
    /// `Error-Domain`: `BLIP`, `HTTP`, `LiteCore`, …
    public var domain: String
    /// `Error-Code`, interpreted within ``domain``.
    public var code: Int
    /// The human-readable message (the reply's body, UTF-8).
    public var message: String

    /// An error reply of `domain` and `code` with `message` as its body.
    public init(domain: String, code: Int, message: String) {
        self.domain = domain
        self.code = code
        self.message = message
    }

    /// An `HTTP`-domain error (the statuses the replication protocol answers with).
    public static func http(_ code: Int, _ message: String) -> BLIPError {
        BLIPError(domain: "HTTP", code: code, message: message)
    }

    /// A `BLIP`-domain error (the messaging layer's own: 400, 404, 500, 503).
    public static func blip(_ code: Int, _ message: String) -> BLIPError {
        BLIPError(domain: "BLIP", code: code, message: message)
    }

    /// `domain/code message`, e.g. `HTTP/409 conflict`.
    public var description: String { "\(domain)/\(code) \(message)" }
}

extension PeerSyncError {
    /// An error that carries `blip` as its `detail`, with `blip`'s message; `code` says what
    /// it means to the local side (e.g. the replicator's `.replicationFailed`).
    public init(_ code: Code, blip: BLIPError, context: [String: String] = [:]) {
        self.init(code, blip.message, context: context, detail: blip)
    }

    /// The BLIP error reply this error carries: the one a handler answers with, or the one a
    /// peer answered a request with. Nil for other errors.
    public var blipError: BLIPError? { detail(as: BLIPError.self) }
}

extension BLIPMessage {
    /// An error reply carrying `error`'s domain, code and message.
    public static func error(_ error: BLIPError) -> BLIPMessage {
        .error(domain: error.domain, code: error.code, message: error.message)
    }

    /// The error this message carries if it is an error reply (`Error-Domain` default `BLIP`,
    /// `Error-Code` default 0, the body as the message); nil otherwise.
    public var blipError: BLIPError? {
        guard type == .error else { return nil }
        return BLIPError(domain: properties["Error-Domain"] ?? "BLIP", code: properties.int("Error-Code") ?? 0,
                         message: bodyString)
    }
}
