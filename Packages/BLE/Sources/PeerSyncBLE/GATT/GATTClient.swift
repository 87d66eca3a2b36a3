import PeerSyncCore
import PeerSyncPosix

/// The GATT client side of PeerSync discovery: over one ATT bearer (on a radio the LE ATT
/// fixed channel, L2CAP CID 4; in tests one end of `SeqPacketSocket.pair()`) it exchanges
/// the MTU, finds the peer group's primary service, its PSM and metadata characteristics and
/// the metadata's CCCD (``connect(over:serviceUUID:preferredMTU:transactionTimeout:)``), then
/// reads them and subscribes to metadata changes.
///
/// ATT allows one request at a time: calls are queued and made in order. Each waits at most
/// the transaction timeout (ATT's is 30 s); after a timeout, a malformed or unexpected PDU, or
/// the server closing the bearer, the client closes and every call — pending and later —
/// throws: `PeerSyncError.Code.timeout`, `PeerSyncError.Code.protocolError`, or
/// `PeerSyncError.Code.connectionClosed`; an ATT Error Response fails just that call with
/// `PeerSyncError.Code.protocolError` (context `attError`).
///
/// Threading: every method from any task.
public final class GATTClient: Sendable {
    /// Where the peer service's attributes are.
    struct ServiceHandles: Sendable, Equatable {
        var serviceStart: UInt16
        var serviceEnd: UInt16
        var psmValue: UInt16
        var metadataValue: UInt16
        var metadataConfiguration: UInt16
    }

    private struct State {
        var pending: CheckedContinuation<ATTPDU, any Error>?
        var failure: PeerSyncError?
        var mtu = ATTPDU.defaultMTU
        var notifications: AsyncStream<[UInt8]>.Continuation?
    }

    private let socket: SeqPacketSocket
    private let transactionTimeout: Duration
    // One ATT request at a time.
    private let requestLock = AsyncLock()
    // Guards the pending request, the terminal failure, the MTU and the notification sink;
    // never held across a suspension.
    private let state = LockedValue(State())
    private let handlesStorage = LockedValue<ServiceHandles?>(nil)
    private let receiver = LockedValue<Task<Void, Never>?>(nil)

    /// The service UUID the client looks for.
    public let serviceUUID: BLEUUID

    private init(socket: SeqPacketSocket, serviceUUID: BLEUUID, transactionTimeout: Duration) {
        self.socket = socket
        self.serviceUUID = serviceUUID
        self.transactionTimeout = transactionTimeout
    }

    /// Connects a client over `socket` (which it then owns and closes): exchanges the MTU
    /// (proposing `preferredMTU`, 23...517), finds the service `serviceUUID` and its
    /// characteristics. Throws `PeerSyncError.Code.notFound` when the server has no such
    /// service or it lacks a characteristic, else as the type says; the socket is closed on
    /// failure.
    public static func connect(over socket: SeqPacketSocket, serviceUUID: BLEUUID, preferredMTU: Int = 247,
                               transactionTimeout: Duration = .seconds(30)) async throws -> GATTClient {
        guard (ATTPDU.defaultMTU...517).contains(preferredMTU) else {
            socket.close()
            throw PeerSyncError(.invalidArgument, "an ATT MTU must be in 23...517, got \(preferredMTU)")
        }
        let client = GATTClient(socket: socket, serviceUUID: serviceUUID, transactionTimeout: transactionTimeout)
        client.startReceiving(maxBytes: preferredMTU)
        do {
            let response = try await client.transaction(.exchangeMTURequest(clientRxMTU: UInt16(preferredMTU)))
            guard case .exchangeMTUResponse(let serverMTU) = response else { throw client.unexpected(response) }
            client.state.withLock { $0.mtu = max(ATTPDU.defaultMTU, min(preferredMTU, Int(serverMTU))) }
            let handles = try await client.discoverService()
            client.handlesStorage.withLock { $0 = handles }
        } catch {
            client.close()
            throw error
        }
        return client
    }

    /// The ATT MTU both sides agreed on.
    public var mtu: Int { state.withLock { $0.mtu } }

    /// Reads the PSM characteristic (16-bit little-endian). Throws
    /// `PeerSyncError.Code.protocolError` if its value is not 2 bytes.
    public func readPSM() async throws -> UInt16 {
        let value = try await readLongValue(handles.psmValue)
        guard value.count == 2 else {
            throw PeerSyncError(.protocolError, "the PSM characteristic holds \(value.count) bytes, expected 2")
        }
        return UInt16(value[0]) | UInt16(value[1]) << 8
    }

    /// Reads the whole metadata value (Read, then Read Blob while the parts fill the MTU).
    /// A value updated during the read is read again (at most 4 attempts).
    public func readMetadata() async throws -> [UInt8] {
        try await readLongValue(handles.metadataValue)
    }

    /// Enables notifications of the metadata (writes its CCCD) and returns the stream of its
    /// values: each notification's value, or — when a notification fills the MTU, so the value
    /// may be cut — the value read in full. Only the latest value is buffered. The stream ends
    /// without error after ``close()``, and throws when the connection ends any other way (the
    /// server closed it: `PeerSyncError.Code.connectionClosed`). Call it once per client.
    public func metadataUpdates() async throws -> AsyncThrowingStream<[UInt8], any Error> {
        let (raw, sink) = AsyncStream<[UInt8]>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let failure = state.withLock { state -> PeerSyncError? in
            if state.failure == nil { state.notifications = sink }
            return state.failure
        }
        if let failure { throw failure }
        let configuration = PeerServiceAttributes.notificationsEnabled
        let response = try await transaction(.writeRequest(handle: handles.metadataConfiguration,
                                                           value: [UInt8(configuration & 0xFF), UInt8(configuration >> 8)]))
        guard case .writeResponse = response else { throw unexpected(response) }
        let (updates, continuation) = AsyncThrowingStream<[UInt8], any Error>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let pump = Task { [weak self] in
            for await value in raw {
                guard let self else { break }
                if value.count < self.mtu - 3 {
                    continuation.yield(value)
                    continue
                }
                do {
                    continuation.yield(try await self.readMetadata())
                } catch {
                    // An ATT error on this read alone (the client lives on): the next
                    // notification brings the value; anything else ends the stream.
                    if self.state.withLock({ $0.failure }) != nil { break }
                }
            }
            let failure = self?.state.withLock { $0.failure }
            if let failure, failure.code != .closed {
                continuation.finish(throwing: failure)
            } else {
                continuation.finish()
            }
        }
        continuation.onTermination = { _ in pump.cancel() }
        return updates
    }

    /// Closes the bearer; pending and later calls throw `PeerSyncError.Code.closed`, the
    /// metadata stream ends. Idempotent.
    public func close() {
        fail(PeerSyncError(.closed, "the GATT client was closed"))
    }

    // MARK: Discovery of the service

    private var handles: ServiceHandles {
        get throws {
            guard let handles = handlesStorage.withLock({ $0 }) else {
                throw state.withLock { $0.failure } ?? PeerSyncError(.internalError, "the GATT service was not discovered")
            }
            return handles
        }
    }

    private func discoverService() async throws -> ServiceHandles {
        // Primary services (Read By Group Type), until ours is found.
        var start: UInt16 = 1
        var service: (start: UInt16, end: UInt16)?
        search: while service == nil {
            let response = try await transaction(.readByGroupTypeRequest(startHandle: start, endHandle: 0xFFFF,
                                                                          groupType: .primaryService), notFoundIsEnd: true)
            guard case .readByGroupTypeResponse(let groups) = response else {
                if case .errorResponse = response { break search }
                throw unexpected(response)
            }
            for group in groups {
                if ATTUUID(littleEndian: group.value) == .uuid128(serviceUUID) { service = (group.handle, group.endGroupHandle) }
            }
            guard let last = groups.last, last.endGroupHandle >= last.handle, last.endGroupHandle < 0xFFFF else { break }
            start = last.endGroupHandle + 1
        }
        guard let service else {
            throw PeerSyncError(.notFound, "the GATT server has no primary service \(serviceUUID)")
        }
        // Characteristic declarations (Read By Type 0x2803) within the service.
        var characteristics: [(declaration: UInt16, properties: UInt8, value: UInt16, uuid: ATTUUID)] = []
        start = service.start
        while start <= service.end {
            let response = try await transaction(.readByTypeRequest(startHandle: start, endHandle: service.end,
                                                                     type: .characteristic), notFoundIsEnd: true)
            guard case .readByTypeResponse(let entries) = response else { break }
            for entry in entries {
                guard entry.value.count == 19 || entry.value.count == 5,
                      let uuid = ATTUUID(littleEndian: entry.value[3...]) else {
                    throw PeerSyncError(.protocolError, "a characteristic declaration of \(entry.value.count) bytes")
                }
                characteristics.append((entry.handle, entry.value[0], UInt16(entry.value[1]) | UInt16(entry.value[2]) << 8, uuid))
            }
            guard let last = entries.last?.handle, last < service.end, last >= start else { break }
            start = last + 1
        }
        func find(_ uuid: BLEUUID) throws -> (index: Int, value: UInt16) {
            guard let index = characteristics.firstIndex(where: { $0.uuid == .uuid128(uuid) }) else {
                throw PeerSyncError(.notFound, "the GATT service \(serviceUUID) has no characteristic \(uuid)")
            }
            return (index, characteristics[index].value)
        }
        let psm = try find(BLEServiceUUID.psmCharacteristic)
        let metadata = try find(BLEServiceUUID.metadataCharacteristic)
        // The metadata's descriptors lie between its value and the next declaration.
        let descriptorsEnd = metadata.index + 1 < characteristics.count
            ? characteristics[metadata.index + 1].declaration - 1 : service.end
        var configuration: UInt16?
        start = metadata.value + 1
        while configuration == nil, start <= descriptorsEnd {
            let response = try await transaction(.findInformationRequest(startHandle: start, endHandle: descriptorsEnd),
                                                 notFoundIsEnd: true)
            guard case .findInformationResponse(let entries) = response else { break }
            configuration = entries.first { $0.uuid == .clientCharacteristicConfiguration }?.handle
            guard let last = entries.last?.handle, last >= start else { break }
            start = last + 1
        }
        guard let configuration else {
            throw PeerSyncError(.notFound, "the metadata characteristic has no Client Characteristic Configuration descriptor")
        }
        return ServiceHandles(serviceStart: service.start, serviceEnd: service.end, psmValue: psm.value,
                              metadataValue: metadata.value, metadataConfiguration: configuration)
    }

    /// Reads a whole value: Read, then Read Blob while the parts fill the MTU. A value that
    /// shrinks under a long read (the server updated it: Read Blob answers Invalid Offset) is
    /// read again from the start, a few times at most.
    private func readLongValue(_ handle: UInt16) async throws -> [UInt8] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await readLongValueOnce(handle)
            } catch let error as PeerSyncError where attempt < 4 && error.context["attError"] == "\(ATTErrorCode.invalidOffset.rawValue)" {
                continue
            }
        }
    }

    private func readLongValueOnce(_ handle: UInt16) async throws -> [UInt8] {
        let first = try await transaction(.readRequest(handle: handle))
        guard case .readResponse(var value) = first else { throw unexpected(first) }
        var part = value.count
        while part == mtu - 1 {
            guard value.count <= Int(UInt16.max) else { throw PeerSyncError(.protocolError, "an attribute value longer than 65535 bytes") }
            let response = try await transaction(.readBlobRequest(handle: handle, offset: UInt16(value.count)))
            guard case .readBlobResponse(let bytes) = response else { throw unexpected(response) }
            value += bytes
            part = bytes.count
        }
        return value
    }

    // MARK: Requests and the receive loop

    /// Sends `request` and waits for its response. An Error Response throws
    /// ``PeerSyncError/Code/protocolError`` unless `notFoundIsEnd` and it says Attribute Not
    /// Found (the end of a discovery), which is returned.
    private func transaction(_ request: ATTPDU, notFoundIsEnd: Bool = false) async throws -> ATTPDU {
        try await requestLock.withLock {
            let timeout = transactionTimeout
            let timer = Task { [weak self] in
                try await Task.sleep(for: timeout)
                self?.fail(PeerSyncError(.timeout, "the GATT server did not answer an ATT request within \(timeout)",
                                         context: ["opcode": "\(request.opcode)"]))
            }
            defer { timer.cancel() }
            let response: ATTPDU = try await withCheckedThrowingContinuation { continuation in
                let failure = state.withLock { state -> PeerSyncError? in
                    if let failure = state.failure { return failure }
                    state.pending = continuation
                    return nil
                }
                if let failure {
                    continuation.resume(throwing: failure)
                    return
                }
                let socket = self.socket
                Task {
                    do {
                        try await socket.send(request.encoded())
                    } catch {
                        self.fail(Self.connectionError(error))
                    }
                }
            }
            if case .errorResponse(let opcode, let handle, let error) = response {
                guard opcode == request.opcode else { throw unexpected(response) }
                if notFoundIsEnd && error == .attributeNotFound { return response }
                throw PeerSyncError(.protocolError, "the GATT server answered an ATT request with \(error)",
                                    context: ["attError": "\(error.rawValue)", "handle": "\(handle)", "opcode": "\(opcode)"])
            }
            return response
        }
    }

    private func startReceiving(maxBytes: Int) {
        let task = Task { [weak self, socket] in
            while true {
                let bytes: [UInt8]?
                do {
                    bytes = try await socket.receive(maxBytes: maxBytes + 1)
                } catch {
                    self?.fail(Self.connectionError(error))
                    return
                }
                guard let self else { return }
                guard let bytes else {
                    self.fail(PeerSyncError(.connectionClosed, "the GATT server closed the ATT bearer"))
                    return
                }
                self.received(bytes)
            }
        }
        receiver.withLock { $0 = task }
    }

    private func received(_ bytes: [UInt8]) {
        let pdu: ATTPDU
        do {
            pdu = try ATTPDU.decode(bytes)
        } catch {
            fail(error)
            return
        }
        if case .handleValueNotification(let handle, let value) = pdu {
            let metadataHandle = handlesStorage.withLock { $0?.metadataValue }
            if handle == metadataHandle {
                _ = state.withLock { $0.notifications }?.yield(value)
            }
            return
        }
        let pending = state.withLock { state -> CheckedContinuation<ATTPDU, any Error>? in
            defer { state.pending = nil }
            return state.pending
        }
        guard let pending else {
            fail(PeerSyncError(.protocolError, "the GATT server sent ATT PDU 0x\(String(pdu.opcode, radix: 16)) with no request pending"))
            return
        }
        pending.resume(returning: pdu)
    }

    /// Ends the client with `error` (the first failure wins): fails the pending request,
    /// ends the notifications and closes the socket.
    private func fail(_ error: PeerSyncError) {
        let (pending, notifications) = state.withLock { state -> (CheckedContinuation<ATTPDU, any Error>?, AsyncStream<[UInt8]>.Continuation?) in
            if state.failure == nil { state.failure = error }
            defer { state.pending = nil; state.notifications = nil }
            return (state.pending, state.notifications)
        }
        pending?.resume(throwing: state.withLock { $0.failure } ?? error)
        notifications?.finish()
        socket.close()
        if error.code == .closed { receiver.withLock { $0 }?.cancel() }
    }

    private func unexpected(_ response: ATTPDU) -> PeerSyncError {
        let error = PeerSyncError(.protocolError, "the GATT server answered with an unexpected ATT PDU 0x\(String(response.opcode, radix: 16))")
        fail(error)
        return error
    }

    private static func connectionError(_ error: any Error) -> PeerSyncError {
        guard let error = error as? PeerSyncError else {
            return PeerSyncError(.io, "the ATT bearer failed: \(error)")
        }
        switch error.code {
        case .closed, .timeout, .protocolError, .connectionClosed: return error
        default: return PeerSyncError(.connectionClosed, "the ATT bearer broke: \(error.message)", context: error.context)
        }
    }
}
