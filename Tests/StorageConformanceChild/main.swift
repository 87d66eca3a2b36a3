// The child process of the multi-process storage conformance cases.
//
//   storage-conformance-child BACKEND --storage-conformance-child ROLE ...
//
// BACKEND is "sqlite" or "lmdb" (when their package traits are on) or "memory" (which is not
// multi-process: only useful to check the argument handling).
import Foundation
import PeerSyncStorage
import PeerSyncStorageTesting
#if SQLite && canImport(PeerSyncSQLite)
import PeerSyncSQLite
#endif
#if LMDB && canImport(PeerSyncLMDB) && false  // TEMPORARY until the lmdb branch is merged
import PeerSyncLMDB
#endif

func backend(named name: String) -> (any StorageBackend)? {
    switch name {
    case "memory": return MemoryStorageBackend()
    #if SQLite && canImport(PeerSyncSQLite)
    case "sqlite": return SQLiteStorageBackend()
    #endif
    #if LMDB && canImport(PeerSyncLMDB) && false  // TEMPORARY until the lmdb branch is merged
    case "lmdb": return LMDBStorageBackend()
    #endif
    default: return nil
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 2, let chosen = backend(named: arguments[1]) else {
    FileHandle.standardError.write(Data("usage: storage-conformance-child BACKEND \(StorageConformanceChild.marker) ROLE ...\n".utf8))
    exit(64)
}
exit(StorageConformanceChild.main(arguments: arguments, backend: chosen))
