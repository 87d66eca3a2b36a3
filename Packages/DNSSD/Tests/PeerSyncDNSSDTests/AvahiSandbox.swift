import Foundation
import PeerSyncCore
import Testing

/// The private system D-Bus and avahi-daemon the Avahi tests run against, made by the
/// `Packages/DNSSD/Tests/avahi-sandbox` script: two "hosts" (each a D-Bus and an avahi-daemon)
/// on the loopback interface of a network namespace of their own — never on a real interface.
/// This test process talks to host 1 (`DBUS_SYSTEM_BUS_ADDRESS`); `avahi-browse` and
/// `avahi-publish` run against host 2 as an independent peer on the same (simulated) network.
final class AvahiSandbox: Sendable {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("avahi-sandbox").path

    /// The sandbox of the running suite (bound by ``AvahiSandboxTrait``).
    @TaskLocal static var current: AvahiSandbox?

    /// Why no sandbox can run on this machine (not root, programs missing), or nil.
    static let unavailableReason: String? = {
        let (status, output) = Command.runBlocking(script, ["check"])
        guard status != 0 else { return nil }
        return "the Avahi tests cannot start their own avahi-daemon here: \(output.trimmingCharacters(in: .whitespacesAndNewlines))"
    }()

    let directory: String
    /// The D-Bus address of each host (index 0: host 1).
    let busAddresses: [String]

    private init(directory: String, busAddresses: [String]) {
        self.directory = directory
        self.busAddresses = busAddresses
    }

    /// Starts `hosts` hosts; a watchdog stops them if this process dies first.
    static func start(hosts: Int) async throws -> AvahiSandbox {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-avahi-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        let (status, output) = await Command.run(script, ["start", directory, "--hosts", "\(hosts)", "--watch", "\(getpid())"])
        let addresses = output.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("bus"), let equals = line.firstIndex(of: "=") else { return nil }
            return String(line[line.index(after: equals)...])
        }
        guard status == 0, addresses.count == hosts else {
            throw PeerSyncError(.discoveryUnavailable, "avahi-sandbox start failed (exit \(status)): \(output)")
        }
        return AvahiSandbox(directory: directory, busAddresses: addresses)
    }

    /// Kills host `host`'s avahi-daemon (SIGKILL: a crash, no goodbye packets).
    func stopAvahi(host: Int = 1) async throws {
        let (status, output) = await Command.run(Self.script, ["stop-avahi", directory, "\(host)"])
        guard status == 0 else { throw PeerSyncError(.io, "avahi-sandbox stop-avahi failed: \(output)") }
    }

    /// Starts host `host`'s avahi-daemon again; returns once it is ready.
    func startAvahi(host: Int = 1) async throws {
        let (status, output) = await Command.run(Self.script, ["start-avahi", directory, "\(host)"])
        guard status == 0 else { throw PeerSyncError(.io, "avahi-sandbox start-avahi failed: \(output)") }
    }

    /// Stops every process of the sandbox by PID and removes its directory.
    func stop() async {
        _ = await Command.run(Self.script, ["stop", directory])
    }

    /// The environment that points a child process at host `host`'s D-Bus.
    func environment(host: Int) -> [String: String] {
        ["DBUS_SYSTEM_BUS_ADDRESS": busAddresses[host - 1]]
    }
}

/// Runs a suite inside a fresh ``AvahiSandbox``: starts it before the suite's first test, points
/// this process's D-Bus at host 1, stops it (by PID) after the last test, also on failure.
struct AvahiSandboxTrait: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard AvahiSandbox.unavailableReason == nil else {
            try await function()   // the tests are disabled and say why
            return
        }
        let sandbox = try await AvahiSandbox.start(hosts: 2)
        // libavahi-client reads it each time a client connects: set before any test makes one.
        setenv("DBUS_SYSTEM_BUS_ADDRESS", sandbox.busAddresses[0], 1)
        do {
            try await AvahiSandbox.$current.withValue(sandbox) { try await function() }
        } catch {
            await sandbox.stop()
            unsetenv("DBUS_SYSTEM_BUS_ADDRESS")
            throw error
        }
        await sandbox.stop()
        unsetenv("DBUS_SYSTEM_BUS_ADDRESS")
    }
}

extension Trait where Self == AvahiSandboxTrait {
    /// Runs the suite inside a fresh ``AvahiSandbox``.
    static var avahiSandbox: Self { AvahiSandboxTrait() }
}
