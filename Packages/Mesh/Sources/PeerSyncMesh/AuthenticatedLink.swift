import PeerSyncCore
import PeerSyncTransport

/// A connection whose peer proved its identity in a handshake of its own: every call goes to
/// the connection underneath, and ``peerCertificateChain`` is the chain the handshake verified
/// (a loopback link carries none itself). Used by ``InProcessMeshLinks``.
final class AuthenticatedLink: MessageConnection {
    let underlying: any MessageConnection
    let peerCertificateChain: [[UInt8]]

    init(_ underlying: any MessageConnection, peerCertificateChain: [[UInt8]]) {
        self.underlying = underlying
        self.peerCertificateChain = peerCertificateChain
    }

    func send(_ message: TransportMessage) async throws { try await underlying.send(message) }
    func receive() async throws -> TransportMessage? { try await underlying.receive() }
    func close(code: CloseCode, reason: String) async { await underlying.close(code: code, reason: reason) }
    var closeInfo: CloseInfo? { underlying.closeInfo }
    var remoteAddress: String? { underlying.remoteAddress }
    var kind: TransportKind { underlying.kind }
    var maxMessageSize: Int { underlying.maxMessageSize }
}

/// The messages of ``InProcessMeshLinks``'s simulated TLS handshake. The dialler sends
/// `hello` with its chain; the acceptor checks it and answers `reject` or its own `hello`; the
/// dialler checks that and answers `reject` or `ready`. Only after `ready` does either side
/// hand the link on, so a link rejected by either side never reaches a mesh — as a TLS
/// handshake that fails on either certificate.
enum SimulatedHandshakeMessage: Equatable {
    case hello(chain: [[UInt8]])
    case reject(reason: String)
    case ready

    var encoded: [UInt8] {
        switch self {
        case .hello(let chain):
            var bytes: [UInt8] = [1, UInt8(clamping: chain.count)]
            for der in chain.prefix(255) {
                let length = UInt32(der.count)
                bytes += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
                bytes += der
            }
            return bytes
        case .reject(let reason):
            return [2] + Array(reason.utf8)
        case .ready:
            return [3]
        }
    }

    /// Parses one message; throws ``PeerSyncError/Code/protocolError`` for anything else.
    init(decoding message: TransportMessage?) throws(PeerSyncError) {
        guard let message, case .binary(let bytes) = message, let tag = bytes.first else {
            throw PeerSyncError(.protocolError, "the peer broke off the mesh link handshake")
        }
        switch tag {
        case 1 where bytes.count >= 2:
            var chain: [[UInt8]] = []
            var offset = 2
            for _ in 0..<Int(bytes[1]) {
                guard offset + 4 <= bytes.count else { throw Self.malformed }
                let length = Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
                offset += 4
                guard length > 0, offset + length <= bytes.count else { throw Self.malformed }
                chain.append(Array(bytes[offset..<offset + length]))
                offset += length
            }
            guard offset == bytes.count else { throw Self.malformed }
            self = .hello(chain: chain)
        case 2:
            self = .reject(reason: String(decoding: bytes.dropFirst(), as: UTF8.self))
        case 3 where bytes.count == 1:
            self = .ready
        default:
            throw Self.malformed
        }
    }

    private static var malformed: PeerSyncError { PeerSyncError(.protocolError, "malformed mesh link handshake message") }
}
