import PeerSyncTransport

/// The links a ``MeshLinkTransport`` made or accepted since it started, held weakly: the mesh
/// owns them, and a link it dropped must not be kept alive here (dropping the last reference
/// is how a ``MessageConnection`` breaks its link). What a transport's `stop()` closes.
/// A value type: keep it under the transport's lock.
package struct MeshLinkRegistry: Sendable {
    private final class WeakLink: Sendable {
        weak let connection: (any MessageConnection)?
        init(_ connection: any MessageConnection) { self.connection = connection }
    }

    private var links: [ObjectIdentifier: WeakLink] = [:]

    package init() {}

    /// Adds `connection`, and forgets links that were released or closed meanwhile.
    package mutating func add(_ connection: any MessageConnection) {
        links = links.filter { $0.value.connection.map { !$0.isClosed } ?? false }
        links[ObjectIdentifier(connection)] = WeakLink(connection)
    }

    /// The links still open.
    package func open() -> [any MessageConnection] {
        links.values.compactMap { $0.connection }.filter { !$0.isClosed }
    }

    /// Closes `links` (what ``open()`` returned when the transport stopped) side by side.
    package static func close(_ links: [any MessageConnection]) async {
        await withTaskGroup(of: Void.self) { group in
            for link in links {
                group.addTask { await link.close(code: .goingAway, reason: "the mesh stopped") }
            }
        }
    }
}
