import Foundation

/// Where SwiftPM put the package's executables: the directory of the running test bundle
/// (`.build/<triple>/debug`). Test targets list the executables they run as dependencies, so
/// that they are built next to them.
public enum Products {
    /// The products directory (on Apple platforms the test bundle is a directory,
    /// `…/X.xctest/Contents/MacOS/X`: its parent).
    public static var directory: URL {
        let executable = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        var directory = executable.resolvingSymlinksInPath().deletingLastPathComponent()
        while directory.pathComponents.contains(where: { $0.hasSuffix(".xctest") }) {
            directory.deleteLastPathComponent()
        }
        return directory
    }

    /// The path of the executable product `name` (it may not exist: check with
    /// `FileManager.isExecutableFile(atPath:)` where a test wants a clear message).
    public static func path(_ name: String) -> String {
        directory.appendingPathComponent(name).path
    }
}

/// A fresh directory under the system's temporary directory, named `<prefix>-<UUID>`,
/// removed when `body` returns or throws.
public func withTemporaryDirectory<T>(prefix: String = "peersync-test", _ body: (String) async throws -> T) async throws -> T {
    let dir = try makeTemporaryDirectory(prefix: prefix)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    return try await body(dir)
}

/// Creates a fresh directory `<tmp>/<prefix>-<UUID>` and returns its path; the caller removes it.
public func makeTemporaryDirectory(prefix: String = "peersync-test") throws -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}
