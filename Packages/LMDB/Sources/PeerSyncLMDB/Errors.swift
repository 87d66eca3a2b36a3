// The error codes of PeerSyncLMDB (internal signals only; every error a caller sees uses
// PeerSyncCore's codes). LMDB return codes become errors in `LMDB/LMDBError.swift`.

import PeerSyncCore

extension PeerSyncError.Code {
    /// Internal signal: LMDB's map is full (`MDB_MAP_FULL`). The write path grows the map and
    /// replays the transaction; this code never reaches a caller.
    static let lmdbMapFull = Self(rawValue: "lmdbMapFull")
    /// Internal signal: another process grew the map (`MDB_MAP_RESIZED`). Transaction begin
    /// adopts the new size and retries; this code never reaches a caller.
    static let lmdbMapResized = Self(rawValue: "lmdbMapResized")
}
