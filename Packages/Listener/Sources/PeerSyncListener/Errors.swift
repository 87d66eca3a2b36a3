// The error codes of PeerSyncListener.

import PeerSyncCore

extension PeerSyncError.Code {
    /// The listener cannot do what was asked in its current state (e.g. started twice).
    public static let listenerState = Self(rawValue: "listenerState")
}
