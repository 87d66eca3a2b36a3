// A `MessageConnection` over a Unix-domain stream socket, written against the public API of
// PeerSyncTransport only.
//
// Wire format: frames of [type: 1 byte][length: 4 bytes, big-endian][payload]. Types: 0 binary
// message, 1 text message (UTF-8), 2 close (payload: 2-byte code + UTF-8 reason). The close
// handshake is WebSocket's: the side that closes sends a close frame after every message it
// accepted; the other side answers with a close frame; the first side then shuts the socket.
// End of stream without a close frame means the link broke.
//
// How the contract is met:
// - one bounded `AsyncMessageQueue` per direction: the outbox (send → writer thread) gives
//   backpressure, whole messages and order; the inbox (reader thread → receive) holds at most
//   4 MiB of received messages, after which the reader thread stops reading and the kernel
//   buffers fill up, which blocks the peer's writer, which fills the peer's outbox;
// - finishing the queues gives the close semantics (a clean finish: `nil` after the buffered
//   messages, suspended senders throw `.connectionClosed`; a finish with `.connectionReset`
//   when the link broke);
// - two threads per connection do the blocking socket calls (a reader and a writer), so no
//   task ever blocks the cooperative pool. That costs two threads per connection: fine for
//   a few peers on one machine; a transport for thousands of connections would use the
//   epoll reactor (`PeerSyncPosix`) instead.

import Foundation
import PeerSyncCore
import PeerSyncTransport
import Synchronization

/// One end of a Unix-domain socket connection (see the file's header for the wire format).
/// Thread-safe: every method may be called from any task.
final class UnixSocketConnection: MessageConnection {
    /// The largest message in either direction: 32 MiB (a frame's length field could say more;
    /// a longer frame from the peer breaks the link as a protocol error).
    static let maxMessageBytes = 32 << 20
    /// How long ``close(code:reason:)`` waits for the peer's answer before dropping the link.
    static let closeTimeout: Duration = .seconds(10)

    private enum FrameType: UInt8 {
        case binary = 0, text = 1, close = 2
    }

    private struct State {
        /// How the connection ended; nil while open. The first close (ours or the peer's) decides.
        var closeInfo: CloseInfo?
        /// The close frame the writer sends once the outbox is drained: our own close, or the
        /// answer to the peer's.
        var closeFrame: CloseInfo?
        /// Whether this side started the close handshake (a close frame from the peer is then
        /// its answer).
        var closing = false
    }

    let socket: SocketDescriptor
    let remoteAddress: String?
    var kind: TransportKind { .custom("unix-socket") }
    var peerCertificateChain: [[UInt8]] { [] }
    var maxMessageSize: Int { Self.maxMessageBytes }
    var closeInfo: CloseInfo? { state.withLock { $0.closeInfo } }

    private let state = Mutex(State())
    private let inbox = AsyncMessageQueue<TransportMessage>(maxCount: 64, maxBytes: 4 << 20)
    private let outbox = AsyncMessageQueue<TransportMessage>(maxCount: 64, maxBytes: 4 << 20)
    /// Finished (never sent to) when the link is gone: what `close` waits for.
    private let ended = AsyncMessageQueue<Bool>(maxCount: 1)

    /// Takes over a connected socket and starts its reader and writer threads.
    init(socket: SocketDescriptor, remoteAddress: String) {
        self.socket = socket
        self.remoteAddress = remoteAddress
        let reader = Thread { [self] in readLoop() }
        reader.name = "unix-socket reader"
        reader.start()
        let writer = Thread { [self] in writeLoop() }
        writer.name = "unix-socket writer"
        writer.start()
    }

    func send(_ message: TransportMessage) async throws {
        guard message.byteCount <= Self.maxMessageBytes else {
            throw PeerSyncError(.tooLarge, "message of \(message.byteCount) bytes, larger than maxMessageSize \(Self.maxMessageBytes)")
        }
        if let info = closeInfo {
            throw PeerSyncError(info.wasClean ? .connectionClosed : .connectionReset, "the connection is closed (\(info))")
        }
        // Suspends while the outbox is full (backpressure); throws once it is finished.
        try await outbox.send(message)
    }

    func receive() async throws -> TransportMessage? {
        try await inbox.receive()
    }

    func close(code: CloseCode, reason: String) async {
        let info = CloseInfo(code: code.isSendable ? code : .normal, reason: reason)
        let first = state.withLock { state in
            guard state.closeInfo == nil else { return false }
            state.closeInfo = info
            state.closeFrame = info
            state.closing = true
            return true
        }
        if first {
            _ = inbox.finish(discardingBuffered: true)  // this side reads nothing more
            _ = outbox.finish()                          // accepted messages go out, then the close frame
        }
        // Wait for the peer's answer (or the link to break), at most `closeTimeout`.
        let answered = await withTaskGroup(of: Bool.self) { group in
            group.addTask { [ended] in (try? await ended.receive()) == nil }
            group.addTask {
                try? await Task.sleep(for: Self.closeTimeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        if !answered { linkBroke("the peer did not answer the close within \(Self.closeTimeout)") }
    }

    /// Drops the link without a close handshake (what a crashed peer looks like to the other side).
    func abort() {
        linkBroke("aborted")
    }

    // MARK: Threads

    /// The reader thread: frames from the socket into the inbox, until the close handshake
    /// completes or the link breaks.
    private func readLoop() {
        var header = [UInt8](repeating: 0, count: 5)
        while true {
            do {
                guard try header.withUnsafeMutableBytes({ try socket.receiveAll(into: $0) }) else {
                    return linkBroke("the peer vanished (end of stream without a close)")
                }
                let length = header[1...4].reduce(0) { $0 << 8 | Int($1) }
                guard let type = FrameType(rawValue: header[0]), length <= Self.maxMessageBytes else {
                    return linkBroke("protocol error: bad frame header \(header)")
                }
                var payload = [UInt8](repeating: 0, count: length)
                guard try payload.withUnsafeMutableBytes({ try socket.receiveAll(into: $0) }) else {
                    return linkBroke("the peer vanished in the middle of a message")
                }
                switch type {
                case .binary, .text:
                    let message: TransportMessage = type == .text ? .text(String(decoding: payload, as: UTF8.self)) : .binary(payload)
                    // Blocks this thread while the inbox is full. After our own close the inbox
                    // is finished and the message is dropped, as the contract says.
                    _ = try? waitFor { [inbox] in try await inbox.send(message) }
                case .close:
                    return closeFrameArrived(payload)
                }
            } catch {
                return linkBroke("\(error)")
            }
        }
    }

    /// The peer's close frame: the answer to ours (the handshake is complete), or its own close,
    /// which the writer answers once the outbox is finished.
    private func closeFrameArrived(_ payload: [UInt8]) {
        let code = payload.count >= 2 ? CloseCode(rawValue: UInt16(payload[0]) << 8 | UInt16(payload[1])) : .normal
        let peer = CloseInfo(code: code, reason: String(decoding: payload.dropFirst(2), as: UTF8.self))
        let wasAnswer = state.withLock { state in
            if state.closing { return true }
            state.closeInfo = state.closeInfo ?? peer
            state.closeFrame = peer
            return false
        }
        if wasAnswer {
            socket.shutdownBoth()
            _ = ended.finish()
        } else {
            _ = inbox.finish()                          // our reader gets what arrived, then nil
            _ = outbox.finish(discardingBuffered: true) // the peer reads nothing more; answer at once
        }
    }

    /// The writer thread: messages from the outbox to the socket; once the outbox is finished
    /// cleanly, the close frame.
    private func writeLoop() {
        while true {
            let next: TransportMessage?
            do {
                next = try waitFor { [outbox] in try await outbox.receive() }
            } catch {
                return  // finished with an error: the link broke, nothing more to send
            }
            do {
                if let message = next {
                    switch message {
                    case .binary(let bytes): try writeFrame(.binary, bytes)
                    case .text(let text): try writeFrame(.text, Array(text.utf8))
                    }
                    continue
                }
                let (frame, answering) = state.withLock { ($0.closeFrame, !$0.closing) }
                if let frame {
                    let code = frame.code.rawValue
                    try writeFrame(.close, [UInt8(code >> 8), UInt8(code & 0xFF)] + Array(frame.reason.utf8))
                }
                if answering {  // the handshake is complete on this side
                    socket.shutdownBoth()
                    _ = ended.finish()
                }
                return
            } catch {
                return linkBroke("\(error)")
            }
        }
    }

    private func writeFrame(_ type: FrameType, _ payload: [UInt8]) throws {
        let length = UInt32(payload.count)
        let header: [UInt8] = [type.rawValue, UInt8(length >> 24), UInt8(length >> 16 & 0xFF),
                               UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
        try header.withUnsafeBytes { try socket.sendAll($0) }
        try payload.withUnsafeBytes { try socket.sendAll($0) }
    }

    /// The link is gone without (or before the end of) a close handshake: everything waiting
    /// ends with `.connectionReset`. After a clean close it only makes sure the socket is shut.
    private func linkBroke(_ reason: String) {
        state.withLock { state in
            if state.closeInfo == nil { state.closeInfo = CloseInfo(code: .abnormalClosure, reason: reason) }
        }
        let error = PeerSyncError(.connectionReset, "the connection broke: \(reason)")
        _ = inbox.finish(throwing: error)
        _ = outbox.finish(throwing: error)
        socket.shutdownBoth()
        _ = ended.finish()
    }
}
