internal import CAvahi
import PeerSyncCore
import PeerSyncDiscovery

/// One publication as an Avahi entry group: the service (SRV, TXT and the base-type PTR, through
/// `avahi_entry_group_add_service_strlst`) and the group subtype's PTR record
/// `<group>._sub.<type>.<domain> → <name>.<type>.<domain>`, added with the raw record API
/// because Avahi's subtype API refuses labels that do not start with `_` (Couchbase Lite's
/// group IDs do not).
///
/// A name taken on this daemon (`AVAHI_ERR_COLLISION` when adding) or claimed by another host
/// while probing (`AVAHI_ENTRY_GROUP_COLLISION`) is replaced by Avahi's alternative
/// (`avahi_alternative_service_name`: `name #2`, `name #3`, …) and the group registered again.
final class AvahiRegistration {
    enum State {
        /// Not registered: the daemon is not running (or was not yet asked).
        case pending
        case registering
        case established
        case failed(PeerSyncError)
    }

    // Loop thread only, except `snapshot` (its own lock), read by ``DNSSDPublication``.
    unowned let engine: AvahiEngine
    let id: Int
    private(set) var announcement: PeerAnnouncement
    private(set) var name: String
    private(set) var state = State.pending
    private var group: OpaquePointer?
    private var waiters: [(Result<Void, PeerSyncError>) -> Void] = []
    private var retryTimer: AvahiTimer?
    let snapshot: LockedValue<(name: String, announcement: PeerAnnouncement)>

    /// The most names tried for one registration before giving up.
    static let maxRenames = 64

    init(engine: AvahiEngine, id: Int, announcement: PeerAnnouncement) {
        self.engine = engine
        self.id = id
        self.announcement = announcement
        self.name = announcement.name
        self.snapshot = LockedValue((announcement.name, announcement))
    }

    /// Calls `waiter` once the registration settles: established, failed, or left pending
    /// because the daemon is not running — at once if it is not registering now.
    func whenSettled(_ waiter: @escaping (Result<Void, PeerSyncError>) -> Void) {
        switch state {
        case .registering: waiters.append(waiter)
        case .failed(let error): waiter(.failure(error))
        case .pending, .established: waiter(.success(()))
        }
    }

    func settle(_ result: Result<Void, PeerSyncError>) {
        let waiting = waiters
        waiters.removeAll()
        for waiter in waiting { waiter(result) }
    }

    /// (Re)registers the entries, if the daemon runs.
    func register() {
        guard let client = engine.client, engine.serverRunning, !engine.closed else { return }
        if let retryTimer { engine.loop.cancel(retryTimer) }
        retryTimer = nil
        do throws(PeerSyncError) {
            let group: OpaquePointer
            if let existing = self.group {
                avahi_entry_group_reset(existing)
                group = existing
            } else {
                guard let made = avahi_entry_group_new(client, avahiEntryGroupCallback, Unmanaged.passUnretained(self).toOpaque()) else {
                    throw avahiError(avahi_client_errno(client), "creating an Avahi entry group for '\(name)'")
                }
                self.group = made
                group = made
            }
            try addEntries(to: group)
            try avahiCheck(avahi_entry_group_commit(group), "committing '\(name)'")
            state = .registering
        } catch {
            fail(error)
        }
    }

    private func addEntries(to group: OpaquePointer) throws(PeerSyncError) {
        let configuration = engine.configuration
        var renames = 0
        while true {
            let code = withAvahiStringList(TXTRecord.entries(for: announcement)) { txt in
                avahi_entry_group_add_service_strlst(group, engine.interfaceIndex, engine.anyProtocol, AVAHI_PUBLISH_NO_COOKIE,
                                                     name, configuration.serviceType, configuration.domain, nil,
                                                     announcement.port, txt)
            }
            if Int(code) == AVAHI_ERR_COLLISION, renames < Self.maxRenames {
                // Taken on this daemon (another client or another publication of ours).
                renames += 1
                rename()
                avahi_entry_group_reset(group)
                continue
            }
            try avahiCheck(code, "publishing '\(name)' as \(configuration.serviceType)")
            break
        }
        let target = DNSName.wire([name] + DNSName.labels(dotted: configuration.serviceType) + DNSName.labels(dotted: configuration.domain))
        let subtype = configuration.subtypeName(for: announcement.group.rawValue)
        let code = target.withUnsafeBytes { rdata in
            avahi_entry_group_add_record(group, engine.interfaceIndex, engine.anyProtocol, AvahiPublishFlags(0), subtype,
                                         UInt16(AVAHI_DNS_CLASS_IN), UInt16(AVAHI_DNS_TYPE_PTR), UInt32(AVAHI_DEFAULT_TTL),
                                         rdata.baseAddress, rdata.count)
        }
        try avahiCheck(code, "publishing the group pointer \(subtype) of '\(name)'")
    }

    /// Avahi's alternative to a taken service name (`avahi_alternative_service_name`), nil for
    /// a name Avahi considers invalid.
    static func alternativeName(after name: String) -> String? {
        guard let alternative = avahi_alternative_service_name(name) else { return nil }
        defer { avahi_free(alternative) }
        return String(cString: alternative)
    }

    private func rename() {
        guard let next = Self.alternativeName(after: name) else { return }
        engine.log.info("DNS-SD: the name '\(name)' is taken; publishing as '\(next)'")
        name = next
        snapshot.withLock { $0.name = next }
    }

    private func fail(_ error: PeerSyncError) {
        state = .failed(error)
        engine.log.warning("DNS-SD: \(error)")
        settle(.failure(error))
        // Try again later — the daemon may have been restarting, or the name fight may be
        // over — unless Avahi rejected the announcement itself.
        guard error.code != .invalidArgument else { return }
        retryTimer = engine.loop.schedule(after: engine.configuration.retryInterval * 5) { [weak self] in
            self?.retryTimer = nil
            self?.register()
        }
    }

    /// The entry group's state changed (Avahi callback, loop thread).
    func groupStateChanged(_ changed: OpaquePointer, _ newState: AvahiEntryGroupState) {
        guard changed == group else { return }
        switch newState {
        case AVAHI_ENTRY_GROUP_ESTABLISHED:
            state = .established
            engine.log.verbose("DNS-SD: published '\(name)' in \(announcement.group)")
            settle(.success(()))
        case AVAHI_ENTRY_GROUP_COLLISION:
            // Another host claims the name: pick the alternative and register again.
            rename()
            register()
        case AVAHI_ENTRY_GROUP_FAILURE:
            let code = engine.client.map { avahi_client_errno($0) } ?? Int32(AVAHI_ERR_DISCONNECTED)
            fail(avahiError(code, "registering '\(name)'"))
        default:
            break
        }
    }

    /// Replaces the TXT record.
    func updateMetadata(_ metadata: PeerMetadata) throws(PeerSyncError) {
        announcement.metadata = metadata
        snapshot.withLock { $0.announcement.metadata = metadata }
        guard let group, engine.serverRunning else { return }
        switch state {
        case .registering, .established:
            let code = withAvahiStringList(TXTRecord.entries(for: announcement)) { txt in
                avahi_entry_group_update_service_txt_strlst(group, engine.interfaceIndex, engine.anyProtocol, AVAHI_PUBLISH_NO_COOKIE,
                                                            name, engine.configuration.serviceType, engine.configuration.domain, txt)
            }
            try avahiCheck(code, "updating the metadata of '\(name)'")
        case .pending, .failed:
            break
        }
    }

    /// Withdraws the entries but keeps the group, for registering again (the daemon is
    /// re-claiming its host name).
    func withdraw() {
        if let group { avahi_entry_group_reset(group) }
        state = .pending
        settle(.success(()))
    }

    /// The client was freed, and the entry group with it.
    func clientDropped() {
        group = nil
        state = .pending
        if let retryTimer { engine.loop.cancel(retryTimer) }
        retryTimer = nil
    }

    /// Withdraws for good (other hosts get goodbye packets) and forgets the registration.
    func unpublish(because reason: PeerSyncError) {
        if let group { avahi_entry_group_free(group) }
        group = nil
        if let retryTimer { engine.loop.cancel(retryTimer) }
        retryTimer = nil
        settle(.failure(reason))
        engine.registrations[id] = nil
    }
}
