import PeerSyncCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What the pre-open check learned about an existing `data.mdb`.
struct DataFileInfo: Sendable {
    /// LMDB page size recorded in the file.
    let pageSize: Int
    /// Map size recorded in the newest meta page.
    let mapSize: UInt64
    /// Bytes in use: `(last page + 1) * pageSize`.
    let usedBytes: UInt64
    let fileSize: UInt64
}

/// Validates an LMDB data file's header before `mdb_env_open` maps it.
///
/// LMDB trusts its file: a zero-length file is silently initialized as a new environment, and
/// a file shorter than its meta pages claim is mapped anyway, so touching a page past the end
/// raises SIGBUS. This check reads both meta pages (layout of LMDB 0.9's `MDB_page` +
/// `MDB_meta` on a 64-bit build) and the two root pages, and turns every inconsistency it can
/// see cheaply into a `.corrupt` error. It cannot prove deeper B-tree pages sound: use
/// ``LMDBStorageBackend/checkIntegrity(directory:)`` for a full walk.
enum DataFileCheck {
    static let magic: UInt32 = 0xBEEF_C0DE
    static let dataVersion: UInt32 = 1
    static let pageFlagBranch: UInt16 = 0x01
    static let pageFlagLeaf: UInt16 = 0x02
    static let pageFlagMeta: UInt16 = 0x08
    static let invalidPage: UInt64 = .max
    /// `MDB_page` header (16) + `MDB_meta` (136) on LP64.
    static let metaBytes = 152
    static let minPageSize = 512
    static let maxPageSize = 0x8000  // LMDB's MAX_PAGESIZE

    struct Meta {
        var pageFlags: UInt16
        var magic: UInt32
        var version: UInt32
        var mapSize: UInt64
        var pageSize: UInt32
        var freeFlags: UInt16
        var freeRoot: UInt64
        var mainFlags: UInt16
        var mainRoot: UInt64
        var lastPage: UInt64
        var txnID: UInt64

        init(_ b: [UInt8]) {
            func u16(_ o: Int) -> UInt16 { UInt16(b[o]) | UInt16(b[o + 1]) << 8 }
            func u32(_ o: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(b[o + $1]) << (8 * UInt32($1)) } }
            func u64(_ o: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(b[o + $1]) << (8 * UInt64($1)) } }
            pageFlags = u16(10)
            magic = u32(16)
            version = u32(20)
            mapSize = u64(32)
            pageSize = u32(40)      // mm_dbs[FREE_DBI].md_pad
            freeFlags = u16(44)
            freeRoot = u64(80)
            mainFlags = u16(92)
            mainRoot = u64(128)
            lastPage = u64(136)
            txnID = u64(144)
        }
    }

    /// Returns nil when `path` does not exist; throws `.corrupt` for a file LMDB must not open.
    static func validate(path: String) throws(PeerSyncError) -> DataFileInfo? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let err = errno
            if err == ENOENT { return nil }
            try check(err, "open data file", ["path": path])
        }
        defer { closeDescriptor(fd) }
        var st = stat()
        if fstat(fd, &st) != 0 { try check(errno, "fstat data file", ["path": path]) }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw corrupt("data.mdb is not a regular file", path)
        }
        let fileSize = UInt64(st.st_size)
        guard fileSize > 0 else {
            throw corrupt("data.mdb is empty (zero length): not an LMDB store", path)
        }

        let meta0 = try readMeta(fd, offset: 0, fileSize: fileSize, path: path)
        let pageSize = Int(meta0.pageSize)
        let meta1 = try readMeta(fd, offset: UInt64(pageSize), fileSize: fileSize, path: path)
        guard meta1.pageSize == meta0.pageSize else {
            throw corrupt("the two LMDB meta pages disagree on the page size", path)
        }
        let newest = meta1.txnID > meta0.txnID ? meta1 : meta0
        try checkFlags(newest, path)

        let psize = UInt64(pageSize)
        guard newest.lastPage >= 1, newest.lastPage < UInt64.max / psize - 1 else {
            throw corrupt("the LMDB meta page has an impossible last page number \(newest.lastPage)", path)
        }
        let usedBytes = (newest.lastPage + 1) * psize
        guard usedBytes <= fileSize else {
            throw corrupt("data.mdb is truncated: its header says \(usedBytes) bytes are in use, "
                          + "the file has \(fileSize)", path)
        }
        for (name, root) in [("free-list", newest.freeRoot), ("main", newest.mainRoot)] where root != invalidPage {
            guard root >= 2, root <= newest.lastPage else {
                throw corrupt("the \(name) database root page \(root) is outside the file's pages", path)
            }
            let header = try readBytes(fd, count: 16, offset: root * psize, path: path)
            let pgno = (0..<8).reduce(UInt64(0)) { $0 | UInt64(header[$1]) << (8 * UInt64($1)) }
            let flags = UInt16(header[10]) | UInt16(header[11]) << 8
            guard pgno == root, flags & (pageFlagBranch | pageFlagLeaf) != 0, flags & pageFlagMeta == 0 else {
                throw corrupt("the \(name) database root page \(root) is not a B-tree page", path)
            }
        }
        return DataFileInfo(pageSize: pageSize, mapSize: newest.mapSize, usedBytes: usedBytes, fileSize: fileSize)
    }

    private static func readMeta(_ fd: Int32, offset: UInt64, fileSize: UInt64,
                                 path: String) throws(PeerSyncError) -> Meta {
        guard offset + UInt64(metaBytes) <= fileSize else {
            throw corrupt("data.mdb is truncated (\(fileSize) bytes): its LMDB meta pages are incomplete", path)
        }
        let meta = Meta(try readBytes(fd, count: metaBytes, offset: offset, path: path))
        guard meta.pageFlags & pageFlagMeta != 0 else {
            throw corrupt("data.mdb is not an LMDB file (no meta page at offset \(offset))", path)
        }
        if meta.magic == magic.byteSwapped {
            throw corrupt("data.mdb was written on a machine of the other byte order", path)
        }
        guard meta.magic == magic else {
            throw corrupt("data.mdb is not an LMDB file (bad magic at offset \(offset))", path)
        }
        guard meta.version == dataVersion else {
            throw corrupt("data.mdb has LMDB data format version \(meta.version), expected \(dataVersion)", path)
        }
        let ps = Int(meta.pageSize)
        guard ps >= minPageSize, ps <= maxPageSize, ps & (ps - 1) == 0 else {
            throw corrupt("data.mdb records an invalid page size \(ps)", path)
        }
        return meta
    }

    private static func checkFlags(_ meta: Meta, _ path: String) throws(PeerSyncError) {
        let dupSort: UInt16 = 0x04, integerKey: UInt16 = 0x08, dupFixed: UInt16 = 0x10, integerDup: UInt16 = 0x20
        // Combinations LMDB itself rejects in later releases (CVE-2019-16224 and relatives).
        for flags in [meta.freeFlags, meta.mainFlags] where flags & (dupFixed | integerDup) != 0 && flags & dupSort == 0 {
            throw corrupt("data.mdb has an invalid database flag combination 0x\(String(flags, radix: 16))", path)
        }
        guard meta.freeFlags & integerKey != 0, meta.freeFlags & dupSort == 0 else {
            throw corrupt("data.mdb has invalid free-list database flags", path)
        }
    }

    private static func readBytes(_ fd: Int32, count: Int, offset: UInt64,
                                  path: String) throws(PeerSyncError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = bytes.withUnsafeMutableBytes { buf in
                pread(fd, buf.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if n < 0 {
                if errno == EINTR { continue }
                try check(errno, "read data file", ["path": path])
            }
            if n == 0 {
                throw corrupt("data.mdb is truncated at offset \(offset + UInt64(done))", path)
            }
            done += n
        }
        return bytes
    }

    private static func corrupt(_ message: String, _ path: String) -> PeerSyncError {
        PeerSyncError(.corrupt, message, context: ["path": path])
    }
}
