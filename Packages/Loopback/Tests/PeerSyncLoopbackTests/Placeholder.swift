// Placeholder until PeerSyncLoopbackTests is written; replaced by the package's sources.
