import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncTestSupport

/// Runs a client and a server handshake over a fresh in-memory pair.
func handshakePair(client: TLSConfiguration, server: TLSConfiguration, capacity: Int = 16 * 1024)
    async -> (client: Result<TLSStream, PeerSyncError>, server: Result<TLSStream, PeerSyncError>) {
    let pair = ByteStreamPair(capacity: capacity)
    async let s = capture { () async throws(PeerSyncError) in try await TLSStream.handshake(over: pair.b, configuration: server) }
    async let c = capture { () async throws(PeerSyncError) in try await TLSStream.handshake(over: pair.a, configuration: client) }
    return await (c, s)
}

func capture<T>(_ body: () async throws(PeerSyncError) -> T) async -> Result<T, PeerSyncError> {
    do { return .success(try await body()) } catch { return .failure(error) }
}

extension Result {
    var value: Success? { if case .success(let v) = self { return v }; return nil }
    var error: Failure? { if case .failure(let e) = self { return e }; return nil }
}

/// Reads until `count` bytes arrived or the stream ends.
func readExactly(_ stream: some ByteStream, _ count: Int) async throws -> [UInt8] {
    var out: [UInt8] = []
    while out.count < count {
        guard let chunk = try await stream.read(maxBytes: count - out.count) else { break }
        out += chunk
    }
    return out
}

/// A temporary directory removed by `cleanup()`.
struct TempDir {
    let path: String
    init() throws {
        path = NSTemporaryDirectory() + "peersync-auth-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
    func file(_ name: String) -> String { path + "/" + name }
}
