import Foundation

// Minimal dispatcher for `serve` and `sync` (the full CLI dispatcher replaces this file).
let arguments = Array(CommandLine.arguments.dropFirst())
var commandName: String?
var index = 0
while index < arguments.count {
    if ["--db", "--backend", "--collection"].contains(arguments[index]) { index += 2; continue }
    commandName = arguments[index]
    break
}
var status: Int32 = 2
do {
    switch commandName {
    case "serve": status = try await ServeCommand.run(arguments)
    case "sync": status = try await SyncCommand.run(arguments)
    default: FileHandle.standardError.write(Data("usage: peersync --db DIR serve|sync ...\n".utf8))
    }
} catch let error as ReplicationCLIUsageError {
    ReplicationCLI.fail(error.message)
    status = 2
} catch {
    ReplicationCLI.fail("\(error)")
    status = 1
}
exit(status)
