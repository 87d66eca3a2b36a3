// Placeholder until PeerSyncTransport is written; replaced by the package's sources.
