/// Rules for document IDs, shared by the database, the CLI and the replicator.
///
/// A document ID is a non-empty UTF-8 string of at most ``maxLength`` bytes without control
/// characters: no C0 control (U+0000–U+001F) and no DEL (U+007F). NUL cannot travel at all —
/// the replication protocol (BLIP) separates message properties, among them a revision's
/// `id`, with NUL bytes, so an ID containing one would make every `rev` message for it
/// malformed and stall replication for every peer — and the other controls are refused with
/// it, as Couchbase Lite refuses them, since they cannot be typed, printed or put in a URL
/// path reliably. (Swift strings are always valid Unicode; byte input is checked for UTF-8 with
/// ``validate(bytes:)``.)
///
/// Every place an ID enters PeerSync checks it with ``validate(_:)``: the database API, the
/// CLI, the listener's REST API and incoming replication.
public enum DocumentID {
    /// The maximum length of a document ID, in UTF-8 bytes.
    public static let maxLength = 255

    /// Throws ``PeerSyncError/Code/invalidDocumentID`` when `id` is empty, longer than
    /// ``maxLength`` bytes or contains a control character (U+0000–U+001F, U+007F).
    public static func validate(_ id: String) throws(PeerSyncError) {
        if id.isEmpty {
            throw PeerSyncError(.invalidDocumentID, "document ID is empty")
        }
        let length = id.utf8.count
        if length > maxLength {
            throw PeerSyncError(.invalidDocumentID,
                                "document ID is \(length) bytes, the maximum is \(maxLength)",
                                context: ["docID": String(id.prefix(40)) + "…"])
        }
        var offset = 0
        for byte in id.utf8 {
            if byte < 0x20 || byte == 0x7F {
                let name = byte == 0 ? "NUL" : "U+00" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16, uppercase: true)
                throw PeerSyncError(.invalidDocumentID,
                                    "document ID contains the control character \(name) at byte \(offset); control characters (U+0000–U+001F, U+007F) are not allowed",
                                    context: ["docID": printable(id)])
            }
            offset += 1
        }
    }

    /// `id` with control characters written as `\u{…}` escapes, for error messages.
    static func printable(_ id: String) -> String {
        var out = ""
        for scalar in id.unicodeScalars.prefix(60) {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Decodes and validates an ID received as bytes (e.g. from the network).
    public static func validate(bytes: some Collection<UInt8>) throws(PeerSyncError) -> String {
        guard let id = String(validating: bytes, as: UTF8.self) else {
            throw PeerSyncError(.invalidDocumentID, "document ID is not valid UTF-8")
        }
        try validate(id)
        return id
    }

    /// A new random ID: 22 characters of URL-safe base64 from 128 random bits, prefixed `-`
    /// like Couchbase Lite's generated IDs.
    public static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var out = "-"
        for _ in 0..<22 { out.append(alphabet[Int(generator.next() % 64)]) }
        return out
    }
}
