// Placeholder until PeerSyncLoopback is written; replaced by the package's sources.
