import PeerSyncCore
import PeerSyncDiscovery

/// What a PeerSync peer advertises over Bluetooth LE, and what a scanner reads back
/// (`shared/reference/multipeer-protocol.md` §2: the advertisement carries the peer group's
/// service UUID and a local name; the PSM and metadata are read over GATT afterwards).
///
/// On the air (``encoded()``):
/// - **advertising data**: Flags (LE General Discoverable, BR/EDR not supported) and the
///   Complete List of 128-bit Service UUIDs (each little-endian) — 21 bytes for one UUID;
/// - **scan response data**: the local name, as Complete Local Name when its UTF-8 fits (29
///   bytes), else as Shortened Local Name cut to 29 bytes on a Unicode scalar boundary.
///
/// Reading (``init(advertisingData:scanResponse:)``) accepts the structures in any order and in
/// either payload, keeps unknown AD types in ``otherStructures``, and throws
/// `PeerSyncError.Code.protocolError` for malformed lengths (see ``ADStructure/decode(_:)``)
/// or a UUID list whose size is not a multiple of 16. It never traps, whatever the bytes.
public struct BLEAdvertisement: Sendable, Hashable {
    /// The Flags byte, nil when absent.
    public var flags: UInt8?
    /// The 128-bit service UUIDs, in the order advertised.
    public var serviceUUIDs: [BLEUUID]
    /// Whether the UUID list was complete (type 0x07) rather than incomplete (0x06). Written
    /// as complete.
    public var serviceUUIDsComplete: Bool
    /// The local name (complete or shortened), nil when absent. Invalid UTF-8 is repaired.
    public var localName: String?
    /// Whether ``localName`` is the complete name (type 0x09) rather than a shortened one.
    public var localNameComplete: Bool
    /// Structures of any other AD type, in order (ignored by PeerSync, kept for callers).
    public var otherStructures: [ADStructure]

    /// The flags PeerSync advertises: LE General Discoverable, BR/EDR not supported.
    public static let peerSyncFlags = ADStructure.Flag.leGeneralDiscoverable | ADStructure.Flag.brEDRNotSupported
    /// The longest local name that fits in the scan response (31 minus length and type bytes).
    public static let maxLocalNameBytes = ADStructure.maxPayloadSize - 2

    /// The advertisement of a peer of the group whose service UUID is `serviceUUID`
    /// (``BLEServiceUUID/forPeerGroup(_:)``), with PeerSync's flags and `localName` (none if
    /// nil or empty). A name too long for the scan response is shortened by ``encoded()``.
    public init(serviceUUID: BLEUUID, localName: String?) {
        self.init(flags: Self.peerSyncFlags, serviceUUIDs: [serviceUUID], localName: localName)
    }

    /// Any advertisement; see the properties.
    public init(flags: UInt8?, serviceUUIDs: [BLEUUID], serviceUUIDsComplete: Bool = true, localName: String?,
                localNameComplete: Bool = true, otherStructures: [ADStructure] = []) {
        self.flags = flags
        self.serviceUUIDs = serviceUUIDs
        self.serviceUUIDsComplete = serviceUUIDsComplete
        self.localName = localName
        self.localNameComplete = localNameComplete
        self.otherStructures = otherStructures
    }

    /// Whether the advertisement lists `serviceUUID`.
    public func advertises(_ serviceUUID: BLEUUID) -> Bool { serviceUUIDs.contains(serviceUUID) }

    /// The advertising data and scan response data. The flags, the UUID list and
    /// ``otherStructures`` go in the advertising data, the name in the scan response (shortened
    /// when over ``maxLocalNameBytes``). Throws `PeerSyncError.Code.tooLarge` when the
    /// advertising data does not fit in 31 bytes (e.g. two 128-bit UUIDs), naming the sizes.
    public func encoded() throws(PeerSyncError) -> (advertisingData: [UInt8], scanResponse: [UInt8]) {
        var structures: [ADStructure] = []
        if let flags { structures.append(ADStructure(type: ADStructure.KnownType.flags, data: [flags])) }
        // An empty incomplete list still says "there are more": it is kept.
        if !serviceUUIDs.isEmpty || !serviceUUIDsComplete {
            structures.append(ADStructure(
                type: serviceUUIDsComplete ? ADStructure.KnownType.completeServiceUUIDs128 : ADStructure.KnownType.incompleteServiceUUIDs128,
                data: serviceUUIDs.flatMap(\.littleEndianBytes)))
        }
        structures += otherStructures
        let advertisingData = try ADStructure.encode(structures)
        var scanResponse: [ADStructure] = []
        if let localName, !localName.isEmpty {
            let shortened = PeerAnnouncement.truncated(localName, toBytes: Self.maxLocalNameBytes)
            let complete = localNameComplete && shortened.utf8.count == localName.utf8.count
            scanResponse.append(ADStructure(
                type: complete ? ADStructure.KnownType.completeLocalName : ADStructure.KnownType.shortenedLocalName,
                data: Array(shortened.utf8)))
        }
        return (advertisingData, try ADStructure.encode(scanResponse))
    }

    /// Reads an advertisement from its advertising data and (optional) scan response data.
    /// Throws `PeerSyncError.Code.protocolError` for malformed data (the context says which
    /// payload).
    public init(advertisingData: some Collection<UInt8>, scanResponse: some Collection<UInt8> = [UInt8]()) throws(PeerSyncError) {
        var structures: [ADStructure]
        do throws(PeerSyncError) {
            structures = try ADStructure.decode(advertisingData)
        } catch {
            throw error.with("payload", "advertising data")
        }
        do throws(PeerSyncError) {
            structures += try ADStructure.decode(scanResponse)
        } catch {
            throw error.with("payload", "scan response")
        }
        self.init(flags: nil, serviceUUIDs: [], localName: nil)
        for structure in structures {
            switch structure.type {
            case ADStructure.KnownType.flags:
                flags = structure.data.first ?? 0
            case ADStructure.KnownType.completeServiceUUIDs128, ADStructure.KnownType.incompleteServiceUUIDs128:
                guard structure.data.count % 16 == 0 else {
                    throw PeerSyncError(.protocolError,
                                        "a list of 128-bit service UUIDs is \(structure.data.count) bytes, not a multiple of 16")
                }
                var index = 0
                while index < structure.data.count {
                    serviceUUIDs.append(BLEUUID(bytes: structure.data[index..<(index + 16)].reversed()))
                    index += 16
                }
                if structure.type == ADStructure.KnownType.incompleteServiceUUIDs128 { serviceUUIDsComplete = false }
            case ADStructure.KnownType.completeLocalName, ADStructure.KnownType.shortenedLocalName:
                // The complete name wins over a shortened one, whichever comes first.
                if localName == nil || structure.type == ADStructure.KnownType.completeLocalName {
                    localName = String(decoding: structure.data, as: UTF8.self)
                    localNameComplete = structure.type == ADStructure.KnownType.completeLocalName
                }
            default:
                otherStructures.append(structure)
            }
        }
    }
}
