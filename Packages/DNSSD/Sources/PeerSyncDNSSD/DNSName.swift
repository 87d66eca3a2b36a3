/// DNS names in wire form (RFC 1035 §3.1: length-prefixed labels, a zero byte at the end),
/// for the subtype pointer records Avahi's service API cannot make (it refuses a subtype
/// label that does not start with `_`, and Couchbase Lite's group IDs do not).
enum DNSName {
    /// The wire form of `labels` (each 1–63 bytes; callers validate), uncompressed.
    static func wire(_ labels: [String]) -> [UInt8] {
        var bytes: [UInt8] = []
        for label in labels {
            let utf8 = Array(label.utf8)
            bytes.append(UInt8(utf8.count))
            bytes += utf8
        }
        bytes.append(0)
        return bytes
    }

    /// The labels of the uncompressed name at the start of `bytes` (the RDATA of a PTR record as
    /// Avahi passes it), nil if it is malformed or uses compression.
    static func labels(_ bytes: [UInt8]) -> [String]? {
        var labels: [String] = []
        var index = 0
        while index < bytes.count {
            let length = Int(bytes[index])
            index += 1
            if length == 0 { return labels }
            guard length <= 63, index + length <= bytes.count else { return nil }
            labels.append(String(decoding: bytes[index..<(index + length)], as: UTF8.self))
            index += length
        }
        return nil
    }

    /// The labels of a dotted name with no escapes (a service type and domain such as
    /// `_couchbaseP2P._tcp` and `local`).
    static func labels(dotted name: String) -> [String] {
        name.split(separator: ".").map(String.init)
    }

    /// Whether two label lists name the same thing (DNS compares ASCII letters without case,
    /// every other byte exactly).
    static func same(_ a: some Collection<String>, _ b: some Collection<String>) -> Bool {
        func folded(_ label: String) -> [UInt8] {
            label.utf8.map { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) ? $0 + 32 : $0 }
        }
        return a.count == b.count && zip(a, b).allSatisfy { folded($0) == folded($1) }
    }
}
