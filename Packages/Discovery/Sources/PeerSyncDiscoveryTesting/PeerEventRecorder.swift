import PeerSyncCore
import PeerSyncDiscovery

/// Consumes one browser in a task of its own and keeps every event, the peers visible by the
/// events so far, and every breach of the event rules (`PeerEvent`'s order per name, events
/// of the browsed group only, the discovery's kind on every peer, an address on every peer).
/// The conformance suite's eyes; tests of code above discovery can use it too.
///
/// Threading: any thread; the waits poll every 10 ms and throw once their timeout passed.
public final class PeerEventRecorder: Sendable {
    private struct State {
        var events: [PeerEvent] = []
        var visible: [String: DiscoveredPeer] = [:]
        var violations: [String] = []
        var ended = false
    }

    /// The browser being consumed.
    public let browser: PeerBrowser
    /// Names the browser in failures.
    public let label: String
    private let state = LockedValue(State())
    private let consumer: LockedValue<Task<Void, Never>?> = LockedValue(nil)

    /// Starts consuming `browser` of a discovery of `kind`; `label` names it in failures.
    public init(_ browser: PeerBrowser, kind: DiscoveryKind, label: String) {
        self.browser = browser
        self.label = label
        let state = self.state
        let group = browser.group
        let task = Task {
            for await event in browser {
                state.withLock { state in
                    state.events.append(event)
                    let peer = event.peer
                    if peer.group != group {
                        state.violations.append("\(event) is about group \(peer.group), not the browsed \(group)")
                    }
                    if peer.discovery != kind {
                        state.violations.append("\(event) says discovery \(peer.discovery); the discovery's kind is \(kind)")
                    }
                    if peer.addresses.isEmpty {
                        state.violations.append("\(event) has no address")
                    }
                    switch event {
                    case .appeared:
                        if state.visible[peer.name] != nil {
                            state.violations.append("'\(peer.name)' appeared twice without disappearing in between")
                        }
                        state.visible[peer.name] = peer
                    case .updated:
                        if state.visible[peer.name] == nil {
                            state.violations.append("'\(peer.name)' was updated while not visible (no appeared before)")
                        }
                        state.visible[peer.name] = peer
                    case .disappeared:
                        if state.visible[peer.name] == nil {
                            state.violations.append("'\(peer.name)' disappeared while not visible (no appeared before)")
                        }
                        state.visible[peer.name] = nil
                    }
                }
            }
            state.withLock { $0.ended = true }
        }
        consumer.withLock { $0 = task }
    }

    /// Every event so far.
    public var events: [PeerEvent] { state.withLock { $0.events } }
    /// The peers visible by the events so far, by name.
    public var visible: [String: DiscoveredPeer] { state.withLock { $0.visible } }
    /// Whether the browse ended (the sequence returned nil).
    public var ended: Bool { state.withLock { $0.ended } }

    /// The events about the announcement `name`.
    public func events(about name: String) -> [PeerEvent] { events.filter { $0.peer.name == name } }

    /// Throws if any event broke the rules so far.
    public func checkRules() throws {
        let violations = state.withLock { $0.violations }
        if let first = violations.first {
            throw CheckFailure("browser \(label): \(first)" + (violations.count > 1 ? " (and \(violations.count - 1) more)" : ""))
        }
    }

    /// Waits until `condition` holds for the visible peers (checking the rules meanwhile).
    public func wait(_ what: String, timeout: Duration,
              until condition: ([String: DiscoveredPeer]) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while true {
            try checkRules()
            if condition(visible) { return }
            guard ContinuousClock.now < deadline else {
                let shown = visible.values.map(\.description).sorted().joined(separator: "; ")
                throw CheckFailure("browser \(label): timed out after \(timeout) waiting for \(what); visible: [\(shown)]")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Waits until the peer named `name` is visible (and satisfies `condition`) and returns it.
    @discardableResult
    public func waitForPeer(named name: String, timeout: Duration,
                     matching condition: @escaping (DiscoveredPeer) -> Bool = { _ in true },
                     _ what: String? = nil) async throws -> DiscoveredPeer {
        try await wait(what ?? "'\(name)' to appear", timeout: timeout) { visible in
            visible[name].map(condition) ?? false
        }
        guard let peer = visible[name] else { throw CheckFailure("browser \(label): '\(name)' vanished while checking") }
        return peer
    }

    /// Waits until `name` is not visible (after having been, or never).
    public func waitForAbsence(of name: String, timeout: Duration, _ what: String? = nil) async throws {
        try await wait(what ?? "'\(name)' to disappear", timeout: timeout) { $0[name] == nil }
    }

    /// Waits until the browse ended (the sequence returned nil).
    public func waitForEnd(_ what: String, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while !ended {
            guard ContinuousClock.now < deadline else {
                throw CheckFailure("browser \(label): timed out after \(timeout) waiting for \(what)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Cancels the consuming task (as a consumer that stops iterating does).
    public func cancelConsumer() {
        consumer.withLock { $0?.cancel() }
    }
}

/// Consumes one `Discovery.statusUpdates()` stream in a task of its own and keeps what it
/// yielded. Threading: any thread.
public final class DiscoveryStatusRecorder: Sendable {
    private let state = LockedValue<(statuses: [DiscoveryStatus], ended: Bool)>(([], false))
    private let consumer: Task<Void, Never>

    /// Starts consuming a new status stream of `host`.
    public init(_ host: any Discovery) {
        let state = self.state
        let updates = host.statusUpdates()
        consumer = Task {
            for await status in updates { state.withLock { $0.statuses.append(status) } }
            state.withLock { $0.ended = true }
        }
    }

    deinit { consumer.cancel() }

    /// Every status so far.
    public var statuses: [DiscoveryStatus] { state.withLock { $0.statuses } }
    /// Whether the stream ended.
    public var ended: Bool { state.withLock { $0.ended } }

    /// Waits until a status satisfying `condition` was yielded; returns it.
    @discardableResult
    public func wait(_ what: String, timeout: Duration, for condition: (DiscoveryStatus) -> Bool) async throws -> DiscoveryStatus {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = statuses.first(where: condition) { return found }
            guard ContinuousClock.now < deadline else {
                throw CheckFailure("timed out after \(timeout) waiting for \(what); the status stream said \(statuses)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
