import Foundation
import PeerSyncCore

/// The one-line progress display of long commands (`import`, `export`, `sync`, `bench`) on
/// standard error:
///
/// ```
/// import  [##########..........]  50%  30000 docs  41234 docs/s
/// export  12000/60000 docs  20%  98765 docs/s
/// ```
///
/// The line is redrawn in place (`\r`) at most ten times a second, and ended with a newline by
/// ``finish(_:of:)``. It is shown only when standard error is a terminal (`isatty(2)`); the
/// hidden environment variable `PEERSYNC_PROGRESS=1` forces it on (tests check it through a
/// pipe), `PEERSYNC_PROGRESS=0` forces it off. A disabled line costs one branch per update.
///
/// While a line is drawn, ``printError(_:)`` first ends it with a newline, so an error or a
/// notice always starts on a line of its own.
///
/// Thread-safe: updates may come from any thread or task (the replicator's listeners do).
final class ProgressLine: Sendable {
    /// Whether progress is shown: `PEERSYNC_PROGRESS=1|0` forces it on or off, otherwise only
    /// when standard error is a terminal.
    static var isEnabled: Bool {
        switch ProcessInfo.processInfo.environment["PEERSYNC_PROGRESS"] {
        case "1": return true
        case "0": return false
        default: return isatty(2) == 1
        }
    }

    /// Shortest time between two redraws (at most ten a second).
    static let redrawInterval: Duration = .milliseconds(100)

    /// Whether some progress line is on screen without its newline (shared by every line of
    /// the process, so that ``printError(_:)`` can end it).
    private static let lineOpen = LockedValue(false)

    private struct State {
        var started: ContinuousClock.Instant
        var lastDraw: ContinuousClock.Instant?
        var finished = false
    }

    let label: String
    let unit: String
    let isShown: Bool
    private let state: LockedValue<State>

    /// A progress line `label` counting `unit`s (e.g. "docs", "changes"); nothing is drawn
    /// before the first update. `enabled` defaults to ``isEnabled``.
    init(_ label: String, unit: String, enabled: Bool = ProgressLine.isEnabled) {
        self.label = label
        self.unit = unit
        isShown = enabled
        state = LockedValue(State(started: .now))
    }

    /// Reports `count` units done, of `total` when known (nil: no bar, no percentage);
    /// `fraction` (0…1) replaces `count/total` as the bar's measure when the work is measured
    /// in something else (an import's bytes read). Redraws at most every ``redrawInterval``.
    func update(_ count: Int, of total: Int? = nil, fraction: Double? = nil) {
        guard isShown else { return }
        let now = ContinuousClock.now
        let line: String? = state.withLock { state in
            guard !state.finished else { return nil }
            if let last = state.lastDraw, now - last < Self.redrawInterval { return nil }
            state.lastDraw = now
            return render(count, of: total, fraction: fraction, elapsed: now - state.started)
        }
        if let line { Self.draw("\r" + line + "\u{1B}[K", open: true) }
    }

    /// Draws the final state and ends the line (once; later calls do nothing). Draws nothing
    /// when no update was ever drawn and `count` is 0. `total` and `fraction` as in
    /// ``update(_:of:fraction:)``.
    func finish(_ count: Int, of total: Int? = nil, fraction: Double? = nil) {
        guard isShown else { return }
        let now = ContinuousClock.now
        let line: String? = state.withLock { state in
            guard !state.finished else { return nil }
            state.finished = true
            if state.lastDraw == nil && count == 0 { return nil }
            return render(count, of: total, fraction: fraction, elapsed: now - state.started)
        }
        if let line { Self.draw("\r" + line + "\u{1B}[K\n", open: false) }
    }

    /// The text of the line (without `\r`): label, bar and percentage when the total or the
    /// fraction is known, the count (of the total), and the rate per second.
    func render(_ count: Int, of total: Int?, fraction: Double?, elapsed: Duration) -> String {
        var parts = [label]
        let share = fraction ?? total.map { $0 > 0 ? Double(count) / Double($0) : 1 }
        if let share {
            let clamped = min(max(share, 0), 1)
            let width = 20
            let filled = Int((clamped * Double(width)).rounded(.down))
            parts.append("[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]")
            parts.append("\(Int((clamped * 100).rounded(.down)))%")
        }
        parts.append(total.map { "\(count)/\($0) \(unit)" } ?? "\(count) \(unit)")
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        if seconds > 0 { parts.append("\(Int((Double(count) / seconds).rounded())) \(unit)/s") }
        return parts.joined(separator: "  ")
    }

    /// Ends a drawn progress line with a newline, so that the next write starts a line of its
    /// own. Used by ``printError(_:)``.
    static func endOpenLine() {
        lineOpen.withLock { open in
            if open { writeToStandardError("\n") }
            open = false
        }
    }

    /// Erases a drawn progress line (`\r`, erase to end of line), so that a line written to
    /// standard output on the same terminal does not follow the progress text; the next
    /// update draws it again. Used by the benchmarks before each result row.
    static func clearOpenLine() {
        lineOpen.withLock { open in
            if open { writeToStandardError("\r\u{1B}[K") }
            open = false
        }
    }

    private static func draw(_ text: String, open: Bool) {
        lineOpen.withLock { isOpen in
            writeToStandardError(text)
            isOpen = open
        }
    }
}

/// Writes `text` to standard error as it is (unbuffered).
func writeToStandardError(_ text: String) {
    FileHandle.standardError.write(Data(text.utf8))
}
