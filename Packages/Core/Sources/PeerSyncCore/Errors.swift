/// The one error type of PeerSync: a code, a human-readable message and context
/// (which document, which peer, which SQL statement, ...).
///
/// Codes are open-ended: every package adds its own as `static let` in an extension of
/// ``PeerSyncError/Code``, so callers can match on them (`error.code == .notFound`). A package
/// whose errors carry structured facts attaches them as a typed ``detail`` (e.g. PeerSyncBLIP's
/// `BLIPError`, read back with `error.blipError`) rather than as strings in ``context``.
public struct PeerSyncError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable, machine-readable error code. Compare with `==` against the static members.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }
    }

    /// What went wrong, for code to match on (`error.code == .notFound`).
    public var code: Code
    /// What went wrong, for people: one line, no trailing period.
    public var message: String
    /// Extra facts about where the error happened, e.g. `["docID": "a", "sql": "..."]`.
    public var context: [String: String]
    /// A typed value a module attached to the error (nil by default). Kept by ``with(_:_:)``
    /// and by edits of the other fields; compared and hashed with them.
    public var detail: (any PeerSyncErrorDetail)?

    /// An error with `code`, `message`, optional `context` facts and a typed `detail` (default none).
    public init(_ code: Code, _ message: String, context: [String: String] = [:],
                detail: (any PeerSyncErrorDetail)? = nil) {
        self.code = code
        self.message = message
        self.context = context
        self.detail = detail
    }

    /// The attached ``detail`` if it is a `Detail`.
    public func detail<Detail: PeerSyncErrorDetail>(as type: Detail.Type) -> Detail? {
        detail as? Detail
    }

    public static func == (lhs: PeerSyncError, rhs: PeerSyncError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.context == rhs.context
            && lhs.detail.map { AnyHashable($0) } == rhs.detail.map { AnyHashable($0) }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
        hasher.combine(context)
        hasher.combine(detail.map { AnyHashable($0) })
    }

    /// A copy with one more context entry.
    public func with(_ key: String, _ value: String) -> PeerSyncError {
        var copy = self
        copy.context[key] = value
        return copy
    }

    /// `code: message (key=value, ...)` on one line.
    public var description: String {
        if context.isEmpty { return "\(code): \(message)" }
        let extra = context.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ")
        return "\(code): \(message) (\(extra))"
    }
}

/// A typed fact a module attaches to a ``PeerSyncError`` (its ``PeerSyncError/detail``), such
/// as the domain and code of an error a network peer answered with. Values are immutable and
/// compared by value.
public protocol PeerSyncErrorDetail: Sendable, Hashable {}

extension PeerSyncError.Code {
    /// Input that does not parse or does not satisfy a documented constraint.
    public static let invalidArgument = Self(rawValue: "invalidArgument")
    /// Malformed JSON text.
    public static let invalidJSON = Self(rawValue: "invalidJSON")
    /// A document ID that is empty, too long, not UTF-8 or contains a control character.
    public static let invalidDocumentID = Self(rawValue: "invalidDocumentID")
    /// A revision ID that is not `<generation>-<lowercase hex>`.
    public static let invalidRevisionID = Self(rawValue: "invalidRevisionID")
    /// Something that was asked for does not exist.
    public static let notFound = Self(rawValue: "notFound")
    /// A save lost against a concurrent change (`ConcurrencyControl.failOnConflict`).
    public static let conflict = Self(rawValue: "conflict")
    /// A value is larger than the configured maximum.
    public static let tooLarge = Self(rawValue: "tooLarge")
    /// The object was closed and cannot be used any more.
    public static let closed = Self(rawValue: "closed")
    /// Stored data failed a consistency check, or a file is not a database.
    public static let corrupt = Self(rawValue: "corrupt")
    /// Another process or thread holds a lock for longer than the configured timeout.
    public static let busy = Self(rawValue: "busy")
    /// A file-system or operating-system call failed.
    public static let io = Self(rawValue: "io")
    /// The file system (or the device under it) has no space left for a write: SQLite's
    /// `SQLITE_FULL`, LMDB's `ENOSPC`/`EDQUOT` (or a short write on a full file system), or a
    /// replication peer that answered HTTP 507. Nothing of the failed write was stored; the
    /// same write succeeds once space is freed. The message starts with "disk full".
    public static let diskFull = Self(rawValue: "diskFull")
    /// A storage engine reported an error not covered by a more specific code.
    public static let storage = Self(rawValue: "storage")
    /// A network peer broke the protocol: a malformed BLIP frame, varint, property block or
    /// deflate stream, an oversize message, malformed JSON in a replication message, … The
    /// connection is closed.
    public static let protocolError = Self(rawValue: "protocolError")
    /// An operation did not finish in time.
    public static let timeout = Self(rawValue: "timeout")
    /// The operation was cancelled.
    public static let cancelled = Self(rawValue: "cancelled")
    /// An internal invariant failed: a bug in PeerSync.
    public static let internalError = Self(rawValue: "internalError")
}
