// Placeholder until PeerSyncStorageTesting is written; replaced by the package's sources.
