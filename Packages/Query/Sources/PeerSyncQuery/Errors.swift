import PeerSyncCore

extension PeerSyncError.Code {
    /// A query that cannot run: a SQL++ syntax error (with a ``QuerySyntaxError`` detail giving
    /// its position), an unknown function or collection, a wrong number of arguments, an
    /// aggregate where none is allowed, a `LIMIT` that is not a number, an invalid regular
    /// expression.
    public static let invalidQuery = Self(rawValue: "invalidQuery")
}

/// Where a SQL++ string stops parsing: the `PeerSyncError.detail` of an `.invalidQuery` error
/// thrown by `Database.createQuery(_:)`. Read it with `error.detail(as: QuerySyntaxError.self)`.
public struct QuerySyntaxError: PeerSyncErrorDetail {
    /// The offset of the offending token in the query string, in characters (0-based).
    public let offset: Int
    /// The line of the offending token (1-based).
    public let line: Int
    /// The column of the offending token within its line, in characters (1-based).
    public let column: Int

    /// A position in a query string.
    public init(offset: Int, line: Int, column: Int) {
        self.offset = offset
        self.line = line
        self.column = column
    }
}
