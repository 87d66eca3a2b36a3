internal import CAvahi
import PeerSyncCore
import PeerSyncDiscovery

/// The one place an Avahi error code becomes a ``PeerSyncError``:
///
/// - the daemon or the bus is gone (`AVAHI_ERR_NO_DAEMON`, `AVAHI_ERR_DISCONNECTED`,
///   `AVAHI_ERR_DBUS_ERROR`) → ``PeerSyncError/Code/discoveryUnavailable``, with a hint;
/// - Avahi rejected an argument (`AVAHI_ERR_INVALID_*`, `AVAHI_ERR_IS_PATTERN`) →
///   ``PeerSyncError/Code/invalidArgument``;
/// - `AVAHI_ERR_TIMEOUT` → ``PeerSyncError/Code/timeout``;
/// - anything else (a collision that could not be resolved, too many objects, access denied,
///   …) → ``PeerSyncError/Code/discoveryFailed``.
///
/// `doing` says what was attempted; the message ends with Avahi's own text and the context
/// holds the number (`avahiError`).
func avahiError(_ code: Int32, _ doing: String) -> PeerSyncError {
    let text = String(cString: avahi_strerror(code))
    let context = ["avahiError": String(code)]
    switch Int(code) {
    case AVAHI_ERR_NO_DAEMON:
        return PeerSyncError(.discoveryUnavailable,
                             "\(doing): avahi-daemon is not running (no org.freedesktop.Avahi on the system D-Bus) — \(text)",
                             context: context)
    case AVAHI_ERR_DISCONNECTED:
        return PeerSyncError(.discoveryUnavailable, "\(doing): avahi-daemon went away (the D-Bus connection to it ended) — \(text)",
                             context: context)
    case AVAHI_ERR_DBUS_ERROR:
        return PeerSyncError(.discoveryUnavailable,
                             "\(doing): the system D-Bus is not reachable (is dbus-daemon running? DBUS_SYSTEM_BUS_ADDRESS?) — \(text)",
                             context: context)
    case AVAHI_ERR_TIMEOUT:
        return PeerSyncError(.timeout, "\(doing): \(text)", context: context)
    case AVAHI_ERR_INVALID_HOST_NAME, AVAHI_ERR_INVALID_DOMAIN_NAME, AVAHI_ERR_INVALID_TTL, AVAHI_ERR_IS_PATTERN,
         AVAHI_ERR_INVALID_RECORD, AVAHI_ERR_INVALID_SERVICE_NAME, AVAHI_ERR_INVALID_SERVICE_TYPE, AVAHI_ERR_INVALID_PORT,
         AVAHI_ERR_INVALID_KEY, AVAHI_ERR_INVALID_ADDRESS, AVAHI_ERR_INVALID_INTERFACE, AVAHI_ERR_INVALID_PROTOCOL,
         AVAHI_ERR_INVALID_FLAGS, AVAHI_ERR_INVALID_SERVICE_SUBTYPE, AVAHI_ERR_INVALID_RDATA, AVAHI_ERR_INVALID_DNS_CLASS,
         AVAHI_ERR_INVALID_DNS_TYPE, AVAHI_ERR_INVALID_ARGUMENT:
        return PeerSyncError(.invalidArgument, "\(doing): Avahi rejected it — \(text)", context: context)
    default:
        return PeerSyncError(.discoveryFailed, "\(doing): \(text)", context: context)
    }
}

/// Throws ``avahiError(_:_:)`` for a negative Avahi return code.
func avahiCheck(_ code: Int32, _ doing: @autoclosure () -> String) throws(PeerSyncError) {
    if code < 0 { throw avahiError(code, doing()) }
}
