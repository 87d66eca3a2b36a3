// The child process of the multi-process storage conformance cases.
//
//   storage-conformance-child BACKEND --storage-conformance-child ROLE ...
//
// BACKEND is "sqlite" or "lmdb" (when their package traits are on) or "memory" (which is not
// multi-process: only useful to check the argument handling).
import Foundation
import PeerSync
import PeerSyncStorage
import PeerSyncStorageTesting

let arguments = CommandLine.arguments
guard arguments.count >= 2, let chosen = StorageBackends.named(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: storage-conformance-child BACKEND \(StorageConformanceChild.marker) ROLE ...\n".utf8))
    exit(64)
}
exit(StorageConformanceChild.main(arguments: arguments, backend: chosen))
