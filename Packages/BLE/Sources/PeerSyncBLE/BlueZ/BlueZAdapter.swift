#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import PeerSyncCore
import PeerSyncPosix
#if canImport(CBlueZ)
internal import CBlueZ
#endif

/// The local Bluetooth adapter through BlueZ's libbluetooth: LE advertising and scanning over
/// HCI, L2CAP LE connection-oriented channels and the ATT fixed channel (CID 4) as
/// ``SeqPacketSocket``s. The only code of PeerSync that calls libbluetooth.
///
/// **Compiled, never run on a radio**: the machines PeerSync is built and tested on have no
/// Bluetooth in their kernel. There, every entry point throws
/// ``PeerSyncError/Code/bluetoothUnavailable`` ("Bluetooth is not available on this system:
/// …"), which a test asserts. Everything above this layer runs over the simulated radio.
///
/// HCI commands go through `hci_send_req`, which blocks until the adapter answers (at most
/// ``commandTimeoutMilliseconds``): they run on the adapter's own serial dispatch queue,
/// never on a cooperative thread. Advertising reports are read from a non-blocking HCI socket
/// on the reactor; L2CAP sockets are non-blocking and live on the reactor.
///
/// Threading: every method from any task. Errors: ``bluetoothError(_:errno:hciStatus:)``.
final class BlueZAdapter: Sendable {
    /// The HCI device number (`hci0` is 0).
    let deviceID: Int32
    /// How long one HCI command may take.
    static let commandTimeoutMilliseconds: Int32 = 2000
    // The blocking HCI command socket (`hci_open_dev`); used only on `queue`.
    private let commandSocket: Int32
    private let queue: DispatchQueue

    private init(deviceID: Int32, commandSocket: Int32) {
        self.deviceID = deviceID
        self.commandSocket = commandSocket
        self.queue = DispatchQueue(label: "PeerSyncBLE.hci\(deviceID)")
    }

    deinit {
        closeDescriptor(commandSocket)
    }

    /// Whether this kernel has Bluetooth sockets at all: nil if it has, else the
    /// ``PeerSyncError/Code/bluetoothUnavailable`` error to report.
    static func probe() -> PeerSyncError? {
        let fd = socket(bluetoothFamily, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), l2capProtocol)
        if fd < 0 {
            let error = bluetoothError("socket(AF_BLUETOOTH)", errno: errno)
            return error.code == .bluetoothUnavailable ? error : nil
        }
        closeDescriptor(fd)
        return nil
    }

    /// Opens the default adapter (`hci_get_route`, `hci_open_dev`). Throws
    /// ``PeerSyncError/Code/bluetoothUnavailable`` without Bluetooth in the kernel or without
    /// an adapter.
    static func openDefault() throws(PeerSyncError) -> BlueZAdapter {
        if let unavailable = probe() { throw unavailable }
        #if canImport(CBlueZ)
        let device = hci_get_route(nil)
        guard device >= 0 else { throw bluetoothError("hci_get_route", errno: errno == 0 ? ENODEV : errno) }
        let fd = hci_open_dev(device)
        guard fd >= 0 else { throw bluetoothError("hci_open_dev", errno: errno) }
        return BlueZAdapter(deviceID: device, commandSocket: fd)
        #else
        throw bluetoothError("hci_get_route", errno: EAFNOSUPPORT)
        #endif
    }

    // MARK: HCI commands

    /// LE controller commands (OGF 0x08) and their OCFs.
    private enum LECommand {
        static let ogf: UInt16 = 0x08
        static let setAdvertisingParameters: UInt16 = 0x0006
        static let setAdvertisingData: UInt16 = 0x0008
        static let setScanResponseData: UInt16 = 0x0009
        static let setAdvertiseEnable: UInt16 = 0x000A
        static let setScanParameters: UInt16 = 0x000B
        static let setScanEnable: UInt16 = 0x000C
    }

    /// Sends one LE command on the adapter's queue and returns when it completed; throws for
    /// a failed send or a non-zero status.
    private func send(_ name: String, ocf: UInt16, parameters: [UInt8]) async throws {
        let (fd, queue) = (commandSocket, self.queue)
        let result: Result<Void, PeerSyncError> = await awaitDelivery { deliver in
            queue.async {
                deliver(Self.sendRequest(name, fd: fd, ocf: ocf, parameters: parameters))
            }
        }
        try result.get()
    }

    /// Blocks in `hci_send_req` (on the adapter's queue only).
    private static func sendRequest(_ name: String, fd: Int32, ocf: UInt16, parameters: [UInt8]) -> Result<Void, PeerSyncError> {
        #if canImport(CBlueZ)
        var parameters = parameters
        var status: UInt8 = 0xFF
        let code: Int32 = parameters.withUnsafeMutableBytes { cparam in
            withUnsafeMutablePointer(to: &status) { statusPointer in
                var request = hci_request()
                request.ogf = LECommand.ogf
                request.ocf = ocf
                request.cparam = cparam.baseAddress
                request.clen = Int32(cparam.count)
                request.rparam = UnsafeMutableRawPointer(statusPointer)
                request.rlen = 1
                return hci_send_req(fd, &request, commandTimeoutMilliseconds)
            }
        }
        if code < 0 { return .failure(bluetoothError(name, errno: errno)) }
        if status != 0 { return .failure(bluetoothError(name, errno: 0, hciStatus: status)) }
        return .success(())
        #else
        return .failure(bluetoothError(name, errno: EAFNOSUPPORT))
        #endif
    }

    private static func littleEndian(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

    /// Pads a payload to the 31 bytes the command carries, behind its length byte.
    private static func payloadParameters(_ payload: [UInt8]) -> [UInt8] {
        [UInt8(payload.count)] + payload + [UInt8](repeating: 0, count: max(0, ADStructure.maxPayloadSize - payload.count))
    }

    /// Starts connectable undirected advertising (ADV_IND) of `advertisingData` with
    /// `scanResponse`, every `intervalMilliseconds` (20...10240; default 100).
    func startAdvertising(advertisingData: [UInt8], scanResponse: [UInt8], intervalMilliseconds: Int = 100) async throws {
        guard advertisingData.count <= ADStructure.maxPayloadSize, scanResponse.count <= ADStructure.maxPayloadSize,
              (20...10240).contains(intervalMilliseconds) else {
            throw PeerSyncError(.invalidArgument, "advertising payloads are at most 31 bytes and the interval 20...10240 ms")
        }
        let interval = UInt16(intervalMilliseconds * 1000 / 625)  // units of 0.625 ms
        // min and max interval, ADV_IND, own address public, peer address type + address
        // (unused), all three channels, no filter.
        let parameters = Self.littleEndian(interval) + Self.littleEndian(interval) + [0x00, 0x00, 0x00]
            + [UInt8](repeating: 0, count: 6) + [0x07, 0x00]
        try await send("LE Set Advertising Parameters", ocf: LECommand.setAdvertisingParameters, parameters: parameters)
        try await send("LE Set Advertising Data", ocf: LECommand.setAdvertisingData, parameters: Self.payloadParameters(advertisingData))
        try await send("LE Set Scan Response Data", ocf: LECommand.setScanResponseData, parameters: Self.payloadParameters(scanResponse))
        try await send("LE Set Advertise Enable", ocf: LECommand.setAdvertiseEnable, parameters: [0x01])
    }

    /// Stops advertising.
    func stopAdvertising() async throws {
        try await send("LE Set Advertise Enable", ocf: LECommand.setAdvertiseEnable, parameters: [0x00])
    }

    /// Scans actively (scan requests, so scan responses arrive too) and yields every LE
    /// Advertising Report until the stream's consumer stops; then disables scanning. The
    /// reports are read from a second, filtered, non-blocking HCI socket on the reactor.
    func scan() async throws -> AsyncThrowingStream<HCIAdvertisingReport, any Error> {
        #if canImport(CBlueZ)
        let fd = hci_open_dev(deviceID)
        guard fd >= 0 else { throw bluetoothError("hci_open_dev", errno: errno) }
        var filter = hci_filter()
        hci_filter_clear(&filter)
        hci_filter_set_ptype(Int32(HCIAdvertisingReport.eventPacketType), &filter)
        hci_filter_set_event(Int32(HCIAdvertisingReport.leMetaEvent), &filter)
        let flags = fcntl(fd, F_GETFL)
        let filtered = setsockopt(fd, Int32(SOL_HCI), Int32(HCI_FILTER), &filter, socklen_t(MemoryLayout<hci_filter>.size))
        if flags < 0 || filtered < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 {
            let code = errno
            closeDescriptor(fd)
            throw bluetoothError("HCI event filter", errno: code)
        }
        let events = try AsyncDescriptor(fd: fd)
        do {
            // active scan, interval = window = 10 ms, own address public, no filter policy
            try await send("LE Set Scan Parameters", ocf: LECommand.setScanParameters,
                           parameters: [0x01] + Self.littleEndian(0x10) + Self.littleEndian(0x10) + [0x00, 0x00])
            try await send("LE Set Scan Enable", ocf: LECommand.setScanEnable, parameters: [0x01, 0x00])
        } catch {
            events.close()
            throw error
        }
        let (stream, continuation) = AsyncThrowingStream<HCIAdvertisingReport, any Error>.makeStream()
        let reader = Task {
            var buffer = [UInt8](repeating: 0, count: 260)  // HCI_MAX_EVENT_SIZE
            do {
                while !Task.isCancelled {
                    let count = try await events.perform(.read, "read(HCI)") { fd in
                        buffer.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress, raw.count) }
                    }
                    for report in (try? HCIAdvertisingReport.parse(eventPacket: Array(buffer.prefix(count)))) ?? [] {
                        continuation.yield(report)
                    }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { [self] _ in
            reader.cancel()
            events.close()
            Task { try? await self.send("LE Set Scan Enable", ocf: LECommand.setScanEnable, parameters: [0x00, 0x00]) }
        }
        return stream
        #else
        throw bluetoothError("hci_open_dev", errno: EAFNOSUPPORT)
        #endif
    }

    // MARK: L2CAP

    /// An address-type byte of `sockaddr_l2` (BDADDR_LE_PUBLIC or BDADDR_LE_RANDOM).
    enum AddressType: UInt8, Sendable {
        case lePublic = 0x01
        case leRandom = 0x02
    }

    /// Address types of the devices scans saw, by address: an L2CAP connection (ATT or data
    /// channel) must name the type the device advertised with. Process-wide, since the
    /// scanning (discovery) and the connecting (transport) sides are separate objects on one
    /// adapter.
    private static let seenAddressTypes = LockedValue<[String: AddressType]>([:])

    /// Records the address type a scan reported for `address`.
    static func recordAddressType(_ type: AddressType, of address: String) {
        seenAddressTypes.withLock { $0[address] = type }
    }

    /// The address type a scan reported for `address`; public when none did.
    static func addressType(of address: String) -> AddressType {
        seenAddressTypes.withLock { $0[address] } ?? .lePublic
    }

    /// This adapter's own address (`AA:BB:CC:DD:EE:FF`, `hci_devba`).
    func address() throws(PeerSyncError) -> String {
        #if canImport(CBlueZ)
        var device = bdaddr_t()
        guard hci_devba(deviceID, &device) >= 0 else { throw bluetoothError("hci_devba", errno: errno) }
        var text = [CChar](repeating: 0, count: 18)
        _ = ba2str(&device, &text)
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        #else
        throw bluetoothError("hci_devba", errno: EAFNOSUPPORT)
        #endif
    }

    /// The ATT fixed channel's CID.
    static let attChannelID: UInt16 = 4

    /// A listening L2CAP LE socket; ``accept()`` gives each connected channel.
    final class Listener: Sendable {
        /// The PSM it listens on (the kernel's pick from the dynamic range 0x80...0xFF when
        /// none was asked for); 0 for the ATT fixed channel.
        let psm: UInt16
        private let descriptor: AsyncDescriptor

        fileprivate init(psm: UInt16, descriptor: AsyncDescriptor) {
            self.psm = psm
            self.descriptor = descriptor
        }

        /// The next connected channel; throws `.closed` after ``close()``.
        func accept() async throws -> SeqPacketSocket {
            let fd = try await descriptor.perform(.read, "accept(L2CAP)") { fd in
                Glibc.accept(fd, nil, nil)
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)  // accept4 is not exported by Swift's Glibc
            return try SeqPacketSocket(adopting: fd)
        }

        func close() { descriptor.close() }
    }

    /// Listens for LE connection-oriented channels on `psm` (nil: a dynamic PSM the kernel
    /// picks, reported by ``Listener/psm``).
    func listenL2CAP(psm: UInt16? = nil) throws -> Listener {
        try Self.listen(psm: psm ?? 0, channelID: 0)
    }

    /// Listens on the ATT fixed channel (CID 4): each accepted socket is one client's ATT
    /// bearer, for ``GATTServer/serve(_:)``. (bluetoothd, if it runs, may hold this channel
    /// itself; PeerSync then cannot serve GATT this way.)
    func listenATT() throws -> Listener {
        try Self.listen(psm: 0, channelID: Self.attChannelID)
    }

    /// Opens an LE connection-oriented channel to `psm` of the device at `address`
    /// (`AA:BB:CC:DD:EE:FF`).
    /// Throws ``PeerSyncError/Code/timeout`` when the connection is not up within `timeout`.
    func connectL2CAP(address: String, addressType: AddressType, psm: UInt16,
                      timeout: Duration = .seconds(30)) async throws -> SeqPacketSocket {
        try await Self.connect(address: address, addressType: addressType, psm: psm, channelID: 0, timeout: timeout)
    }

    /// Opens the ATT fixed channel (CID 4) to the device at `address`: an ATT bearer for
    /// ``GATTClient``.
    func connectATT(address: String, addressType: AddressType) async throws -> SeqPacketSocket {
        try await Self.connect(address: address, addressType: addressType, psm: 0, channelID: Self.attChannelID,
                               timeout: .seconds(30))
    }

    /// The send and receive MTU of a connected L2CAP channel (`BT_SNDMTU`, `BT_RCVMTU`).
    static func channelMTUs(of channel: SeqPacketSocket) throws(PeerSyncError) -> (send: Int, receive: Int) {
        #if canImport(CBlueZ)
        try channel.socket.withDescriptor { fd throws(PeerSyncError) -> (send: Int, receive: Int) in
            func option(_ name: Int32, _ label: String) throws(PeerSyncError) -> Int {
                var value: UInt16 = 0
                var size = socklen_t(MemoryLayout<UInt16>.size)
                guard getsockopt(fd, Int32(SOL_BLUETOOTH), name, &value, &size) == 0 else {
                    throw bluetoothError("getsockopt(\(label))", errno: errno)
                }
                return Int(value)
            }
            return (try option(Int32(BT_SNDMTU), "BT_SNDMTU"), try option(Int32(BT_RCVMTU), "BT_RCVMTU"))
        }
        #else
        throw bluetoothError("getsockopt(BT_SNDMTU)", errno: EAFNOSUPPORT)
        #endif
    }

    /// The remote device's address of a connected L2CAP socket (`getpeername`).
    static func peerAddress(of channel: SeqPacketSocket) throws(PeerSyncError) -> String {
        #if canImport(CBlueZ)
        try channel.socket.withDescriptor { fd throws(PeerSyncError) -> String in
            var remote = sockaddr_l2()
            var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
            let named = withUnsafeMutablePointer(to: &remote) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
            }
            guard named == 0 else { throw bluetoothError("getpeername(L2CAP)", errno: errno) }
            var text = [CChar](repeating: 0, count: 18)
            _ = ba2str(&remote.l2_bdaddr, &text)
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        #else
        throw bluetoothError("getpeername(L2CAP)", errno: EAFNOSUPPORT)
        #endif
    }

    #if canImport(CBlueZ)
    private static func address(_ psm: UInt16, _ channelID: UInt16, _ device: bdaddr_t, _ type: AddressType) -> sockaddr_l2 {
        var address = sockaddr_l2()
        address.l2_family = sa_family_t(bluetoothFamily)
        address.l2_psm = psm.littleEndian        // htobs
        address.l2_cid = channelID.littleEndian
        address.l2_bdaddr = device
        address.l2_bdaddr_type = type.rawValue
        return address
    }

    private static func openSocket() throws(PeerSyncError) -> Int32 {
        let fd = socket(bluetoothFamily, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                        l2capProtocol)
        guard fd >= 0 else { throw bluetoothError("socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP)", errno: errno) }
        return fd
    }

    private static func withSocketAddress<R>(_ address: inout sockaddr_l2,
                                             _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
        }
    }

    private static func listen(psm: UInt16, channelID: UInt16) throws -> Listener {
        let fd = try openSocket()
        var local = address(psm, channelID, bdaddr_t(), .lePublic)  // BDADDR_ANY
        if withSocketAddress(&local, { bind(fd, $0, $1) }) < 0 || Glibc.listen(fd, 16) < 0 {
            let code = errno
            closeDescriptor(fd)
            throw bluetoothError("bind/listen(L2CAP)", errno: code)
        }
        var bound = sockaddr_l2()
        var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
        let named = withUnsafeMutablePointer(to: &bound) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        if named < 0 {
            let code = errno
            closeDescriptor(fd)
            throw bluetoothError("getsockname(L2CAP)", errno: code)
        }
        return Listener(psm: UInt16(littleEndian: bound.l2_psm), descriptor: try AsyncDescriptor(fd: fd))
    }

    private static func connect(address text: String, addressType: AddressType, psm: UInt16,
                                channelID: UInt16, timeout: Duration) async throws -> SeqPacketSocket {
        var device = bdaddr_t()
        guard str2ba(text, &device) == 0, bachk(text) == 0 else {
            throw PeerSyncError(.invalidArgument, "not a Bluetooth address: '\(text)'")
        }
        let fd = try openSocket()
        if channelID != 0 {
            // The fixed channel needs the local end bound to the same channel.
            var local = address(0, channelID, bdaddr_t(), .lePublic)
            if withSocketAddress(&local, { bind(fd, $0, $1) }) < 0 {
                let code = errno
                closeDescriptor(fd)
                throw bluetoothError("bind(L2CAP ATT)", errno: code)
            }
        }
        var remote = address(psm, channelID, device, addressType)
        let started = withSocketAddress(&remote) { Glibc.connect(fd, $0, $1) }
        let code = errno
        if started < 0 && code != EINPROGRESS && code != EAGAIN {
            closeDescriptor(fd)
            throw bluetoothError("connect(L2CAP)", errno: code)
        }
        let channel = try SeqPacketSocket(adopting: fd)
        do {
            if started < 0 {
                // Time out by closing the socket, which ends the wait (as PeerSyncPosix's TCP connect).
                let timer = Task {
                    try await Task.sleep(for: timeout)
                    channel.close()
                }
                defer { timer.cancel() }
                do {
                    try await channel.socket.wait(.write)
                } catch let error as PeerSyncError where error.code == .closed {
                    throw PeerSyncError(.timeout, "the L2CAP connection to \(text) was not up within \(timeout)",
                                        context: ["address": text, "psm": "\(psm)"])
                }
            }
            let failure = try channel.socket.withDescriptor { fd throws(PeerSyncError) -> Int32 in
                var value: Int32 = 0
                var size = socklen_t(MemoryLayout<Int32>.size)
                try syscall("getsockopt(SO_ERROR)") { getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &size) }
                return value
            }
            if failure != 0 { throw bluetoothError("connect(L2CAP)", errno: failure) }
        } catch {
            channel.close()
            throw error
        }
        return channel
    }
    #else
    private static func listen(psm: UInt16, channelID: UInt16) throws -> Listener {
        throw bluetoothError("socket(AF_BLUETOOTH)", errno: EAFNOSUPPORT)
    }

    private static func connect(address: String, addressType: AddressType, psm: UInt16,
                                channelID: UInt16, timeout: Duration) async throws -> SeqPacketSocket {
        throw bluetoothError("socket(AF_BLUETOOTH)", errno: EAFNOSUPPORT)
    }
    #endif
}

/// `AF_BLUETOOTH` and `BTPROTO_L2CAP` (bluetooth.h), spelled out so ``BlueZAdapter/probe()``
/// compiles where libbluetooth's headers are absent.
private let bluetoothFamily: Int32 = 31
private let l2capProtocol: Int32 = 0
