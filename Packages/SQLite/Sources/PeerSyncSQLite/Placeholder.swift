// Placeholder until PeerSyncSQLite is written; replaced by the package's sources.
