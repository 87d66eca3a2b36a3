// libFuzzer target: the ATT PDU decoder and the GATT server's request handler
// (PeerServiceAttributes.respond). Compiled by Tools/fuzz/run with the PeerSyncBLE GATT
// sources it lists.
//
// Input: byte 0 picks the session's MTU and CCCD; the rest is a sequence of PDUs, each
// prefixed by its length byte, fed to one session (the MTU exchange carries over). Checks:
// no trap; only `.protocolError`; decode → encode is the identity on accepted PDUs; every
// server answer re-decodes and fits the session's MTU; a command never gets an answer.

import PeerSyncCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzATTPDUs(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let setup = bytes.first else { return 0 }
    let attributes = PeerServiceAttributes(serviceUUID: BLEServiceUUID.forPeerGroup("fuzz"), psm: 0x0081,
                                           metadata: (0..<Int(setup) * 2).map { UInt8(truncatingIfNeeded: $0) })
    var session = PeerServiceAttributes.Session()
    session.configuration = UInt16(setup & 1)
    let maxMTU = 23 + Int(setup >> 1)
    var index = 1
    while index < bytes.count {
        let length = Int(bytes[index])
        index += 1
        let pdu = Array(bytes[index..<min(bytes.count, index + length)])
        index += length
        do throws(PeerSyncError) {
            let decoded = try ATTPDU.decode(pdu)
            if decoded.encoded() != pdu { fatalError("encode(decode(x)) != x for \(pdu)") }
        } catch {
            if error.code != .protocolError { fatalError("decoder threw \(error)") }
        }
        let mtuBefore = session.mtu
        guard let answer = attributes.respond(to: pdu, session: &session, maxMTU: maxMTU) else { continue }
        if let opcode = pdu.first, opcode & ATTPDU.Opcode.commandFlag != 0 { fatalError("a command got an answer") }
        let encoded = answer.encoded()
        if encoded.count > max(mtuBefore, session.mtu) { fatalError("an answer of \(encoded.count) bytes over the MTU \(session.mtu)") }
        guard (try? ATTPDU.decode(encoded)) == answer else { fatalError("an answer does not re-decode: \(answer)") }
    }
    return 0
}
