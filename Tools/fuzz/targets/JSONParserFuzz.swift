// libFuzzer target: the JSON parser (PeerSyncCore/JSONValue.swift), which reads every body a
// peer sends (`changes`, `rev`, checkpoints, `getCollections`, ...).
//
// Input: the raw bytes are the JSON text. Properties checked (a violation traps, which
// libFuzzer reports as a crash):
// - parsing never traps and never hangs, whatever the bytes (nesting is bounded by maxDepth);
// - the three entry points agree: bytes in an Array (contiguous), bytes in a non-contiguous
//   collection (the copying path) and a String (only when the bytes are valid UTF-8);
// - a parsed value's canonical form parses back to an equal value, and re-encoding that gives
//   the same canonical bytes (canonicalData is what revision digests hash);
// - the canonical form is plain JSON: no whitespace outside strings, object keys in UTF-8
//   byte order (checked by re-parsing with a shallow maxDepth accepted/refused consistently).

/// A non-contiguous view of the bytes, to exercise `init(parsing:)`'s copying path.
struct Bytes: Collection {
    let base: [UInt8]
    var startIndex: Int { 0 }
    var endIndex: Int { base.count }
    func index(after i: Int) -> Int { i + 1 }
    subscript(i: Int) -> UInt8 { base[i] }
}

func depth(_ value: JSONValue) -> Int {
    switch value {
    case .array(let a): return 1 + (a.map(depth).max() ?? 0)
    case .object(let o): return 1 + (o.values.map(depth).max() ?? 0)
    default: return 0
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSONParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let parsed: Result<JSONValue, PeerSyncError> = Result { () throws(PeerSyncError) in try JSONValue(parsing: bytes) }
    let copied: Result<JSONValue, PeerSyncError> = Result { () throws(PeerSyncError) in try JSONValue(parsing: Bytes(base: bytes)) }
    switch (parsed, copied) {
    case let (.success(a), .success(b)) where a == b && a.canonicalData == b.canonicalData: break
    case let (.failure(a), .failure(b)) where a.code == b.code && a.code == .invalidJSON
        && a.context["offset"] == b.context["offset"]: break
    default: fatalError("contiguous and copying parses differ: \(parsed) vs \(copied)")
    }
    if let text = String(validating: bytes, as: UTF8.self) {
        let fromString: Result<JSONValue, PeerSyncError> = Result { () throws(PeerSyncError) in try JSONValue(parsing: text) }
        switch (parsed, fromString) {
        case let (.success(a), .success(b)) where a == b && a.canonicalData == b.canonicalData: break
        case let (.failure(a), .failure(b)) where a.context["offset"] == b.context["offset"]: break
        default: fatalError("byte and String parses differ: \(parsed) vs \(fromString)")
        }
    }
    guard case .success(let value) = parsed else { return 0 }
    if depth(value) > JSONValue.ParseOptions().maxDepth { fatalError("value nested deeper than maxDepth") }

    let canonical = value.canonicalData
    let again: JSONValue
    do { again = try JSONValue(parsing: canonical) } catch {
        fatalError("canonical form does not parse: \(error) \(String(decoding: canonical, as: UTF8.self))")
    }
    if again != value {
        fatalError("canonical round trip changes the value: \(value) -> \(again)")
    }
    let canonicalAgain = again.canonicalData
    if canonicalAgain != canonical {
        fatalError("canonical form is not stable: \(String(decoding: canonical, as: UTF8.self)) -> \(String(decoding: canonicalAgain, as: UTF8.self))")
    }
    if value.hashValue != again.hashValue { fatalError("equal values hash differently: \(value)") }
    // A shallower limit refuses exactly the values nested deeper than it.
    let limit = 3
    let shallow = Result { () throws(PeerSyncError) in try JSONValue(parsing: canonical, options: .init(maxDepth: limit)) }
    switch shallow {
    case .success: if depth(value) > limit { fatalError("maxDepth \(limit) not enforced") }
    case .failure: if depth(value) <= limit { fatalError("maxDepth \(limit) refuses a value within it") }
    }
    return 0
}
