// libFuzzer target: JSON deltas (PeerSyncReplicator/JSONDelta.swift), as applied to the body
// of a `rev` message that carries `deltaSrc`.
//
// Input: `<base JSON> NUL <delta JSON>` (no NUL: the whole input is the delta, applied to a
// fixed base object). Properties checked (a violation traps):
// - `apply(delta, to: base)` never traps, whatever the two values;
// - a successful result re-encodes canonically and parses back to an equal value;
// - with both sides parsed (the second one read as a *new* value): `create(old:new:)` gives
//   nil exactly when they are equal, and otherwise a delta that `apply` turns back into
//   `new` — also after the delta travels as canonical JSON (what a peer receives);
// - `create(old: x, new: x)` is nil.
// - applying a delta does not depend on the order its objects' keys are iterated in (each
//   object of the delta is rebuilt with another capacity, which changes Swift's iteration
//   order, and applied again: same result or same failure);
// "Equal" above is checked twice: with `==` and with `same` below, where an integer and a
// double are equal only when they are exactly the same number (so a lossy `==` cannot hide a
// delta that loses data).

import PeerSyncCore

let fixedBase = try! JSONValue(parsing: #"""
    {"name": "fuzz", "n": 1, "f": 1.5, "flag": true, "none": null,
     "list": [1, "two", [3], {"four": 4}], "obj": {"a": "b", "nested": {"x": [1, 2]}},
     "text": "héllo wörld"}
    """#)

/// Structural equality with exact number comparison.
func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case let (.int(x), .int(y)): return x == y
    case let (.double(x), .double(y)): return x == y
    case let (.int(x), .double(y)), let (.double(y), .int(x)): return Int64(exactly: y) == x
    case let (.array(x), .array(y)): return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
    case let (.object(x), .object(y)):
        return x.count == y.count && x.allSatisfy { key, value in y[key].map { same(value, $0) } ?? false }
    default: return a == b
    }
}

/// The same value with every object rebuilt in a dictionary of another capacity (so with
/// another iteration order).
func reordered(_ value: JSONValue) -> JSONValue {
    switch value {
    case .array(let items): return .array(items.map(reordered))
    case .object(let object):
        var copy = [String: JSONValue](minimumCapacity: object.count * 3 + 7)
        for key in object.keys.sorted(by: >) { copy[key] = reordered(object[key]!) }
        return .object(copy)
    default: return value
    }
}

func parseJSON(_ bytes: ArraySlice<UInt8>) -> JSONValue? {
    try? JSONValue(parsing: bytes)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSONDelta(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let base: JSONValue
    let second: ArraySlice<UInt8>
    if let nul = bytes.firstIndex(of: 0) {
        guard let b = parseJSON(bytes[..<nul]) else { return 0 }
        base = b
        second = bytes[(nul + 1)...]
    } else {
        base = fixedBase
        second = bytes[...]
    }
    guard let other = parseJSON(second) else { return 0 }

    // 1. `other` as a delta (what a peer sends).
    let result = try? JSONDelta.apply(other, to: base)
    if let result {
        guard let reparsed = try? JSONValue(parsing: result.canonicalData), reparsed == result else {
            fatalError("delta result does not round-trip: \(result)")
        }
    }
    let resultReordered = try? JSONDelta.apply(reordered(other), to: base)
    if (result == nil) != (resultReordered == nil)
        || (result.map { r in !same(r, resultReordered!) } ?? false) {
        fatalError("delta result depends on key order: \(other) on \(base): \(String(describing: result)) vs \(String(describing: resultReordered))")
    }

    // 2. `other` as the new value: create, then apply must rebuild it.
    if JSONDelta.create(old: base, new: base) != nil { fatalError("create(x, x) is not nil for \(base)") }
    guard let delta = JSONDelta.create(old: base, new: other) else {
        if base != other || !same(base, other) {
            fatalError("create gives no delta for different values \(base) / \(other)")
        }
        return 0
    }
    if base == other { fatalError("create gives a delta for equal values \(base)") }
    let rebuilt: JSONValue
    do { rebuilt = try JSONDelta.apply(delta, to: base) } catch {
        fatalError("created delta does not apply: \(error)\nold: \(base)\nnew: \(other)\ndelta: \(delta)")
    }
    if rebuilt != other || !same(rebuilt, other) {
        fatalError("apply(create(old, new), old) != new\nold: \(base)\nnew: \(other)\ndelta: \(delta)\ngot: \(rebuilt)")
    }
    // The delta as it travels: canonical JSON, parsed by the receiver.
    guard let sent = try? JSONValue(parsing: delta.canonicalData) else {
        fatalError("created delta does not re-parse: \(delta)")
    }
    guard let received = try? JSONDelta.apply(sent, to: base), received == other, same(received, other) else {
        fatalError("created delta changes meaning on the wire\nold: \(base)\nnew: \(other)\ndelta: \(delta)")
    }
    return 0
}
