/// A key of ``ReplicatorConnectorOptions``: a setting of ``ReplicatorConfiguration`` that a
/// connector defines and reads, with its type and default (the shape of SwiftNIO's
/// `ChannelOption`). The key is the conforming type itself; a connector's module usually keeps
/// it internal and adds a typed property to ``ReplicatorConfiguration`` in an extension:
///
/// ```swift
/// enum SerialPortSpeedKey: ReplicatorConnectorOptionKey {
///     static let defaultValue = 115_200
/// }
/// extension ReplicatorConfiguration {
///     public var serialPortSpeed: Int {
///         get { connectorOptions[SerialPortSpeedKey.self] }
///         set { connectorOptions[SerialPortSpeedKey.self] = newValue }
///     }
/// }
/// ```
public protocol ReplicatorConnectorOptionKey: Sendable {
    /// The type of the setting.
    associatedtype Value: Sendable
    /// The value read while the setting was never set.
    static var defaultValue: Value { get }
}

/// The connector settings of a ``ReplicatorConfiguration`` (its
/// ``ReplicatorConfiguration/connectorOptions``): an open, typed store, one value per
/// ``ReplicatorConnectorOptionKey`` type. A value type like the configuration that holds it:
/// copies are independent. Reading a key that was never set gives the key's `defaultValue`.
public struct ReplicatorConnectorOptions: Sendable {
    private var values: [ObjectIdentifier: any Sendable] = [:]

    /// No setting set: every key reads as its default.
    public init() {}

    /// The value set for `key`, or `key.defaultValue`.
    public subscript<Key: ReplicatorConnectorOptionKey>(key: Key.Type) -> Key.Value {
        get { values[ObjectIdentifier(key)].flatMap { $0 as? Key.Value } ?? Key.defaultValue }
        set { values[ObjectIdentifier(key)] = newValue }
    }

    /// Whether a value was set for `key` (even one equal to its default).
    public func contains<Key: ReplicatorConnectorOptionKey>(_ key: Key.Type) -> Bool {
        values[ObjectIdentifier(key)] != nil
    }

    /// Forgets the value set for `key`: it reads as its default again.
    public mutating func remove<Key: ReplicatorConnectorOptionKey>(_ key: Key.Type) {
        values[ObjectIdentifier(key)] = nil
    }
}
