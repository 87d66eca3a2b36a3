internal import CAvahi
import PeerSyncCore
import PeerSyncDiscovery

/// One browse of a group: a record browser for the PTR records of
/// `<group>._sub.<type>.<domain>` (Avahi's service browser refuses such subtypes, as its
/// publisher does), and for each instance they point to, a service resolver per interface and
/// protocol, kept open so it reports every change of the TXT record, port or address.
///
/// Sightings of one instance on several interfaces are merged into one ``DiscoveredPeer``
/// (addresses united; the rest from the latest answer). When the client is freed (the daemon
/// went away) the peers reported are kept; after the browse restarts, those not seen again
/// within ``DNSSDConfiguration/reconcileGrace`` of the daemon's "all for now" are reported
/// disappeared.
final class AvahiBrowse {
    struct SightingKey: Hashable {
        let interface: AvahiIfIndex
        let proto: AvahiProtocol
        let name: String
    }

    struct Sighting {
        let hostName: String
        let address: String
        let port: UInt16
        let contents: TXTRecord.Contents
        let order: Int
    }

    // Loop thread only.
    unowned let engine: AvahiEngine
    let id: Int
    let group: PeerGroupID
    let feed: OrderedStreamFeed<PeerEvent>
    private var browser: OpaquePointer?
    private var pointers: Set<SightingKey> = []
    private var resolvers: [SightingKey: OpaquePointer] = [:]
    private var sightings: [SightingKey: Sighting] = [:]
    private var table = PeerTable()
    private var answers = 0
    private var reconcilePending = false
    private var timers: [AvahiTimer] = []
    private let serviceLabels: [String]

    init(engine: AvahiEngine, id: Int, group: PeerGroupID, feed: OrderedStreamFeed<PeerEvent>) {
        self.engine = engine
        self.id = id
        self.group = group
        self.feed = feed
        self.serviceLabels = DNSName.labels(dotted: engine.configuration.serviceType) + DNSName.labels(dotted: engine.configuration.domain)
    }

    /// Starts the record browser, if the daemon answers and it is not running yet.
    func start() {
        guard browser == nil, engine.serverUp, let client = engine.client else { return }
        let name = engine.configuration.subtypeName(for: group.rawValue)
        browser = avahi_record_browser_new(client, engine.interfaceIndex, engine.anyProtocol, name,
                                           UInt16(AVAHI_DNS_CLASS_IN), UInt16(AVAHI_DNS_TYPE_PTR), AvahiLookupFlags(0),
                                           avahiRecordBrowserCallback, Unmanaged.passUnretained(self).toOpaque())
        if browser == nil {
            engine.log.warning("DNS-SD: \(avahiError(avahi_client_errno(client), "browsing \(name)")); retrying")
            later { $0.start() }
        }
    }

    /// A pointer record came or went, or the browser reports progress (Avahi callback).
    func recordEvent(_ event: AvahiBrowserEvent, interface: AvahiIfIndex, proto: AvahiProtocol, rdata: [UInt8]) {
        switch event {
        case AVAHI_BROWSER_NEW, AVAHI_BROWSER_REMOVE:
            guard let labels = DNSName.labels(rdata), labels.count > 1, DNSName.same(labels.dropFirst(), serviceLabels) else {
                engine.log.debug("DNS-SD: ignoring a pointer in \(group) to something that is not a \(engine.configuration.serviceType) instance")
                return
            }
            let key = SightingKey(interface: interface, proto: proto, name: labels[0])
            if event == AVAHI_BROWSER_NEW {
                pointers.insert(key)
                resolve(key)
            } else {
                pointers.remove(key)
                stopResolving(key)
                sightings[key] = nil
                refresh(key.name)
            }
        case AVAHI_BROWSER_ALL_FOR_NOW:
            guard reconcilePending else { return }
            reconcilePending = false
            later(engine.configuration.reconcileGrace) { $0.reconcile() }
        case AVAHI_BROWSER_FAILURE:
            let code = engine.client.map { avahi_client_errno($0) } ?? Int32(AVAHI_ERR_DISCONNECTED)
            engine.log.warning("DNS-SD: \(avahiError(code, "browsing \(group)")); retrying")
            if let browser { avahi_record_browser_free(browser) }
            browser = nil
            later { $0.start() }
        default:
            break
        }
    }

    private func resolve(_ key: SightingKey) {
        guard resolvers[key] == nil, engine.serverUp, let client = engine.client else { return }
        let resolver = avahi_service_resolver_new(client, key.interface, key.proto, key.name, engine.configuration.serviceType,
                                                  engine.configuration.domain, engine.anyProtocol, AvahiLookupFlags(0),
                                                  avahiServiceResolverCallback, Unmanaged.passUnretained(self).toOpaque())
        guard let resolver else {
            engine.log.warning("DNS-SD: \(avahiError(avahi_client_errno(client), "resolving '\(key.name)'")); retrying")
            later { $0.retryResolving(key) }
            return
        }
        resolvers[key] = resolver
    }

    private func retryResolving(_ key: SightingKey) {
        if pointers.contains(key) { resolve(key) }
    }

    private func stopResolving(_ key: SightingKey) {
        if let resolver = resolvers.removeValue(forKey: key) { avahi_service_resolver_free(resolver) }
    }

    /// A resolver found (or re-found, after a change) an instance, or failed (Avahi callback).
    func resolved(_ resolver: OpaquePointer, _ key: SightingKey, found: (hostName: String, address: String, port: UInt16, txt: [[UInt8]])?) {
        guard resolvers[key] == resolver else { return }
        guard let found else {
            // Timed out or vanished: free it; try again while its pointer is still there.
            stopResolving(key)
            sightings[key] = nil
            refresh(key.name, dropIfUnresolved: false)
            later { $0.retryResolving(key) }
            return
        }
        guard let contents = TXTRecord.decode(found.txt) else {
            engine.log.debug("DNS-SD: '\(key.name)' in \(group) has no valid peerid in its TXT record; not a PeerSync peer")
            sightings[key] = nil
            refresh(key.name)
            return
        }
        answers += 1
        sightings[key] = Sighting(hostName: found.hostName, address: found.address, port: found.port, contents: contents, order: answers)
        refresh(key.name)
    }

    /// Reports the merged state of instance `name`: updated or appeared if resolved somewhere;
    /// disappeared if not (unless `dropIfUnresolved` is false and a pointer is still there).
    private func refresh(_ name: String, dropIfUnresolved: Bool = true) {
        let found = sightings.filter { $0.key.name == name }.map(\.value)
        guard let latest = found.max(by: { $0.order < $1.order }) else {
            let pointed = pointers.contains { $0.name == name }
            if !pointed || dropIfUnresolved { emit(table.remove(name: name)) }
            return
        }
        let peer = DiscoveredPeer(name: name, peerID: latest.contents.peerID, group: group, hostName: latest.hostName,
                                  addresses: Set(found.map(\.address)).sorted(), port: latest.port,
                                  metadata: latest.contents.metadata, protocolVersion: latest.contents.protocolVersion,
                                  discovery: .dnssd)
        emit(table.upsert(peer))
    }

    /// After a restart: the peers reported before that no pointer names any more are gone.
    private func reconcile() {
        let pointed = Set(pointers.map(\.name))
        for name in table.peers.keys.sorted() where !pointed.contains(name) {
            emit(table.remove(name: name))
        }
    }

    private func emit(_ event: PeerEvent?) {
        guard let event else { return }
        feed.send(event)
    }

    /// Runs `action` after `delay` (default: the retry interval), unless the browse stopped or
    /// the client was dropped meanwhile.
    private func later(_ delay: Duration? = nil, _ action: @escaping (AvahiBrowse) -> Void) {
        var timer: AvahiTimer?
        timer = engine.loop.schedule(after: delay ?? engine.configuration.retryInterval) { [weak self] in
            guard let self else { return }
            self.timers.removeAll { $0 === timer }
            action(self)
        }
        if let timer { timers.append(timer) }
    }

    private func cancelTimers() {
        for timer in timers { engine.loop.cancel(timer) }
        timers.removeAll()
    }

    /// The client was freed, with the browser and resolvers: keep the reported peers and
    /// reconcile once restarted.
    func clientDropped() {
        browser = nil
        resolvers.removeAll()
        pointers.removeAll()
        sightings.removeAll()
        cancelTimers()
        reconcilePending = !table.peers.isEmpty
    }

    /// Ends the browse: frees the browser and resolvers and finishes the stream.
    func stop() {
        for key in Array(resolvers.keys) { stopResolving(key) }
        if let browser { avahi_record_browser_free(browser) }
        browser = nil
        cancelTimers()
        feed.finish()
        engine.browses[id] = nil
    }
}
