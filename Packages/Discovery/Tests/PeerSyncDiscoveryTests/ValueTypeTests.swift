import PeerSyncCore
import PeerSyncDiscovery
import Testing

@Suite struct PeerIdentifierTests {
    @Test func peerIDs() throws {
        #expect(try PeerID("peer-a").rawValue == "peer-a")
        #expect(try PeerID("A.b_c:9-Z").description == "A.b_c:9-Z")
        #expect(try PeerID(String(repeating: "f", count: 64)).rawValue.count == 64)
        for bad in ["", String(repeating: "f", count: 65), "has space", "é", "a/b", "a\u{0}"] {
            #expect(throws: PeerSyncError.self, "\(bad.debugDescription)") { try PeerID(bad) }
        }
        let digest = try PeerID(digest: (0..<32).map { UInt8($0 * 8) })
        #expect(digest.rawValue == "0008101820283038404850586068707880889098a0a8b0b8c0c8d0d8e0e8f0f8")
        #expect(throws: PeerSyncError.self) { try PeerID(digest: []) }
        #expect(throws: PeerSyncError.self) { try PeerID(digest: [UInt8](repeating: 1, count: 33)) }
    }

    @Test func groupIDs() throws {
        for good in ["com-example-tasks", "Team One", "_grp", "émoji-😀", String(repeating: "g", count: 63)] {
            #expect(try PeerGroupID(good).rawValue == good)
        }
        for bad in ["", String(repeating: "g", count: 64), "a.b", "a,b", "a\\b", "a\u{7}b", "tab\t", "del\u{7F}"] {
            #expect(throws: PeerSyncError.self, "\(bad.debugDescription)") { try PeerGroupID(bad) }
        }
        // 63 bytes, not characters: 16 four-byte emoji are 64 bytes.
        #expect(throws: PeerSyncError.self) { try PeerGroupID(String(repeating: "😀", count: 16)) }
    }
}

@Suite struct PeerMetadataTests {
    @Test func setGetAndRemove() throws {
        var metadata = try PeerMetadata(["role": "writer", "empty": ""])
        try metadata.set(bytes: [0, 0xFF, 0x3D], forKey: "bin")
        #expect(metadata["role"] == "writer")
        #expect(metadata["empty"] == "")
        #expect(metadata.bytes(forKey: "bin") == [0, 0xFF, 0x3D])
        #expect(metadata["missing"] == nil)
        #expect(metadata.keys == ["bin", "empty", "role"])
        #expect(metadata.encodedSize == (1 + 4 + 3) + (1 + 6) + (1 + 11))
        metadata.removeValue(forKey: "role")
        #expect(metadata.keys == ["bin", "empty"])
        #expect(PeerMetadata().isEmpty)
    }

    @Test func keysAreCheckedAndReservedKeysRefused() throws {
        var metadata = PeerMetadata()
        for bad in ["", "Upper", "has=equals", "space key", String(repeating: "k", count: 33), "é"] {
            #expect(throws: PeerSyncError.self, "\(bad.debugDescription)") { try metadata.set("v", forKey: bad) }
            #expect(!PeerMetadata.isValidKey(bad))
        }
        for reserved in PeerMetadata.reservedKeys {
            #expect(PeerMetadata.isValidKey(reserved))
            let error = #expect(throws: PeerSyncError.self) { try metadata.set("v", forKey: reserved) }
            #expect(error?.code == .invalidArgument)
        }
        try metadata.set("v", forKey: "a.b-c_9")
        #expect(metadata.keys == ["a.b-c_9"])
    }

    @Test func sizeLimitsLeaveTheValueUnchanged() throws {
        var metadata = try PeerMetadata(["k": "v"])
        let entry = #expect(throws: PeerSyncError.self) {
            try metadata.set(String(repeating: "x", count: 254), forKey: "kk")   // 2 + 1 + 254 = 257 > 255
        }
        #expect(entry?.code == .tooLarge)
        try metadata.set(String(repeating: "x", count: 252), forKey: "kk")        // exactly 255
        for i in 0..<3 { try metadata.set(String(repeating: "y", count: 250), forKey: "f\(i)") }   // 1022 bytes in all
        let before = metadata
        let total = #expect(throws: PeerSyncError.self) { try metadata.set(String(repeating: "z", count: 250), forKey: "f9") }
        #expect(total?.code == .tooLarge)
        #expect(metadata == before)
        #expect(metadata.encodedSize <= PeerMetadata.maxEncodedSize)
    }
}

@Suite struct PeerAnnouncementTests {
    @Test func defaultsAndValidation() throws {
        let group = try PeerGroupID("g")
        let plain = try PeerAnnouncement(peerID: PeerID("peer-a"), group: group, port: 4984)
        #expect(plain.name == "peer-a")
        #expect(plain.protocolVersion == 1)
        #expect(plain.addresses.isEmpty && plain.metadata.isEmpty)
        let long = try PeerAnnouncement(peerID: PeerID(String(repeating: "a", count: 64)), group: group, port: 1)
        #expect(long.name == String(repeating: "a", count: 63))
        for bad in ["", String(repeating: "n", count: 64), "line\nbreak"] {
            #expect(throws: PeerSyncError.self, "\(bad.debugDescription)") {
                try PeerAnnouncement(peerID: PeerID("p"), group: group, name: bad, port: 1)
            }
        }
        #expect(throws: PeerSyncError.self) { try PeerAnnouncement(peerID: PeerID("p"), group: group, port: 1, protocolVersion: -1) }
        #expect(try PeerAnnouncement(peerID: PeerID("p"), group: group, name: "My Peer (2) é", port: 1).name == "My Peer (2) é")
    }

    @Test func alternativeNamesCountUpAndStayShort() {
        #expect(PeerAnnouncement.alternativeName(after: "Foo") == "Foo #2")
        #expect(PeerAnnouncement.alternativeName(after: "Foo #2") == "Foo #3")
        #expect(PeerAnnouncement.alternativeName(after: "Foo #9") == "Foo #10")
        #expect(PeerAnnouncement.alternativeName(after: "Foo #1") == "Foo #2")
        #expect(PeerAnnouncement.alternativeName(after: "Foo #02") == "Foo #02 #2")
        #expect(PeerAnnouncement.alternativeName(after: "Foo #") == "Foo # #2")
        #expect(PeerAnnouncement.alternativeName(after: "A #2 b #7") == "A #2 b #8")
        let long = String(repeating: "n", count: 63)
        #expect(PeerAnnouncement.alternativeName(after: long) == String(repeating: "n", count: 60) + " #2")
        // Cut on a character boundary: 21 three-byte characters are 63 bytes; 20 fit in 60.
        let wide = String(repeating: "€", count: 21)
        #expect(PeerAnnouncement.alternativeName(after: wide) == String(repeating: "€", count: 20) + " #2")
        #expect(PeerAnnouncement.truncated("ab€", toBytes: 4) == "ab")
    }
}

@Suite struct PeerTableTests {
    func peer(_ name: String, _ value: String = "1") throws -> DiscoveredPeer {
        DiscoveredPeer(name: name, peerID: try PeerID(name), group: try PeerGroupID("g"), addresses: ["h"], port: 1,
                       metadata: try PeerMetadata(["v": value]), protocolVersion: 1, discovery: .inProcess)
    }

    @Test func upsertRemoveAndReconcile() throws {
        var table = PeerTable()
        #expect(table.upsert(try peer("a")) == .appeared(try peer("a")))
        #expect(table.upsert(try peer("a")) == nil)
        #expect(table.upsert(try peer("a", "2")) == .updated(try peer("a", "2")))
        #expect(table.remove(name: "b") == nil)
        #expect(table.upsert(try peer("b")) == .appeared(try peer("b")))
        let events = table.reconcile(with: [try peer("c"), try peer("b", "9")])
        #expect(events == [.disappeared(try peer("a", "2")), .updated(try peer("b", "9")), .appeared(try peer("c"))])
        #expect(Set(table.peers.keys) == ["b", "c"])
        #expect(table.remove(name: "c") == .disappeared(try peer("c")))
    }
}

@Suite struct StreamBuildingBlockTests {
    @Test func orderedFeedKeepsEachSendersOrderAcrossThreads() async {
        let (stream, feed) = OrderedStreamFeed<Int>.makeStream()
        let senders = 8
        let perSender = 500
        await withTaskGroup(of: Void.self) { group in
            for sender in 0..<senders {
                group.addTask {
                    for i in 0..<perSender { feed.send(sender * 1_000_000 + i) }
                }
            }
        }
        feed.finish()
        feed.send(-1)   // after the end: dropped
        var next = [Int](repeating: 0, count: senders)
        var count = 0
        for await value in stream {
            let sender = value / 1_000_000
            #expect(value % 1_000_000 == next[sender], "sender \(sender) out of order")
            next[sender] = value % 1_000_000 + 1
            count += 1
        }
        #expect(count == senders * perSender)
        #expect(feed.isFinished)
    }

    @Test func statusBroadcastStartsWithCurrentAndEndsWithStopped() async {
        let broadcast = DiscoveryStatusBroadcast()
        let early = broadcast.stream()
        broadcast.update(.running)
        broadcast.update(.running)   // no change: not repeated
        let error = PeerSyncError(.discoveryUnavailable, "gone")
        broadcast.update(.unavailable(error))
        let middle = broadcast.stream()
        broadcast.update(.recovered)
        broadcast.update(.stopped)
        broadcast.update(.running)   // after stopped: ignored
        #expect(broadcast.current == .stopped)
        var earlySeen: [DiscoveryStatus] = []
        for await status in early { earlySeen.append(status) }
        #expect(earlySeen == [.starting, .running, .unavailable(error), .recovered, .stopped])
        var middleSeen: [DiscoveryStatus] = []
        for await status in middle { middleSeen.append(status) }
        #expect(middleSeen == [.unavailable(error), .recovered, .stopped])
        var lateSeen: [DiscoveryStatus] = []
        for await status in broadcast.stream() { lateSeen.append(status) }
        #expect(lateSeen == [.stopped])
        #expect(DiscoveryStatus.recovered.isRunning && !DiscoveryStatus.unavailable(error).isRunning)
    }
}
