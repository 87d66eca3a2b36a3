/// `JSONValue` in `Codable` models: a property typed `JSONValue` holds free-form JSON (metadata,
/// a part of a document whose shape varies) and encodes as exactly that JSON, so a model with
/// such a property round-trips through a document (`MutableDocument(encoding:)`,
/// `decode(as:)`) or through `JSONEncoder`/`JSONDecoder`.
extension JSONValue: Codable {
    /// Encodes the value as the JSON it is (`null`, a boolean, a number, a string, an array or
    /// an object) in a single-value container. Throws the encoder's error (e.g. `JSONEncoder`'s
    /// for a non-finite `.double`).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Decodes whatever JSON value is there: `null`, a boolean, a number (`.int` when the
    /// decoder reads it as an `Int64`, else `.double`), a string, an array or an object. Throws
    /// `DecodingError.dataCorrupted` when the decoder holds none of these.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }
}
