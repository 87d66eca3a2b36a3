internal import CAvahi
import PeerSyncCore
import PeerSyncDiscovery
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Everything one ``DNSSDDiscovery`` holds in Avahi: the client connection to the daemon (and
/// its reconnection), the status, the publications (``AvahiRegistration``) and the browses
/// (``AvahiBrowse``).
///
/// The client is made with `AVAHI_CLIENT_NO_FAIL`, so a missing daemon is waited for
/// (`AVAHI_CLIENT_CONNECTING`). When the daemon goes away the client fails with
/// `AVAHI_ERR_DISCONNECTED`; the engine then frees it — which frees every entry group, browser
/// and resolver it made — and connects anew, and once the daemon is back registers every
/// publication again and restarts every browse. A missing D-Bus (the client cannot even be
/// made) is retried every ``DNSSDConfiguration/retryInterval``.
final class AvahiEngine: @unchecked Sendable {
    // Invariant: every `var` here (and all state of the registrations and browses) is touched
    // only on `loop`'s thread; the `let`s are immutable, and `status` is thread-safe.
    let loop: AvahiLoop
    let configuration: DNSSDConfiguration
    let interfaceIndex: AvahiIfIndex
    let status = DiscoveryStatusBroadcast(.starting)
    let log = Logger(.discovery)

    private(set) var client: OpaquePointer?
    /// Counts the clients made, so a job queued for one client can tell it is gone.
    private var clientGeneration = 0
    /// The daemon answers (browsing works).
    private(set) var serverUp = false
    /// The daemon is in `AVAHI_SERVER_RUNNING` (publishing works).
    private(set) var serverRunning = false
    private var everRunning = false
    private var unavailableSinceRunning = false
    private var reconnectTimer: AvahiTimer?
    private(set) var closed = false
    var registrations: [Int: AvahiRegistration] = [:]
    var browses: [Int: AvahiBrowse] = [:]
    /// The last ID given to a registration or browse (any thread).
    private let lastID = LockedValue(0)

    /// Starts the loop thread and the connection. Throws ``PeerSyncError/Code/invalidArgument``
    /// for an unknown interface name.
    init(configuration: DNSSDConfiguration) throws(PeerSyncError) {
        if let name = configuration.interface {
            let index = if_nametoindex(name)
            guard index != 0 else {
                throw PeerSyncError(.invalidArgument, "there is no network interface named '\(name)'", context: ["interface": name])
            }
            interfaceIndex = AvahiIfIndex(index)
        } else {
            interfaceIndex = AvahiIfIndex(AVAHI_IF_UNSPEC)
        }
        self.configuration = configuration
        self.loop = try AvahiLoop()
        loop.enqueue { [self] in connect() }
    }

    var anyProtocol: AvahiProtocol { AvahiProtocol(AVAHI_PROTO_UNSPEC) }

    /// A new registration or browse ID. Any thread.
    func makeID() -> Int {
        lastID.withLock { id in
            id += 1
            return id
        }
    }

    static func closedError() -> PeerSyncError {
        PeerSyncError(.closed, "the DNS-SD discovery was shut down")
    }

    // MARK: The client

    private func connect() {
        guard !closed, client == nil else { return }
        var error: Int32 = 0
        let created = avahi_client_new(loop.pollAPI, AVAHI_CLIENT_NO_FAIL, avahiClientCallback,
                                       Unmanaged.passUnretained(self).toOpaque(), &error)
        guard let created else {
            // A callback made during the failed attempt may have recorded the (now freed) client.
            client = nil
            serverUp = false
            serverRunning = false
            becameUnavailable(avahiError(error, "connecting to avahi-daemon"))
            reconnectTimer = loop.schedule(after: configuration.retryInterval) { [self] in
                reconnectTimer = nil
                connect()
            }
            return
        }
        // The callback may already have run (and recorded it) inside avahi_client_new.
        client = created
    }

    /// The client's state changed (Avahi callback, loop thread).
    func clientStateChanged(_ changed: OpaquePointer, _ state: AvahiClientState) {
        if client == nil, !closed { client = changed }
        guard changed == client else { return }
        switch state {
        case AVAHI_CLIENT_S_RUNNING:
            serverUp = true
            serverRunning = true
            for id in browses.keys.sorted() { browses[id]?.start() }
            for id in registrations.keys.sorted() { registrations[id]?.register() }
            becameAvailable()
        case AVAHI_CLIENT_S_REGISTERING, AVAHI_CLIENT_S_COLLISION:
            // The daemon is (re)claiming its host name: withdraw until it runs again, as
            // Avahi's documentation asks; browsing goes on.
            serverUp = true
            serverRunning = false
            for registration in registrations.values { registration.withdraw() }
            for id in browses.keys.sorted() { browses[id]?.start() }
        case AVAHI_CLIENT_CONNECTING:
            serverUp = false
            serverRunning = false
            becameUnavailable(PeerSyncError(
                .discoveryUnavailable,
                "avahi-daemon is not running (no org.freedesktop.Avahi on the system D-Bus); waiting for it to start"))
        case AVAHI_CLIENT_FAILURE:
            serverUp = false
            serverRunning = false
            becameUnavailable(avahiError(avahi_client_errno(changed), "reconnecting"))
            // The client is dead: free it (and all it made) after this callback, then reconnect.
            let generation = clientGeneration
            loop.enqueue { [self] in
                guard generation == clientGeneration, client != nil else { return }
                dropClient()
                connect()
            }
        default:
            break
        }
    }

    private func dropClient() {
        for registration in registrations.values { registration.clientDropped() }
        for browse in browses.values { browse.clientDropped() }
        if let client { avahi_client_free(client) }
        client = nil
        clientGeneration += 1
    }

    private func becameUnavailable(_ error: PeerSyncError) {
        if everRunning { unavailableSinceRunning = true }
        log.warning("DNS-SD: \(error)")
        status.update(.unavailable(error))
        // Publishing waits for the daemon only while it answers; queued publications return.
        for registration in registrations.values { registration.settle(.success(())) }
    }

    private func becameAvailable() {
        if !everRunning {
            everRunning = true
            status.update(.running)
        } else if unavailableSinceRunning {
            unavailableSinceRunning = false
            log.info("DNS-SD: avahi-daemon is back; publications registered again, browses restarted")
            status.update(.recovered)
        }
    }

    // MARK: Operations (loop thread)

    /// Withdraws everything, frees the client and reports `stopped`.
    func shutdownOnLoop() {
        guard !closed else { return }
        closed = true
        if let reconnectTimer { loop.cancel(reconnectTimer) }
        reconnectTimer = nil
        for id in registrations.keys.sorted() { registrations[id]?.unpublish(because: Self.closedError()) }
        for id in browses.keys.sorted() { browses[id]?.stop() }
        if let client { avahi_client_free(client) }
        client = nil
        serverUp = false
        serverRunning = false
        status.update(.stopped)
    }
}
