// Placeholder until PeerSyncDatabaseTests is written; replaced by the package's sources.
