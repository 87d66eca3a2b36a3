// Placeholder until PeerSyncAuth is written; replaced by the package's sources.
