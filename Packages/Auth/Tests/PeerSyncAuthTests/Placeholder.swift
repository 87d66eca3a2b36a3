// Placeholder until PeerSyncAuthTests is written; replaced by the package's sources.
