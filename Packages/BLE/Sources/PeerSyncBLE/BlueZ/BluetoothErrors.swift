#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
import PeerSyncPosix

extension PeerSyncError.Code {
    /// The system has no usable Bluetooth: the kernel lacks `AF_BLUETOOTH` (`EAFNOSUPPORT`),
    /// there is no adapter (`ENODEV`), or the adapter is down or blocked (`ENETDOWN`,
    /// `ERFKILL`). The message starts "Bluetooth is not available on this system: ".
    /// PeerSync has no generic "unsupported" code; this is the BLE package's own.
    public static let bluetoothUnavailable = Self(rawValue: "bluetoothUnavailable")
}

/// The prefix of every ``PeerSyncError/Code/bluetoothUnavailable`` message.
let bluetoothUnavailablePrefix = "Bluetooth is not available on this system: "

/// The one place where a BlueZ failure becomes a ``PeerSyncError``: an `errno` of a
/// Bluetooth socket or libbluetooth call, or (with `hciStatus`) the status byte an HCI
/// command completed with.
///
/// - `EAFNOSUPPORT`, `EPROTONOSUPPORT` (no Bluetooth in the kernel), `ENODEV` (no adapter),
///   `ENETDOWN`/`ERFKILL` (adapter down or blocked): ``PeerSyncError/Code/bluetoothUnavailable``,
///   message "Bluetooth is not available on this system: <operation>: <reason>".
/// - An HCI status other than 0: ``PeerSyncError/Code/io`` naming the command and status
///   (context `hciStatus`), except 0x0C "Command Disallowed" and 0x12 "Invalid HCI Command
///   Parameters", which are ``PeerSyncError/Code/invalidArgument``.
/// - Any other errno: as PeerSyncPosix maps it (`systemError`), e.g. `.connectionRefused`.
func bluetoothError(_ operation: String, errno code: Int32, hciStatus: UInt8? = nil) -> PeerSyncError {
    if let hciStatus, hciStatus != 0 {
        let context = ["operation": operation, "hciStatus": "0x" + String(hciStatus, radix: 16)]
        switch hciStatus {
        case 0x0C, 0x12:
            return PeerSyncError(.invalidArgument, "\(operation): the adapter refused the HCI command (status 0x\(String(hciStatus, radix: 16)))",
                                 context: context)
        default:
            return PeerSyncError(.io, "\(operation): the HCI command failed (status 0x\(String(hciStatus, radix: 16)))",
                                 context: context)
        }
    }
    switch code {
    case EAFNOSUPPORT, EPROTONOSUPPORT, ENODEV, ENETDOWN, ERFKILL:
        let reason = String(cString: strerror(code))
        let why = code == ENODEV ? "no Bluetooth adapter (\(reason))" : reason
        return PeerSyncError(.bluetoothUnavailable, bluetoothUnavailablePrefix + "\(operation): \(why)",
                             context: ["syscall": operation, "errno": String(code)])
    default:
        return systemError(operation, errno: code)
    }
}
