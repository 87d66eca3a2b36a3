// Placeholder until PeerSyncTransportTesting is written; replaced by the package's sources.
