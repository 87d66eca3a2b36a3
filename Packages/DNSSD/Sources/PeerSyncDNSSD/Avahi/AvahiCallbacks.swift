internal import CAvahi

// Avahi's C callbacks. File-scope functions, never closures (a C callback closure that
// captures anything crashes the 6.3 compiler, and one written in main-actor code would be
// main-actor isolated while Avahi calls it on the loop thread). Each gets its Swift object
// unretained as userdata: the engine keeps every registration and browse alive for as long as
// its Avahi objects exist, and frees those first. They all run on the loop thread.

func avahiClientCallback(_ client: OpaquePointer?, _ state: AvahiClientState, _ userdata: UnsafeMutableRawPointer?) {
    guard let client, let userdata else { return }
    Unmanaged<AvahiEngine>.fromOpaque(userdata).takeUnretainedValue().clientStateChanged(client, state)
}

func avahiEntryGroupCallback(_ group: OpaquePointer?, _ state: AvahiEntryGroupState, _ userdata: UnsafeMutableRawPointer?) {
    guard let group, let userdata else { return }
    Unmanaged<AvahiRegistration>.fromOpaque(userdata).takeUnretainedValue().groupStateChanged(group, state)
}

func avahiRecordBrowserCallback(_ browser: OpaquePointer?, _ interface: AvahiIfIndex, _ proto: AvahiProtocol,
                                _ event: AvahiBrowserEvent, _ name: UnsafePointer<CChar>?, _ dnsClass: UInt16,
                                _ dnsType: UInt16, _ rdata: UnsafeRawPointer?, _ size: Int,
                                _ flags: AvahiLookupResultFlags, _ userdata: UnsafeMutableRawPointer?) {
    guard let userdata else { return }
    let bytes = rdata.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
    Unmanaged<AvahiBrowse>.fromOpaque(userdata).takeUnretainedValue()
        .recordEvent(event, interface: interface, proto: proto, rdata: bytes)
}

func avahiServiceResolverCallback(_ resolver: OpaquePointer?, _ interface: AvahiIfIndex, _ proto: AvahiProtocol,
                                  _ event: AvahiResolverEvent, _ name: UnsafePointer<CChar>?, _ type: UnsafePointer<CChar>?,
                                  _ domain: UnsafePointer<CChar>?, _ hostName: UnsafePointer<CChar>?,
                                  _ address: UnsafePointer<AvahiAddress>?, _ port: UInt16,
                                  _ txt: UnsafeMutablePointer<AvahiStringList>?, _ flags: AvahiLookupResultFlags,
                                  _ userdata: UnsafeMutableRawPointer?) {
    guard let resolver, let name, let userdata else { return }
    let browse = Unmanaged<AvahiBrowse>.fromOpaque(userdata).takeUnretainedValue()
    let key = AvahiBrowse.SightingKey(interface: interface, proto: proto, name: String(cString: name))
    guard event == AVAHI_RESOLVER_FOUND, let address else {
        browse.resolved(resolver, key, found: nil)
        return
    }
    var text = [CChar](repeating: 0, count: Int(AVAHI_ADDRESS_STR_MAX))
    avahi_address_snprint(&text, text.count, address)
    let addressText = text.withUnsafeBufferPointer { buffer in
        String(decoding: UnsafeRawBufferPointer(buffer).prefix { $0 != 0 }, as: UTF8.self)
    }
    browse.resolved(resolver, key, found: (hostName: hostName.map { String(cString: $0) } ?? "",
                                           address: addressText, port: port, txt: avahiStringListEntries(txt)))
}

/// The entries of an Avahi string list (a TXT record), as raw bytes.
func avahiStringListEntries(_ list: UnsafeMutablePointer<AvahiStringList>?) -> [[UInt8]] {
    var entries: [[UInt8]] = []
    var node = list
    while let current = node {
        let size = avahi_string_list_get_size(current)
        if let text = avahi_string_list_get_text(current) {
            entries.append(Array(UnsafeBufferPointer(start: text, count: size)))
        }
        node = avahi_string_list_get_next(current)
    }
    return entries
}

/// Runs `body` with `entries` as an Avahi string list (freed afterwards).
func withAvahiStringList<T>(_ entries: [[UInt8]], _ body: (UnsafeMutablePointer<AvahiStringList>?) -> T) -> T {
    var list: UnsafeMutablePointer<AvahiStringList>?
    // avahi_string_list_add_arbitrary prepends: add the last entry first, so the list keeps
    // our order.
    for entry in entries.reversed() {
        list = entry.withUnsafeBufferPointer { avahi_string_list_add_arbitrary(list, $0.baseAddress, $0.count) }
    }
    defer { avahi_string_list_free(list) }
    return body(list)
}
