// RFC 6455 §4 opening handshake rules, as pure functions over HTTP messages.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

import PeerSyncCore

/// The opening-handshake rules of RFC 6455 for both ends.
public enum WebSocketHandshake {
    static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`: base64(SHA-1(key + GUID)).
    public static func acceptValue(forKey key: String) -> String {
        Base64.encode(SHA1.hash(Array((key + guid).utf8)))
    }

    /// A fresh `Sec-WebSocket-Key` from 16 random bytes.
    public static func makeKey<G: RandomNumberGenerator>(using generator: inout G) -> String {
        Base64.encode((0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    /// Whether the request asks for a WebSocket upgrade at all (`Upgrade: websocket`). Such
    /// a request is then validated by ``validateUpgradeRequest(_:)``; any other request is
    /// plain HTTP.
    public static func isUpgradeRequest(_ request: HTTPRequest) -> Bool {
        request.headers.containsToken("websocket", for: "Upgrade")
    }

    /// Why an upgrade request is refused: the HTTP status, a message and extra headers
    /// (426 carries `Sec-WebSocket-Version: 13`).
    public struct Rejection: Error, Sendable, Equatable {
        /// The HTTP status to answer with (400, 403, 426, …).
        public var status: Int
        /// Why, as plain text for the response body.
        public var message: String
        /// Extra headers of the response.
        public var headers: HTTPHeaders
        /// A rejection with these parts (default: no extra headers).
        public init(status: Int, message: String, headers: HTTPHeaders = HTTPHeaders()) {
            self.status = status
            self.message = message
            self.headers = headers
        }
        /// The response to send.
        public var response: HTTPResponse {
            var headers = self.headers
            headers.add("Connection", "close")
            return .text(status, message + "\n", headers: headers)
        }
    }

    /// A valid upgrade request's facts.
    public struct UpgradeRequest: Sendable, Equatable {
        /// The client's `Sec-WebSocket-Key` (validated: 16 bytes in base64).
        public var key: String
        /// The client's `Sec-WebSocket-Protocol` list, in its order of preference.
        public var subprotocols: [String]
    }

    /// Checks an upgrade request (RFC 6455 §4.2.1): GET, HTTP/1.1 or later, a `Host`,
    /// `Upgrade: websocket`, `Connection: Upgrade`, a `Sec-WebSocket-Key` of 16 base64 bytes
    /// (else 400), `Sec-WebSocket-Version: 13` (else 426 with the supported version).
    public static func validateUpgradeRequest(_ request: HTTPRequest) -> Result<UpgradeRequest, Rejection> {
        guard request.method == "GET" else {
            return .failure(Rejection(status: 405, message: "WebSocket upgrade requires GET",
                                      headers: ["Allow": "GET"]))
        }
        guard request.version.major == 1, request.version.minor >= 1 else {
            return .failure(Rejection(status: 400, message: "WebSocket upgrade requires HTTP/1.1"))
        }
        guard request.headers["Host"] != nil else {
            return .failure(Rejection(status: 400, message: "missing Host header"))
        }
        guard request.headers.containsToken("websocket", for: "Upgrade") else {
            return .failure(Rejection(status: 400, message: "missing `Upgrade: websocket` header"))
        }
        guard request.headers.containsToken("upgrade", for: "Connection") else {
            return .failure(Rejection(status: 400, message: "missing `Connection: Upgrade` header"))
        }
        let versions = request.headers.tokens(for: "Sec-WebSocket-Version")
        guard versions == ["13"] else {
            return .failure(Rejection(status: 426, message: "unsupported WebSocket version; this server speaks 13",
                                      headers: ["Sec-WebSocket-Version": "13"]))
        }
        let keys = request.headers.values(for: "Sec-WebSocket-Key")
        guard keys.count == 1, let decoded = Base64.decode(trimOWS(keys[0])), decoded.count == 16 else {
            return .failure(Rejection(status: 400, message: "missing or invalid Sec-WebSocket-Key"))
        }
        return .success(UpgradeRequest(key: trimOWS(keys[0]),
                                       subprotocols: request.headers.tokens(for: "Sec-WebSocket-Protocol")))
    }

    /// The server's choice: the first protocol of the client's list that the server supports.
    public static func chooseSubprotocol(offered: [String], supported: [String]) -> String? {
        offered.first { supported.contains($0) }
    }

    /// The `101 Switching Protocols` answer.
    public static func switchingProtocolsResponse(key: String, subprotocol: String?,
                                                  extraHeaders: HTTPHeaders = HTTPHeaders()) -> HTTPResponse {
        var headers: HTTPHeaders = [
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Accept": acceptValue(forKey: key),
        ]
        if let subprotocol { headers.add("Sec-WebSocket-Protocol", subprotocol) }
        for field in extraHeaders { headers.add(field.name, field.value) }
        return HTTPResponse(status: 101, headers: headers)
    }

    /// The client's upgrade request. `hostHeader` is `host[:port]`.
    public static func clientRequest(target: String, hostHeader: String, key: String, subprotocols: [String],
                                     extraHeaders: HTTPHeaders, authorization: String?) -> HTTPRequest {
        var headers: HTTPHeaders = [
            "Host": hostHeader,
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13",
        ]
        if !subprotocols.isEmpty { headers.add("Sec-WebSocket-Protocol", subprotocols.joined(separator: ",")) }
        if let authorization { headers.add("Authorization", authorization) }
        let reserved = ["host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                        "sec-websocket-protocol", "sec-websocket-extensions"]
        for field in extraHeaders where !reserved.contains(asciiLowercased(field.name)) {
            headers.add(field.name, field.value)
        }
        return HTTPRequest(method: "GET", target: target, headers: headers)
    }

    /// Checks the server's 101 answer (RFC 6455 §4.1) and returns the accepted subprotocol.
    /// Throws `.webSocketHandshakeFailed` for a non-101 status or invalid headers, and
    /// `.webSocketSubprotocolRejected` when the client offered subprotocols and the server
    /// accepted none, or chose one that was not offered.
    public static func validateServerResponse(_ response: HTTPResponse, key: String,
                                              offeredSubprotocols: [String]) throws(PeerSyncError) -> String? {
        guard response.status == 101 else {
            throw PeerSyncError(.webSocketHandshakeFailed,
                                "server answered \(response.status) \(response.reason) instead of 101",
                                context: ["status": String(response.status)])
        }
        guard response.headers.containsToken("websocket", for: "Upgrade"),
              response.headers.containsToken("upgrade", for: "Connection") else {
            throw PeerSyncError(.webSocketHandshakeFailed, "101 answer without `Upgrade: websocket` / `Connection: Upgrade`",
                                context: ["status": "101"])
        }
        guard let accept = response.headers["Sec-WebSocket-Accept"], accept == acceptValue(forKey: key) else {
            throw PeerSyncError(.webSocketHandshakeFailed, "missing or wrong Sec-WebSocket-Accept",
                                context: ["status": "101"])
        }
        if !response.headers.tokens(for: "Sec-WebSocket-Extensions").isEmpty {
            throw PeerSyncError(.webSocketHandshakeFailed, "server enabled an extension the client did not offer",
                                context: ["status": "101"])
        }
        let chosen = response.headers.tokens(for: "Sec-WebSocket-Protocol")
        if chosen.count > 1 {
            throw PeerSyncError(.webSocketSubprotocolRejected, "server chose several subprotocols")
        }
        if let protocolName = chosen.first {
            guard offeredSubprotocols.contains(protocolName) else {
                throw PeerSyncError(.webSocketSubprotocolRejected,
                                    "server chose subprotocol `\(protocolName)` that the client did not offer")
            }
            return protocolName
        }
        if !offeredSubprotocols.isEmpty {
            throw PeerSyncError(.webSocketSubprotocolRejected,
                                "server accepted none of the subprotocols \(offeredSubprotocols.joined(separator: ", "))")
        }
        return nil
    }
}
