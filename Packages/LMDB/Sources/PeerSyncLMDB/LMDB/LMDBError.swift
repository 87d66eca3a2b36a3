internal import CLMDB
import PeerSyncCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The one checking function for C return codes: returns on `0` (`MDB_SUCCESS`), otherwise
/// throws the ``PeerSyncError`` that ``lmdbError(_:_:_:)`` builds. System calls made by this
/// module (`open`, `pread`, `flock`, ...) pass their `errno` through it too: LMDB's error space
/// includes errno values and `mdb_strerror` describes both.
@inline(__always)
func check(_ rc: Int32, _ operation: @autoclosure () -> String,
           _ context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) {
    if rc == MDB_SUCCESS { return }
    throw lmdbError(rc, operation(), context())
}

/// Maps an LMDB (or errno) return code to a typed error: the text is `mdb_strerror`'s, the
/// context names the operation and the raw code.
///
/// `MDB_CORRUPTED`, `MDB_INVALID`, `MDB_VERSION_MISMATCH`, `MDB_PAGE_NOTFOUND`,
/// `MDB_INCOMPATIBLE` → `.corrupt`; `MDB_READERS_FULL`, `EBUSY`, `EAGAIN` → `.busy`;
/// `MDB_BAD_VALSIZE`, `MDB_TXN_FULL` → `.tooLarge`; `MDB_NOTFOUND`, `ENOENT` → `.notFound`;
/// `ENOSPC`, `EDQUOT` → `.diskFull` (message "disk full: …"); other system errors → `.io`;
/// other LMDB errors → `.storage`.
func lmdbError(_ rc: Int32, _ operation: String, _ context: [String: String] = [:]) -> PeerSyncError {
    let text: String
    if let cText = mdb_strerror(rc) {
        text = String(cString: cText)
    } else {
        text = "LMDB error \(rc)"
    }
    let code: PeerSyncError.Code
    switch rc {
    case MDB_MAP_FULL: code = .lmdbMapFull
    case MDB_MAP_RESIZED: code = .lmdbMapResized
    case ENOSPC, EDQUOT:
        var ctx = context
        ctx["operation"] = operation
        ctx["lmdbCode"] = String(rc)
        return PeerSyncError(.diskFull, "disk full: \(operation): \(text)", context: ctx)
    case MDB_NOTFOUND, ENOENT: code = .notFound
    case MDB_CORRUPTED, MDB_INVALID, MDB_VERSION_MISMATCH, MDB_PAGE_NOTFOUND, MDB_INCOMPATIBLE:
        code = .corrupt
    case MDB_READERS_FULL, EBUSY, EAGAIN: code = .busy
    case MDB_BAD_VALSIZE, MDB_TXN_FULL: code = .tooLarge
    case MDB_BAD_TXN, MDB_BAD_DBI, MDB_BAD_RSLOT, EINVAL: code = .internalError
    case ENOMEM, MDB_PANIC, MDB_DBS_FULL, MDB_CURSOR_FULL, MDB_PAGE_FULL, MDB_TLS_FULL, MDB_KEYEXIST:
        code = .storage
    default: code = rc > 0 ? .io : .storage
    }
    var ctx = context
    ctx["operation"] = operation
    ctx["lmdbCode"] = String(rc)
    return PeerSyncError(code, "\(operation): \(text)", context: ctx)
}

/// The error for a failed write to the store in `directory` (a commit, creating the store):
/// like ``lmdbError(_:_:_:)``, except that `EIO` on a file system with less than
/// `2 × pendingBytes + 1 MiB` available is `.diskFull`. LMDB writes pages with `pwrite` and
/// reports a *short* write as `EIO` ("Input/output error"), which is what a write that runs
/// into a full file system returns; a real I/O error on a disk with room stays `.io`.
func lmdbWriteError(_ rc: Int32, _ operation: String, directory: String, pendingBytes: Int,
                    _ context: [String: String] = [:]) -> PeerSyncError {
    let error = lmdbError(rc, operation, context)
    guard rc == EIO, let available = availableBytes(directory) else { return error }
    let needed = 2 * max(pendingBytes, 0) + (1 << 20)
    guard available < needed else { return error }
    var ctx = error.context
    ctx["availableBytes"] = String(available)
    return PeerSyncError(.diskFull, "disk full: \(operation): only \(available) bytes are free in \(directory)",
                         context: ctx)
}

/// Bytes available to this process on the file system holding `path` (`statvfs`), nil when
/// that cannot be asked.
func availableBytes(_ path: String) -> Int? {
    var st = statvfs()
    guard statvfs(path, &st) == 0 else { return nil }
    let (bytes, overflow) = Int(clamping: st.f_bavail).multipliedReportingOverflow(by: Int(clamping: st.f_frsize))
    return overflow ? Int.max : bytes
}
