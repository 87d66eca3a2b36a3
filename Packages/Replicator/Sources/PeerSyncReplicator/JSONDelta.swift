import PeerSyncCore

extension PeerSyncError.Code {
    /// A JSON delta that is malformed or does not fit the value it is applied to.
    public static let invalidDelta = Self(rawValue: "invalidDelta")
}

/// JSON deltas in the format of Couchbase's Fleece `JSONDelta` (derived from JsonDiffPatch),
/// as sent in `rev` messages with a `deltaSrc` property:
///
/// - a plain JSON value `v` (not an array or object) replaces the old value;
/// - `[v]` replaces the old value with `v` (used when `v` is an array or object);
/// - `[]` deletes the key (inside an object delta);
/// - `{k: d, …}` applies sub-delta `d` to key `k` of an object (a missing key is inserted);
///   for arrays the keys are decimal indices, plus an optional `"n-": [values…]` meaning
///   "replace everything from index n onward with these values";
/// - `["ops", 0, 2]` edits a string (`N=` keep, `N-` skip, `N+text|` insert; UTF-8 byte
///   counts). ``apply(_:to:)`` understands it; ``create(old:new:)`` never generates it.
/// - `{}` means no change.
///
/// Pure functions, safe from any thread.
public enum JSONDelta {
    /// The delta that turns `old` into `new`, or nil when they are equal.
    public static func create(old: JSONValue, new: JSONValue) -> JSONValue? {
        if old == new { return nil }
        switch (old, new) {
        case let (.object(o), .object(n)):
            var delta: [String: JSONValue] = [:]
            for (key, oldValue) in o where n[key] == nil { _ = oldValue; delta[key] = .array([]) }
            for (key, newValue) in n {
                if let oldValue = o[key] {
                    if let d = create(old: oldValue, new: newValue) { delta[key] = d }
                } else {
                    delta[key] = replacement(newValue)
                }
            }
            return .object(delta)
        case let (.array(o), .array(n)):
            var delta: [String: JSONValue] = [:]
            let common = min(o.count, n.count)
            for i in 0..<common {
                if let d = create(old: o[i], new: n[i]) { delta[String(i)] = d }
            }
            if o.count != n.count {
                delta["\(common)-"] = .array(Array(n[common...]))
            }
            return .object(delta)
        default:
            return replacement(new)
        }
    }

    /// `new` written as a replacing delta.
    private static func replacement(_ value: JSONValue) -> JSONValue {
        switch value {
        case .array, .object: return .array([value])
        default: return value
        }
    }

    /// Applies `delta` to `old` and returns the new value.
    /// - Throws: `PeerSyncError` `.invalidDelta` when the delta is malformed, does not fit
    ///   `old` (e.g. an index past the end of an array, a string edit of a non-string), or
    ///   deletes the whole value.
    public static func apply(_ delta: JSONValue, to old: JSONValue) throws(PeerSyncError) -> JSONValue {
        guard let result = try apply(delta, toOptional: old) else {
            throw corrupt("a delta cannot delete the whole value")
        }
        return result
    }

    private static func corrupt(_ message: String) -> PeerSyncError {
        PeerSyncError(.invalidDelta, "invalid JSON delta: " + message)
    }

    /// nil old = missing key; nil result = delete.
    private static func apply(_ delta: JSONValue, toOptional old: JSONValue?) throws(PeerSyncError) -> JSONValue? {
        switch delta {
        case .array(let items):
            switch items.count {
            case 0:
                return nil
            case 1:
                return items[0]
            case 3:
                guard case .string(let ops) = items[0], items[1].intValue == 0, items[2].intValue == 2 else {
                    throw corrupt("unknown array form of length 3")
                }
                guard case .string(let string)? = old else { throw corrupt("string edit of a non-string") }
                return .string(try applyStringEdit(ops, to: string))
            default:
                throw corrupt("unknown array form of length \(items.count)")
            }
        case .object(let changes):
            if changes.isEmpty { return old }
            switch old {
            case .object(var object)?:
                for (key, sub) in changes {
                    object[key] = try apply(sub, toOptional: object[key])
                }
                return .object(object)
            case .array(let array)?:
                return .array(try applyToArray(changes, array))
            case nil:
                // A patch of a missing key: patch an empty object (insertion).
                var object: [String: JSONValue] = [:]
                for (key, sub) in changes { object[key] = try apply(sub, toOptional: nil) }
                return .object(object)
            default:
                throw corrupt("object delta applied to a scalar")
            }
        default:
            return delta
        }
    }

    /// An array index key: decimal digits, no leading zero (as ``create(old:new:)`` writes
    /// them). With leading zeros allowed, `"0"` and `"00"` named the same item and the result
    /// depended on the delta dictionary's iteration order, which differs between processes.
    private static func index(_ key: Substring) -> Int? {
        guard !key.isEmpty, key.count <= 9, key.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              key == "0" || key.first != "0" else { return nil }
        return Int(key)
    }

    private static func applyToArray(_ changes: [String: JSONValue], _ old: [JSONValue]) throws(PeerSyncError) -> [JSONValue] {
        var result = old
        var tail: (Int, [JSONValue])?
        for (key, sub) in changes {
            if key.hasSuffix("-") {
                guard tail == nil, let n = index(key.dropLast()), n <= old.count else {
                    throw corrupt("bad array tail key \"\(key)\"")
                }
                guard case .array(let values) = sub else { throw corrupt("array tail \"\(key)\" is not an array") }
                tail = (n, values)
            } else {
                guard let i = index(Substring(key)), i < old.count else {
                    throw corrupt("bad array index \"\(key)\" (array has \(old.count) items)")
                }
                guard let value = try apply(sub, toOptional: old[i]) else {
                    throw corrupt("array items are removed with an \"n-\" tail, not [] at \"\(key)\"")
                }
                result[i] = value
            }
        }
        if let (n, values) = tail {
            for key in changes.keys {
                if let i = index(Substring(key)), i >= n { throw corrupt("array index \(i) edited past the tail at \(n)") }
            }
            result.removeSubrange(n...)
            result.append(contentsOf: values)
        }
        return result
    }

    /// `N=` keep N bytes, `N-` skip N bytes, `N+text|` insert N bytes of text.
    private static func applyStringEdit(_ ops: String, to string: String) throws(PeerSyncError) -> String {
        let source = Array(string.utf8)
        let text = Array(ops.utf8)
        var out: [UInt8] = []
        var pos = 0, i = 0
        while i < text.count {
            var n = 0, digits = 0
            while i < text.count, text[i] >= 0x30, text[i] <= 0x39 {
                guard digits < 9 else { throw corrupt("string edit count too large") }
                n = n * 10 + Int(text[i] - 0x30)
                digits += 1
                i += 1
            }
            guard digits > 0, i < text.count else { throw corrupt("malformed string edit") }
            let op = text[i]
            i += 1
            switch op {
            case UInt8(ascii: "="), UInt8(ascii: "-"):
                guard n <= source.count - pos else { throw corrupt("string edit runs past the old string") }
                if op == UInt8(ascii: "=") { out.append(contentsOf: source[pos..<pos + n]) }
                pos += n
            case UInt8(ascii: "+"):
                guard n < text.count - i + 1, i + n < text.count, text[i + n] == UInt8(ascii: "|") else {
                    throw corrupt("malformed string insertion")
                }
                out.append(contentsOf: text[i..<i + n])
                i += n + 1
            default:
                throw corrupt("unknown string edit operation")
            }
        }
        guard pos == source.count else { throw corrupt("string edit does not cover the old string") }
        guard let result = String(validating: out, as: UTF8.self) else { throw corrupt("string edit makes invalid UTF-8") }
        return result
    }
}
