// Placeholder until PeerSyncWebSocket is written; replaced by the package's sources.
