// transport-bench [--json] [--transports loopback,ws,wss] [--sizes 1024,65536] [--total-mb 100] [--repeat 3] [--idle 1000]
// See BenchTransport.swift. Build with `swift build -c release --product transport-bench`.
import Foundation

var options = TransportBenchmark.Options()
var arguments = CommandLine.arguments.dropFirst()
func usage() -> Never {
    FileHandle.standardError.write(Data("usage: transport-bench [--json] [--transports loopback,ws,wss] [--sizes 1024,65536] [--total-mb N] [--repeat N] [--idle N]\n".utf8))
    exit(2)
}
while let argument = arguments.popFirst() {
    switch argument {
    case "--json": options.json = true
    case "--transports":
        guard let value = arguments.popFirst() else { usage() }
        options.transports = value.split(separator: ",").map(String.init)
    case "--sizes":
        guard let value = arguments.popFirst() else { usage() }
        let sizes = value.split(separator: ",").compactMap { Int($0) }
        guard !sizes.isEmpty, sizes.allSatisfy({ $0 > 0 }) else { usage() }
        options.sizes = sizes
    case "--total-mb":
        guard let value = arguments.popFirst(), let mb = Int(value), mb > 0 else { usage() }
        options.totalBytes = mb << 20
    case "--repeat":
        guard let value = arguments.popFirst(), let n = Int(value), n > 0 else { usage() }
        options.repeatCount = n
    case "--idle":
        guard let value = arguments.popFirst(), let n = Int(value), n > 0 else { usage() }
        options.idleConnections = n
    default: usage()
    }
}
do {
    try await TransportBenchmark.run(options)
} catch {
    FileHandle.standardError.write(Data("transport-bench: \(error)\n".utf8))
    exit(1)
}
