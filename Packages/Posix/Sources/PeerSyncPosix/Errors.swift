// The error codes of PeerSyncPosix. errno values map to these and to the transport layer's
// codes (`.connectionRefused`, `.connectionReset`, `.addressInUse`, `.hostNotFound`) in
// `Syscall.swift`.

import PeerSyncCore

extension PeerSyncError.Code {
    /// The network or host cannot be reached (`ENETUNREACH`, `EHOSTUNREACH`).
    public static let networkUnreachable = Self(rawValue: "networkUnreachable")
}
