// Placeholder until PeerSyncDatabase is written; replaced by the package's sources.
