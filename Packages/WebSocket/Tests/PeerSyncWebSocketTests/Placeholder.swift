// Placeholder until PeerSyncWebSocketTests is written; replaced by the package's sources.
