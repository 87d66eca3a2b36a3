// libFuzzer target: the BLIP message properties decoder (PeerSyncBLIP/BLIPMessage.swift):
// `key NUL value NUL ...`, as read from every message a peer sends.
//
// Input: byte 0 (mod 8) is how many filler bytes precede the properties in the buffer, so
// the decoder sees an ArraySlice that does not start at index 0 (as BLIPFrameDecoder passes
// it); the rest is the properties block. Properties checked (a violation traps):
// - decoding never traps, whatever the bytes;
// - a successful decode re-encodes to exactly the input bytes, which decode to equal
//   properties (decoding is a bijection on what it accepts);
// - the accessors (`subscript`, `int`, `bool`, iteration) never trap and lookups return the
//   first match;
// - a message with these properties encodes its content as varint(length) ‖ properties ‖ body;
// - the subscript setter (update first match / append / remove first match) keeps the other
//   pairs in order, and edited properties still encode ↔ decode exactly.
// (Strings containing NUL cannot be represented and are never produced by decode; the encoder
// does not check for them — see Tools/fuzz/README.md, "Findings".)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBLIPProperties(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let filler = Int(input[0] % 8)
    let block = Array(input[1...])
    let buffer = Array(repeating: UInt8(0xEE), count: filler) + block
    let slice = buffer[filler...]

    let properties: BLIPProperties
    do { properties = try BLIPProperties.decode(slice) } catch {
        if error.code != .protocolError { fatalError("unexpected error code \(error.code)") }
        return 0
    }
    let encoded = properties.encoded()
    if encoded != block { fatalError("decode/encode is not the identity: \(block) -> \(properties.pairs) -> \(encoded)") }
    let again: BLIPProperties
    do { again = try BLIPProperties.decode(encoded[...]) } catch {
        fatalError("re-encoded properties do not decode: \(error)")
    }
    if again != properties || again.hashValue != properties.hashValue {
        fatalError("re-decoded properties differ: \(properties.pairs) vs \(again.pairs)")
    }
    // The per-key checks below are quadratic: only the first 16 pairs (a few thousand NULs
    // would otherwise cost milliseconds per input).
    for (key, _) in properties.pairs.prefix(16) {
        guard let first = properties.pairs.first(where: { $0.key == key }) else { fatalError("lost key") }
        if properties[key] != first.value { fatalError("lookup of \(key) is not the first match") }
        _ = properties.int(key)
        _ = properties.bool(key)
    }
    let message = BLIPMessage(type: .request, properties: properties, body: [1, 2, 3])
    let content = message.encodedContent()
    var index = content.startIndex
    guard let length = try? Varint.read(content[...], at: &index), Int(length) == encoded.count,
          Array(content[index..<index + Int(length)]) == encoded, Array(content[(index + Int(length))...]) == [1, 2, 3] else {
        fatalError("message content does not frame its properties")
    }
    // Edits through the subscript: set each key to the next pair's value, then remove one key.
    var edited = properties
    let pairs = properties.pairs
    for (i, pair) in pairs.enumerated().prefix(16) {
        let newValue = pairs[(i + 1) % pairs.count].value
        let firstIndex = edited.pairs.firstIndex { $0.key == pair.key }
        edited[pair.key] = newValue
        if edited[pair.key] != newValue { fatalError("subscript set of \(pair.key) not visible") }
        if let firstIndex, edited.pairs[firstIndex].key != pair.key { fatalError("subscript set moved a pair") }
    }
    if edited.pairs.count != pairs.count { fatalError("updating existing keys changed the count") }
    if let key = pairs.first?.key {
        let before = edited.pairs.count
        edited[key] = nil
        if edited.pairs.count != before - 1 { fatalError("removing \(key) did not remove one pair") }
        edited["fuzz-appended"] = "x"
        if edited.pairs.last?.key != "fuzz-appended" && pairs.allSatisfy({ $0.key != "fuzz-appended" }) {
            fatalError("a new key is not appended")
        }
    }
    guard let editedAgain = try? BLIPProperties.decode(edited.encoded()[...]), editedAgain == edited else {
        fatalError("edited properties do not round-trip: \(edited.pairs)")
    }
    return 0
}
