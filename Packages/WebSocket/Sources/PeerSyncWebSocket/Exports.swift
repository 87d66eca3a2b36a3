// The codec's values — `HTTPRequest`, `HTTPResponse`, `HTTPHeaders`, `WebSocketRole`,
// `WebSocketFrameDecoder`, `WebSocketHandshake`, their error codes — appear in this module's
// API (routes, auth hooks, connections), so `import PeerSyncWebSocket` brings them along.
// The socket layer (PeerSyncPosix) is not re-exported: import it to use `TCPStream` or
// `TCPListener` directly.
@_exported import PeerSyncWebSocketCodec
