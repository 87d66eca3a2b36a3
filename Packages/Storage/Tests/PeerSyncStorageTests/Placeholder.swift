// Placeholder until PeerSyncStorageTests is written; replaced by the package's sources.
