import Foundation
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// The text of `peersync revs ID` (like `cblite revs`): a header line, then the revision tree
/// root first, each child indented under its parent, one revision a line with its marks:
///
/// ```
/// doc1  sequence 4  current 3-3c1e…  conflicted
/// 1-5a3f…  body
///   2-9b1c…  body
///     3-3c1e…  current leaf body
///   2-77d0…  leaf conflict body
/// ```
///
/// Marks: `current` (the winning revision), `leaf`, `deleted`, `conflict` (on an unresolved
/// pulled branch), `closed` (the local tombstone of a resolved conflict's losing branch),
/// `body`/`no body` (whether the revision's body is kept). Siblings appear in the tree's
/// order (LiteCore's: the winning branch first).
enum RevisionTreeText {
    static func render(_ revisions: DocumentRevisions) -> String {
        var header = "\(revisions.docID)  sequence \(revisions.sequence)  current \(revisions.currentRevID)"
        if revisions.isDeleted { header += "  deleted" }
        if revisions.isConflicted { header += "  conflicted" }
        var lines = [header]
        let known = Set(revisions.revisions.map(\.revID))
        var children: [RevisionID: [RevisionInfo]] = [:]
        var roots: [RevisionInfo] = []
        for info in revisions.revisions {
            // A parent pruned from the tree makes its child a root.
            if let parent = info.parentRevID, known.contains(parent) {
                children[parent, default: []].append(info)
            } else {
                roots.append(info)
            }
        }
        // Depth-first, the order of `revisions` (winner's branch first) among siblings.
        var pending: [(RevisionInfo, Int)] = roots.reversed().map { ($0, 0) }
        while let (info, depth) = pending.popLast() {
            lines.append(String(repeating: "  ", count: depth) + "\(info.revID)  "
                         + marks(info, current: revisions.currentRevID).joined(separator: " "))
            pending += (children[info.revID] ?? []).reversed().map { ($0, depth + 1) }
        }
        return lines.joined(separator: "\n")
    }

    static func marks(_ info: RevisionInfo, current: RevisionID) -> [String] {
        var marks: [String] = []
        if info.revID == current { marks.append("current") }
        if info.isLeaf { marks.append("leaf") }
        if info.flags.contains(.deleted) { marks.append("deleted") }
        if info.flags.contains(.conflict) { marks.append("conflict") }
        if info.flags.contains(.closed) { marks.append("closed") }
        marks.append(info.hasBody ? "body" : "no body")
        return marks
    }
}

/// The blob files of a database folder (`DIR/blobs/*.blob`, the layout of PeerSyncDatabase's
/// blob store): how many and their total size, for `compact`'s before/after line.
struct BlobUsage {
    var count = 0
    var bytes: UInt64 = 0

    /// Reads the blob folder of the database at `databasePath`; a missing folder counts as
    /// empty. Throws `.io` when the folder cannot be listed.
    init(databasePath: String) throws {
        let folder = URL(fileURLWithPath: databasePath, isDirectory: true).appendingPathComponent("blobs")
        guard FileManager.default.fileExists(atPath: folder.path) else { return }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            throw PeerSyncError(.io, "cannot list the blobs: \(error.localizedDescription)", context: ["path": folder.path])
        }
        for name in names where name.hasSuffix(".blob") {
            let attributes = try? FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent(name).path)
            count += 1
            bytes += (attributes?[.size] as? NSNumber)?.uint64Value ?? 0
        }
    }
}
