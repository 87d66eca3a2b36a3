import PeerSyncCore
import PeerSyncDiscovery

extension DiscoveryConformanceSuite {
    /// The status stream starts with the current status and reaches `running`.
    func statusRunning(_ context: CaseContext) async throws {
        let host = try await context.host("a")
        let statuses = DiscoveryStatusRecorder(host)
        try await statuses.wait("the status stream to report running", timeout: context.timeout) { $0.isRunning }
        let first = statuses.statuses.first
        try check(first != .stopped, "a new host's status stream started with \(String(describing: first))")
        try check(host.status.isRunning, "the status stream said running but status is \(host.status)")
    }

    /// A browser started after the publication sees it — with its peer ID, port, metadata
    /// (binary values and empty values included), protocol version and the discovery's kind —
    /// on another host and on the publishing host itself.
    func publishThenBrowse(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        var metadata = try PeerMetadata(["role": "writer", "empty": ""])
        try metadata.set(bytes: [0, 0xFF, UInt8(ascii: "="), 0x20], forKey: "bin")
        let announcement = try PeerAnnouncement(peerID: PeerID("peer-a"), group: group, name: "peer-a-\(context.tag)",
                                                port: 4984, metadata: metadata, protocolVersion: 3)
        let publication = try await context.publish(announcement, on: a)
        try check(publication.announcement.peerID == announcement.peerID,
                  "the publication's announcement has peer ID \(publication.announcement.peerID), expected \(announcement.peerID)")
        for (host, label) in [(b, "b"), (a, "a (the publishing host)")] {
            let recorder = try await context.browse(group, on: host, label: label)
            let peer = try await recorder.waitForPeer(named: publication.name, timeout: context.timeout)
            try check(peer.peerID == announcement.peerID, "\(label) saw peer ID \(peer.peerID), expected \(announcement.peerID)")
            try check(peer.group == group, "\(label) saw group \(peer.group), expected \(group)")
            try check(peer.port == 4984, "\(label) saw port \(peer.port), expected 4984")
            try check(peer.metadata == metadata, "\(label) saw metadata \(peer.metadata), expected \(metadata)")
            try check(peer.protocolVersion == 3, "\(label) saw protocol version \(peer.protocolVersion), expected 3")
            try check(peer.discovery == host.kind, "\(label) saw discovery \(peer.discovery), expected \(host.kind)")
            guard case .appeared = recorder.events(about: publication.name).first else {
                throw CheckFailure("\(label): the first event about '\(publication.name)' was not appeared")
            }
        }
    }

    /// A browser started before the publication sees it appear.
    func browseThenPublish(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        let recorder = try await context.browse(group, on: b, label: "b")
        let publication = try await context.publish(try context.announcement("peer-late", in: group, port: 5001), on: a)
        let peer = try await recorder.waitForPeer(named: publication.name, timeout: context.timeout)
        try check(peer.peerID.rawValue == "peer-late" && peer.port == 5001, "b saw \(peer), expected peer-late on port 5001")
    }

    /// Only peers of the browsed group are reported, although a peer of another group is
    /// visible to that group's browser at the same time.
    func otherGroupsNotSeen(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let mine = try context.group("mine")
        let other = try context.group("other")
        let recorder = try await context.browse(mine, on: b, label: "b in \(mine)")
        let otherPublication = try await context.publish(try context.announcement("peer-other", in: other), on: a)
        let minePublication = try await context.publish(try context.announcement("peer-mine", in: mine), on: a)
        let otherRecorder = try await context.browse(other, on: b, label: "b in \(other)")
        _ = try await otherRecorder.waitForPeer(named: otherPublication.name, timeout: context.timeout)
        _ = try await recorder.waitForPeer(named: minePublication.name, timeout: context.timeout)
        try await context.quietPeriod()
        let strays = recorder.events.filter { $0.peer.peerID.rawValue == "peer-other" || $0.peer.group != mine }
        try check(strays.isEmpty, "the browser of \(mine) reported peers of another group: \(strays)")
    }

    /// Metadata updates reach browsers as `updated` (the last one always), and a browser
    /// started afterwards sees the current metadata.
    func metadataUpdate(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        let publication = try await context.publish(try context.announcement("peer-m", in: group, metadata: ["v": "1"]), on: a)
        let recorder = try await context.browse(group, on: b, label: "b")
        _ = try await recorder.waitForPeer(named: publication.name, timeout: context.timeout,
                                           matching: { $0.metadata["v"] == "1" }, "'\(publication.name)' with v=1")
        try await context.update(publication, ["v": "2", "extra": "x"])
        try await context.update(publication, ["v": "3"])
        let final = try PeerMetadata(["v": "3"])
        _ = try await recorder.waitForPeer(named: publication.name, timeout: context.timeout,
                                           matching: { $0.metadata == final }, "'\(publication.name)' with only v=3")
        try check(publication.announcement.metadata == final,
                  "the publication's announcement has metadata \(publication.announcement.metadata), expected \(final)")
        let events = recorder.events(about: publication.name)
        let unexpected = events.dropFirst().filter { if case .updated = $0 { false } else { true } }
        try check(unexpected.isEmpty, "after appearing, '\(publication.name)' got other events than updates: \(unexpected)")
        let later = try await context.browse(group, on: try await context.host("c"), label: "c (started after the updates)")
        _ = try await later.waitForPeer(named: publication.name, timeout: context.timeout,
                                        matching: { $0.metadata == final }, "'\(publication.name)' with only v=3")
    }

    /// Unpublishing makes the peer disappear (and only that peer); an unpublished announcement
    /// cannot be updated; unpublishing twice is fine; the same announcement can be published
    /// again.
    func unpublishDisappears(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        let first = try context.announcement("peer-u1", in: group, metadata: ["k": "v"])
        let gone = try await context.publish(first, on: a)
        let stays = try await context.publish(try context.announcement("peer-u2", in: group), on: a)
        let recorder = try await context.browse(group, on: b, label: "b")
        _ = try await recorder.waitForPeer(named: gone.name, timeout: context.timeout)
        _ = try await recorder.waitForPeer(named: stays.name, timeout: context.timeout)
        let goneName = gone.name
        try await context.unpublish(gone)
        try await recorder.waitForAbsence(of: goneName, timeout: context.timeout)
        guard case .disappeared(let last) = recorder.events(about: goneName).last else {
            throw CheckFailure("the last event about '\(goneName)' is not disappeared")
        }
        try check(last.peerID == first.peerID && last.metadata == first.metadata,
                  "disappeared carried \(last), expected the peer's last state (peer-u1, k=v)")
        try await context.quietPeriod()
        try check(recorder.visible[stays.name] != nil, "'\(stays.name)' disappeared too, but only '\(goneName)' was unpublished")
        try await expectError(.closed, "updating the metadata of an unpublished announcement", timeout: context.timeout) {
            try await gone.updateMetadata(PeerMetadata())
        }
        try await context.unpublish(gone)
        let again = try await context.publish(first, on: a)
        _ = try await recorder.waitForPeer(named: again.name, timeout: context.timeout, matching: { $0.peerID == first.peerID },
                                           "'\(again.name)' to appear again after being published again")
    }

    /// Two hosts publish the same peer ID under the same name in one group (each with its own
    /// listener port): both are published, under different names, and each is reported and
    /// withdrawn on its own.
    func samePeerTwice(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let c = try await context.host("c")
        let group = try context.group()
        let fromA = try await context.publish(try context.announcement("twin", in: group, name: "twin-\(context.tag)", port: 4984), on: a)
        let announcement = try context.announcement("twin", in: group, name: "twin-\(context.tag)", port: 4985)
        let fromB = try await context.publish(announcement, on: b)
        try check(fromA.name.lowercased() != fromB.name.lowercased(),
                  "two announcements are published under one name '\(fromA.name)' / '\(fromB.name)'; a taken name must be replaced")
        let recorder = try await context.browse(group, on: c, label: "c")
        let seenA = try await recorder.waitForPeer(named: fromA.name, timeout: context.timeout)
        let seenB = try await recorder.waitForPeer(named: fromB.name, timeout: context.timeout)
        try check(seenA.peerID == announcement.peerID && seenB.peerID == announcement.peerID,
                  "the two announcements were reported with peer IDs \(seenA.peerID) and \(seenB.peerID), expected twin for both")
        let nameA = fromA.name
        try await context.unpublish(fromA)
        try await recorder.waitForAbsence(of: nameA, timeout: context.timeout)
        try await context.quietPeriod()
        try check(recorder.visible[fromB.name] != nil,
                  "unpublishing '\(nameA)' also removed '\(fromB.name)', the other announcement with the same peer ID")
    }

    /// Many peers on several hosts, published at once: each appears once with its metadata,
    /// for a browser started before and one started after; all disappear when unpublished.
    func manyPeers(_ context: CaseContext) async throws {
        let hosts = [try await context.host("a"), try await context.host("b"), try await context.host("c")]
        let group = try context.group()
        let early = try await context.browse(group, on: hosts[2], label: "c (started before publishing)")
        let count = configuration.manyPeers
        let publications = try await withThrowingTaskGroup(of: (Int, any PeerPublication).self) { tasks in
            for i in 0..<count {
                let announcement = try context.announcement("peer-\(i)", in: group, port: UInt16(6000 + i), metadata: ["i": "\(i)"])
                tasks.addTask { (i, try await context.publish(announcement, on: hosts[i % hosts.count])) }
            }
            var publications: [Int: any PeerPublication] = [:]
            for try await (i, publication) in tasks { publications[i] = publication }
            return (0..<count).compactMap { publications[$0] }
        }
        let late = try await context.browse(group, on: hosts[1], label: "b (started after publishing)")
        for recorder in [early, late] {
            try await recorder.wait("all \(count) peers with their metadata", timeout: context.timeout) { visible in
                publications.enumerated().allSatisfy { i, publication in
                    guard let peer = visible[publication.name] else { return false }
                    return peer.peerID.rawValue == "peer-\(i)" && peer.metadata["i"] == "\(i)" && peer.port == UInt16(6000 + i)
                }
            }
        }
        for publication in publications {
            let appearances = early.events(about: publication.name).filter { if case .appeared = $0 { true } else { false } }.count
            try check(appearances == 1, "'\(publication.name)' appeared \(appearances) times for one publication")
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for publication in publications { tasks.addTask { try await context.unpublish(publication) } }
            try await tasks.waitForAll()
        }
        let names = Set(publications.map(\.name))
        for recorder in [early, late] {
            try await recorder.wait("all \(count) peers to disappear", timeout: context.timeout) { visible in
                names.isDisjoint(with: visible.keys)
            }
        }
    }
}
