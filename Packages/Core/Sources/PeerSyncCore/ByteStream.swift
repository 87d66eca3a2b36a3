/// An ordered, reliable, bidirectional stream of bytes: a TCP socket, a BLE L2CAP channel, an
/// in-memory pipe, or TLS layered over any of those. WebSocket framing and TLS are written
/// against this protocol once, so every link kind reuses them.
///
/// Contract:
/// - `read` returns the next available bytes (at least one, at most `maxBytes`), or `nil` at
///   end of stream (the peer closed its sending side cleanly). It throws on a broken stream.
///   Only one `read` may be outstanding at a time.
/// - `write` returns when all bytes were handed to the layer below (for sockets: the kernel);
///   it suspends while the peer is not reading (backpressure). Only one `write` may be
///   outstanding at a time; reads and writes may run concurrently.
/// - `close` is idempotent; it ends pending reads and writes with
///   ``PeerSyncError/Code/closed``.
public protocol ByteStream: Sendable {
    /// The next available bytes (1 to `maxBytes`), or nil at the end of the stream; throws on a
    /// broken stream. One read at a time (see the contract above).
    func read(maxBytes: Int) async throws -> [UInt8]?
    /// Hands all of `bytes` to the layer below, suspending while the peer is not reading; throws on a
    /// closed or broken stream. One write at a time (see the contract above).
    func write(_ bytes: [UInt8]) async throws
    /// Half-closes the sending side where the stream supports it (TCP `shutdown(SHUT_WR)`);
    /// other streams close fully.
    func shutdownOutput() async
    /// Closes both directions; pending reads and writes end with `PeerSyncError.Code.closed`.
    /// Idempotent.
    func close() async
    /// The peer's address as text, e.g. `127.0.0.1:4984`, if known.
    var remoteAddress: String? { get }
}
