// libFuzzer target: the BLIP frame decoder (varints, flags, CRC, inflate, reassembly).
// Compiled by Tools/fuzz/run together with the BLIP codec sources it lists.
//
// Input: a sequence of frames, each prefixed by its length as a little-endian UInt16, all fed
// to one decoder (so CRC and deflate state carry over, as on a real connection).

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBLIPFrames(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let decoder = try? BLIPFrameDecoder(tuning: BLIPTuning()) else { return 0 }
    for n in 1...3 { decoder.expectResponse(to: UInt64(n)) }
    var i = 0
    while i + 2 <= bytes.count {
        let length = Int(bytes[i]) | Int(bytes[i + 1]) << 8
        i += 2
        let frame = Array(bytes[i..<min(bytes.count, i + length)])
        i += length
        do { _ = try decoder.decode(frame) } catch { break }
    }
    return 0
}
