import Foundation
import PeerSyncCore
import PeerSyncTestSupport
import Testing

/// `peersync bench mesh --json` as a child process: its work counters, and that a run leaves
/// nothing behind for the next one.
@Suite(.timeLimit(.minutes(5))) struct BenchMeshProcessTests {
    /// Each run deletes its in-memory databases (closing them kept every run's stores alive
    /// for the process's lifetime, and a second run peaked that much higher); the counters
    /// show every revision each peer needed stored.
    @Test func runsLeaveNoStoresBehindAndCountTheirWork() async throws {
        let peers = 3, docs = 5
        let run = try await CLIProcessTests.peersync(["bench", "mesh", "--peers", String(peers), "--docs-per-peer", String(docs),
                                                      "--repeat", "2", "--json", "--timeout", "240"])
        #expect(run.status == 0, "\(run.standardError)")
        let results = try CLIProcessTests.lines(run.standardOutput)
            .map { try JSONValue(parsing: Array($0.utf8)) }
            .filter { $0["benchmark"]?.stringValue == "mesh" }
        #expect(results.count == 2, "\(run.standardOutput)")
        for result in results {
            #expect(result["stores_left"]?.intValue == 0, "\(result)")
            let work = try #require(result["work"])
            // Every peer stores every other peer's documents at least once.
            #expect((work["revs_inserted"]?.intValue ?? 0) >= Int64(peers * (peers - 1) * docs), "\(work)")
            #expect((work["revs_sent"]?.intValue ?? 0) >= (work["revs_inserted"]?.intValue ?? 0), "\(work)")
        }
    }
}
