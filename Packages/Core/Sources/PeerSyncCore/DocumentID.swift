/// Rules for document IDs, shared by the database, the CLI and the replicator.
///
/// A document ID is a non-empty UTF-8 string of at most ``maxLength`` bytes. (Swift strings are
/// always valid Unicode, so only emptiness and length need checking here; byte input is
/// checked with ``validate(bytes:)``.)
public enum DocumentID {
    /// The maximum length of a document ID, in UTF-8 bytes.
    public static let maxLength = 255

    /// Throws ``PeerSyncError/Code/invalidDocumentID`` when `id` is empty or too long.
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
