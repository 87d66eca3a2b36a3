import PeerSyncCore
import PeerSyncDiscovery

extension DiscoveryConformanceSuite {
    /// `stop()` ends a browse (and is idempotent), so does cancelling the iterating task; the
    /// other browses of the host go on, and a new browse works.
    func stopEndsBrowse(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        let publication = try await context.publish(try context.announcement("peer-s", in: group), on: a)
        let stopped = try await context.browse(group, on: b, label: "b, stopped")
        let cancelled = try await context.browse(group, on: b, label: "b, cancelled")
        let going = try await context.browse(group, on: b, label: "b, still browsing")
        for recorder in [stopped, cancelled, going] {
            _ = try await recorder.waitForPeer(named: publication.name, timeout: context.timeout)
        }
        try await within(context.timeout, "PeerBrowser.stop()") { await stopped.browser.stop() }
        try await stopped.waitForEnd("the browse to end after stop()", timeout: context.timeout)
        try await within(context.timeout, "a second PeerBrowser.stop()") { await stopped.browser.stop() }
        cancelled.cancelConsumer()
        try await cancelled.waitForEnd("the iteration to end after its task was cancelled", timeout: context.timeout)
        try await context.update(publication, ["after": "stop"])
        _ = try await going.waitForPeer(named: publication.name, timeout: context.timeout,
                                        matching: { $0.metadata["after"] == "stop" },
                                        "the update, on the browse that was not stopped")
        let fresh = try await context.browse(group, on: b, label: "b, new after the stops")
        _ = try await fresh.waitForPeer(named: publication.name, timeout: context.timeout)
    }

    /// Shutting a host down withdraws its publications (other hosts see them disappear), ends
    /// its browses and status streams (`stopped` last), and makes later calls throw `closed`;
    /// a second shutdown is fine.
    func shutdownWithdraws(_ context: CaseContext) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        let first = try await context.publish(try context.announcement("peer-d1", in: group), on: a)
        let second = try await context.publish(try context.announcement("peer-d2", in: group), on: a)
        let own = try await context.browse(group, on: a, label: "a (shutting down)")
        let other = try await context.browse(group, on: b, label: "b")
        for recorder in [own, other] {
            _ = try await recorder.waitForPeer(named: first.name, timeout: context.timeout)
            _ = try await recorder.waitForPeer(named: second.name, timeout: context.timeout)
        }
        let statuses = DiscoveryStatusRecorder(a)
        try await statuses.wait("a's status stream to say running", timeout: context.timeout) { $0.isRunning }
        let names = [first.name, second.name]
        try await context.shutdown(a)
        for name in names { try await other.waitForAbsence(of: name, timeout: context.timeout, "'\(name)' to disappear after its host shut down") }
        try await own.waitForEnd("the shut-down host's own browse to end", timeout: context.timeout)
        try check(a.status == .stopped, "after shutdown() the status is \(a.status), expected stopped")
        try await statuses.wait("the status stream to say stopped", timeout: context.timeout) { $0 == .stopped }
        let deadline = ContinuousClock.now + context.timeout
        while !statuses.ended {
            guard ContinuousClock.now < deadline else { throw CheckFailure("the status stream did not end after stopped") }
            try await Task.sleep(for: .milliseconds(10))
        }
        try check(statuses.statuses.last == .stopped, "the status stream's last status is \(String(describing: statuses.statuses.last)), expected stopped")
        let announcement = try context.announcement("peer-d3", in: group)
        try await expectError(.closed, "publishing after shutdown()", timeout: context.timeout) { _ = try await a.publish(announcement) }
        try await expectError(.closed, "browsing after shutdown()", timeout: context.timeout) { _ = try await a.browse(group: group) }
        try await expectError(.closed, "updating metadata after shutdown()", timeout: context.timeout) {
            try await first.updateMetadata(PeerMetadata())
        }
        try await context.shutdown(a)
    }

    /// The service underneath goes away and comes back: statuses say `unavailable` (with a
    /// discovery error) then `recovered`; what changed meanwhile — an unpublished peer, a
    /// metadata update, a new publication, a browse started during the outage — is reported
    /// afterwards, and a peer that stayed published never disappears.
    func survivesOutage(_ context: CaseContext, _ outage: Outage) async throws {
        let a = try await context.host("a")
        let b = try await context.host("b")
        let group = try context.group()
        let stays = try await context.publish(try context.announcement("peer-o1", in: group, metadata: ["v": "1"]), on: a)
        let goes = try await context.publish(try context.announcement("peer-o2", in: group), on: a)
        let recorder = try await context.browse(group, on: b, label: "b")
        _ = try await recorder.waitForPeer(named: stays.name, timeout: context.timeout)
        _ = try await recorder.waitForPeer(named: goes.name, timeout: context.timeout)
        let statusA = DiscoveryStatusRecorder(a)
        let statusB = DiscoveryStatusRecorder(b)
        try await statusA.wait("a's status stream to say running", timeout: context.timeout) { $0.isRunning }
        try await statusB.wait("b's status stream to say running", timeout: context.timeout) { $0.isRunning }

        try await within(context.timeout, "beginning the outage") { try await outage.begin() }
        for (statuses, label) in [(statusA, "a"), (statusB, "b")] {
            let status = try await statuses.wait("\(label)'s status stream to say unavailable", timeout: context.timeout) {
                if case .unavailable = $0 { true } else { false }
            }
            if case .unavailable(let error) = status {
                try check(error.code == .discoveryUnavailable || error.code == .discoveryFailed,
                          "\(label) is unavailable with error \(error); expected code discoveryUnavailable or discoveryFailed")
            }
        }
        let goneName = goes.name
        try await context.unpublish(goes)
        try await context.update(stays, ["v": "2"])
        let added = try await context.publish(try context.announcement("peer-o3", in: group), on: a)
        let duringOutage = try await context.browse(group, on: b, label: "b (started during the outage)")
        try await within(context.timeout, "ending the outage") { try await outage.end() }

        for (statuses, label) in [(statusA, "a"), (statusB, "b")] {
            try await statuses.wait("\(label)'s status stream to say recovered", timeout: context.timeout) { $0 == .recovered }
            let list = statuses.statuses
            let unavailable = list.firstIndex { if case .unavailable = $0 { true } else { false } }
            let recovered = list.lastIndex(of: .recovered)
            try check(unavailable != nil && recovered != nil && unavailable! < recovered!,
                      "\(label)'s status stream said \(list); expected unavailable, then recovered")
        }
        try await recorder.waitForAbsence(of: goneName, timeout: context.timeout,
                                          "'\(goneName)', unpublished during the outage, to disappear")
        _ = try await recorder.waitForPeer(named: stays.name, timeout: context.timeout,
                                           matching: { $0.metadata["v"] == "2" }, "the update made during the outage")
        _ = try await recorder.waitForPeer(named: added.name, timeout: context.timeout, matching: { _ in true },
                                           "'\(added.name)', published during the outage")
        _ = try await duringOutage.waitForPeer(named: stays.name, timeout: context.timeout,
                                               matching: { $0.metadata["v"] == "2" }, "'\(stays.name)' with v=2")
        _ = try await duringOutage.waitForPeer(named: added.name, timeout: context.timeout)
        try await context.quietPeriod()
        try check(duringOutage.visible[goneName] == nil, "a browse started during the outage reported '\(goneName)', unpublished before")
        let flaps = recorder.events(about: stays.name).filter { if case .disappeared = $0 { true } else { false } }
        try check(flaps.isEmpty, "'\(stays.name)' stayed published through the outage but was reported disappeared")
    }
}
