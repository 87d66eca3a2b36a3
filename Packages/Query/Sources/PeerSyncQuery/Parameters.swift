import Foundation
import PeerSyncCore

/// Values for a query's named parameters (Couchbase Lite's `Parameters`): `$name` in SQL++,
/// `Expression.parameter("name")` in the builder. A parameter left unset is MISSING.
///
/// A reference type, as in Couchbase Lite: `let p = Parameters(); p.setValue(3, forName: "n")`.
/// Thread-safe. ``Query/parameters`` takes a copy when assigned.
public final class Parameters: Sendable {
    private let values: LockedValue<[String: JSONValue]>

    /// Empty parameters, or a copy of `parameters`.
    public init(_ parameters: Parameters? = nil) {
        values = LockedValue(parameters?.dictionary ?? [:])
    }

    /// Sets (or with nil, removes) the value of parameter `name`.
    public func setValue(_ value: JSONValue?, forName name: String) {
        values.withLock { $0[name] = value }
    }
    /// Sets a string parameter.
    public func setString(_ value: String?, forName name: String) { setValue(value.map { .string($0) }, forName: name) }
    /// Sets an integer parameter.
    public func setInt(_ value: Int, forName name: String) { setValue(.int(Int64(value)), forName: name) }
    /// Sets a 64-bit integer parameter.
    public func setInt64(_ value: Int64, forName name: String) { setValue(.int(value), forName: name) }
    /// Sets a floating-point parameter (non-finite values become `null`).
    public func setDouble(_ value: Double, forName name: String) { setValue(value.isFinite ? .double(value) : .null, forName: name) }
    /// Sets a Boolean parameter.
    public func setBoolean(_ value: Bool, forName name: String) { setValue(.bool(value), forName: name) }
    /// Sets a date parameter (its ISO 8601 string, as dates are stored in documents).
    public func setDate(_ value: Date?, forName name: String) { setValue(value.map { .string(ISO8601.string($0)) }, forName: name) }

    /// The value of parameter `name`, nil if unset.
    public func value(forName name: String) -> JSONValue? { values.withLock { $0[name] } }

    /// Every parameter set.
    var dictionary: [String: JSONValue] { values.withLock { $0 } }
}
