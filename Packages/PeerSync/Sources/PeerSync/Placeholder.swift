// Placeholder until PeerSync is written; replaced by the package's sources.
