import PeerSyncCore
import PeerSyncDiscovery

/// The discovery conformance suite: every `Discovery` (DNS-SD over Avahi, Bluetooth LE, the
/// in-process registry, a user's own) runs it to show it keeps the contract written on
/// `Discovery`.
///
/// It uses no test framework, so it runs under Swift Testing, XCTest or a plain executable:
///
/// ```swift
/// let registry = try InProcessDiscoveryRegistry()
/// let suite = DiscoveryConformanceSuite(
///     makeHost: { name in InProcessDiscovery(registry: registry, hostName: name) },
///     outage: .init(begin: { registry.beginOutage() }, end: { registry.endOutage() }))
/// @Test(arguments: DiscoveryConformanceSuite.caseNames)
/// func conformance(_ name: String) async throws { try await suite.run(name) }
/// ```
///
/// A case makes its "hosts" with `makeHost` — each a separate `Discovery` instance, as on
/// separate machines that see each other — uses a peer group of its own (a random suffix), and
/// shuts every host down at its end. Every wait has a timeout (``Configuration/timeout``), so a
/// broken discovery fails with a `ConformanceFailure` naming what did not happen; it never
/// hangs the suite. Cases are independent; they may run in parallel unless the outage case
/// runs (it interrupts the service under every host).
public struct DiscoveryConformanceSuite: Sendable {
    /// Waits and sizes.
    public struct Configuration: Sendable {
        /// The longest any single wait may take before the case fails. Default 30 s.
        public var timeout: Duration = .seconds(30)
        /// How long a case keeps watching for events that must not come (a peer of another
        /// group, a second disappearance) after the events that must. Default 1 s: the check
        /// can only miss a late breach, never fail a correct discovery.
        public var quietPeriod: Duration = .seconds(1)
        /// Peers the `manyPeers` case publishes (spread over three hosts). Default 12.
        public var manyPeers: Int = 12

        /// The defaults listed with each property.
        public init() {}
    }

    /// How to take the service under the discovery away and bring it back (stop and restart
    /// `avahi-daemon`; `InProcessDiscoveryRegistry.beginOutage(reason:)`). Needed by the
    /// cases in ``outageCaseNames``.
    public struct Outage: Sendable {
        /// Takes the service away (e.g. stops the daemon); returns once it is gone.
        public var begin: @Sendable () async throws -> Void
        /// Brings the service back; returns once it has been restarted.
        public var end: @Sendable () async throws -> Void

        /// An outage made by `begin` and undone by `end`.
        public init(begin: @escaping @Sendable () async throws -> Void, end: @escaping @Sendable () async throws -> Void) {
            self.begin = begin
            self.end = end
        }
    }

    /// The cases that need only hosts.
    public static let basicCaseNames = [
        "statusRunning", "publishThenBrowse", "browseThenPublish", "otherGroupsNotSeen", "metadataUpdate",
        "unpublishDisappears", "samePeerTwice", "stopEndsBrowse", "manyPeers", "shutdownWithdraws",
    ]
    /// The cases that also need an ``Outage``.
    public static let outageCaseNames = ["survivesOutage"]
    /// Every case.
    public static let caseNames = basicCaseNames + outageCaseNames

    /// The waits and sizes the cases use.
    public let configuration: Configuration
    let makeHost: @Sendable (String) async throws -> any Discovery
    let outage: Outage?

    /// - Parameters:
    ///   - configuration: the waits and sizes of the cases; default ``Configuration/init()`` (30 s timeout, 1 s quiet period, 12 peers).
    ///   - makeHost: a new `Discovery` instance acting as the host named by the argument
    ///     (`"a"`, `"b"`, …); instances of one suite must see each other.
    ///   - outage: how to interrupt and restore the service, for ``outageCaseNames``.
    public init(configuration: Configuration = Configuration(),
                makeHost: @escaping @Sendable (String) async throws -> any Discovery,
                outage: Outage? = nil) {
        self.configuration = configuration
        self.makeHost = makeHost
        self.outage = outage
    }

    /// The cases this suite can run: every case with an ``Outage``, else ``basicCaseNames``.
    public var availableCaseNames: [String] {
        outage == nil ? Self.basicCaseNames : Self.caseNames
    }

    /// Runs one case. Throws a `ConformanceFailure` if the discovery breaks the contract (or
    /// an unknown or unavailable case is named); returns normally if it passes.
    public func run(_ name: String) async throws {
        let context = CaseContext(caseName: name, configuration: configuration, makeHost: makeHost)
        do {
            try await runCase(name, context)
            try context.checkRules()
        } catch let failure as ConformanceFailure {
            await context.cleanup()
            throw failure
        } catch let failure as CheckFailure {
            await context.cleanup()
            throw ConformanceFailure(suite: "discovery", caseName: name, message: failure.message)
        } catch {
            await context.cleanup()
            throw ConformanceFailure(suite: "discovery", caseName: name, message: "unexpected error: \(describe(error))")
        }
        await context.cleanup()
    }

    /// The outcome of one case in ``runAll()``.
    public typealias CaseResult = ConformanceCaseResult

    /// Runs every available case one after the other, for callers without a test framework.
    public func runAll() async -> [CaseResult] {
        await runConformanceCases(availableCaseNames, suite: "discovery") { try await run($0) }
    }

    private func runCase(_ name: String, _ context: CaseContext) async throws {
        switch name {
        case "statusRunning": try await statusRunning(context)
        case "publishThenBrowse": try await publishThenBrowse(context)
        case "browseThenPublish": try await browseThenPublish(context)
        case "otherGroupsNotSeen": try await otherGroupsNotSeen(context)
        case "metadataUpdate": try await metadataUpdate(context)
        case "unpublishDisappears": try await unpublishDisappears(context)
        case "samePeerTwice": try await samePeerTwice(context)
        case "stopEndsBrowse": try await stopEndsBrowse(context)
        case "manyPeers": try await manyPeers(context)
        case "shutdownWithdraws": try await shutdownWithdraws(context)
        case "survivesOutage":
            guard let outage else {
                throw ConformanceFailure(suite: "discovery", caseName: name, message: "needs an outage: create the suite with init(configuration:makeHost:outage:)")
            }
            try await survivesOutage(context, outage)
        default:
            throw ConformanceFailure(suite: "discovery", caseName: name, message: "unknown case; see DiscoveryConformanceSuite.caseNames")
        }
    }
}
