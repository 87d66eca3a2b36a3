// Placeholder until PeerSyncLMDB is written; replaced by the package's sources.
