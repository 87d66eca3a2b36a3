// swift-tools-version:6.1
//
// PeerSync — an embedded document database with peer-to-peer sync.
//
// One manifest declares every target; each package folder under Packages/ holds one concern:
//
// | Package folder     | Module / product          | Depends on                 | C library          |
// |--------------------|---------------------------|----------------------------|--------------------|
// | Packages/Core      | PeerSyncCore              | —                          | —                  |
// |                    | PeerSyncConformance       | — (suites' shared support) | —                  |
// | Packages/Storage   | PeerSyncStorage           | Core                       | —                  |
// |                    | PeerSyncStorageTesting    | Storage, Conformance (suite)| —                 |
// | Packages/SQLite    | PeerSyncSQLite            | Storage                    | CSQLite (sqlite3)  |
// | Packages/LMDB      | PeerSyncLMDB              | Storage                    | CLMDB (lmdb)       |
// | Packages/Database  | PeerSyncDatabase          | Storage                    | —                  |
// | Packages/Query    | PeerSyncQuery             | Database (scan; pure AST/parser/evaluator) | — |
// | Packages/Transport | PeerSyncTransport         | Core                       | —                  |
// |                    | PeerSyncTransportTesting  | Transport (conformance)    | —                  |
// | Packages/Loopback  | PeerSyncLoopback          | Transport                  | —                  |
// | Packages/Auth      | PeerSyncAuth              | Transport                  | COpenSSL (ssl)     |
// | Packages/Posix     | PeerSyncPosix             | Transport (error codes)    | CEpoll (epoll)     |
// | Packages/WebSocket | PeerSyncWebSocketCodec    | Core (pure: no I/O)        | —                  |
// |                    | PeerSyncWebSocket         | Codec, Posix, Auth         | —                  |
// |                    | PeerSyncWebSocketReplication | WebSocket, Replicator   | —                  |
// | Packages/BLIP      | PeerSyncBLIP              | Core (Transport later)     | CZlib (zlib)       |
// | Packages/Discovery | PeerSyncDiscovery         | Core                       | —                  |
// |                    | PeerSyncDiscoveryTesting  | Discovery (conformance)    | —                  |
// | Packages/DNSSD     | PeerSyncDNSSD             | Discovery                  | CAvahi (avahi-client) |
// | Packages/Replicator| PeerSyncReplicator        | Database, BLIP, Transport  | —                  |
// | Packages/Mesh      | PeerSyncMesh              | Replicator, Discovery, Auth| —                  |
// |                    | PeerSyncMeshWiFi          | Mesh, DNSSD, WebSocket     | —                  |
// |                    | PeerSyncMeshBluetooth     | MeshWiFi, BLE              | —                  |
// | Packages/BLE       | PeerSyncBLE               | WebSocket, Discovery       | CBlueZ (bluetooth) |
// | Packages/Listener  | PeerSyncListener          | Replicator, WebSocket, Auth | —                 |
// | Packages/PeerSync  | PeerSync (umbrella)       | all a sync app needs (+ traits) | —              |
// | Tools/peersync     | peersync (executable)     | PeerSync                   | —                  |
// | Tests/             | PeerSyncTestSupport       | Core (test code, no product) | —                |
// | Packages/WebSocket/Tests | PeerSyncWebSocketTestSupport | WebSocket (test code, no product) | —     |
// | Packages/Database/Tests | PeerSyncDatabaseTestSupport | Storage (test code, no product) | —       |
// | Packages/Replicator/Tests | PeerSyncReplicatorTestSupport | Replicator, Loopback (test code, no product) | — |
// | Tools/baselines    | PeerSyncSQLiteBaseline    | Core (no product)          | CSQLite (sqlite3)  |
// |                    | PeerSyncLMDBBaseline      | Storage (no product)       | CLMDB (lmdb)       |
//
// PeerSyncWebSocketReplication is the active side's `ws(s)://` connector: its TLS and HTTP
// settings on `ReplicatorConfiguration` (`pinnedServerCertificate`, …) and `Replicator(config:)`.
// PeerSyncReplicator itself links no TLS: a replicator over a custom transport needs no OpenSSL.
// The umbrella `PeerSync` re-exports all of it (database, replicator with its WebSocket
// connector, listener, auth), so `import PeerSync` is the one import an app needs; an app that
// wants less depends on the individual products instead.
//
// The baselines are raw C yardsticks for `peersync bench` and the backends' tests: benchmark
// code, in no library product, and by design the one place besides each wrapper module that
// calls those C libraries.
//
// Traits choose optional backends: `SQLite` (default), `LMDB`, `DNSSD`, `Mesh` and `BLE` (opt-in). A
// consumer that leaves LMDB off never links liblmdb; one that leaves DNSSD off never needs
// libavahi-client (the umbrella re-exports PeerSyncDNSSD only with the trait). `Mesh` turns
// DNSSD on and makes the umbrella re-export the multipeer replicator (PeerSyncMesh) and its
// Wi-Fi transport (PeerSyncMeshWiFi); `BLE` turns Mesh on and adds the Bluetooth LE transport and
// discovery (PeerSyncBLE). Tools/test and Tools/demo build with every trait on.
//
// Do NOT aggregate nested packages with `.package(path:)`: SwiftPM then refuses to serve
// this repository to a consumer that depends on it by URL.

import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
]

func library(_ name: String, folder: String, dependencies: [Target.Dependency] = [],
             sources: String? = nil) -> Target {
    .target(
        name: name,
        dependencies: dependencies,
        path: "Packages/\(folder)/Sources/\(sources ?? name)",
        swiftSettings: swiftSettings
    )
}

func tests(_ name: String, folder: String, dependencies: [Target.Dependency],
           resources: [Resource]? = nil) -> Target {
    .testTarget(
        name: name,
        dependencies: dependencies,
        path: "Packages/\(folder)/Tests/\(name)",
        resources: resources,
        swiftSettings: swiftSettings
    )
}

let package = Package(
    name: "PeerSync",
    products: [
        .library(name: "PeerSyncCore", targets: ["PeerSyncCore"]),
        .library(name: "PeerSyncStorage", targets: ["PeerSyncStorage"]),
        .library(name: "PeerSyncStorageTesting", targets: ["PeerSyncStorageTesting"]),
        .library(name: "PeerSyncSQLite", targets: ["PeerSyncSQLite"]),
        .library(name: "PeerSyncLMDB", targets: ["PeerSyncLMDB"]),
        .library(name: "PeerSyncDatabase", targets: ["PeerSyncDatabase"]),
        .library(name: "PeerSyncQuery", targets: ["PeerSyncQuery"]),
        .library(name: "PeerSyncTransport", targets: ["PeerSyncTransport"]),
        .library(name: "PeerSyncTransportTesting", targets: ["PeerSyncTransportTesting"]),
        .library(name: "PeerSyncLoopback", targets: ["PeerSyncLoopback"]),
        .library(name: "PeerSyncAuth", targets: ["PeerSyncAuth"]),
        .library(name: "PeerSyncPosix", targets: ["PeerSyncPosix"]),
        .library(name: "PeerSyncWebSocketCodec", targets: ["PeerSyncWebSocketCodec"]),
        .library(name: "PeerSyncWebSocket", targets: ["PeerSyncWebSocket"]),
        .library(name: "PeerSyncWebSocketReplication", targets: ["PeerSyncWebSocketReplication"]),
        .library(name: "PeerSyncBLIP", targets: ["PeerSyncBLIP"]),
        .library(name: "PeerSyncDiscovery", targets: ["PeerSyncDiscovery"]),
        .library(name: "PeerSyncDiscoveryTesting", targets: ["PeerSyncDiscoveryTesting"]),
        .library(name: "PeerSyncDNSSD", targets: ["PeerSyncDNSSD"]),
        .library(name: "PeerSyncReplicator", targets: ["PeerSyncReplicator"]),
        .library(name: "PeerSyncListener", targets: ["PeerSyncListener"]),
        .library(name: "PeerSyncMesh", targets: ["PeerSyncMesh"]),
        .library(name: "PeerSyncMeshWiFi", targets: ["PeerSyncMeshWiFi"]),
        .library(name: "PeerSyncBLE", targets: ["PeerSyncBLE"]),
        .library(name: "PeerSyncMeshBluetooth", targets: ["PeerSyncMeshBluetooth"]),
        .library(name: "PeerSync", targets: ["PeerSync"]),
        .executable(name: "peersync", targets: ["peersync"]),
        .executable(name: "example-tasklist", targets: ["example-tasklist"]),
        .executable(name: "example-mesh", targets: ["example-mesh"]),
        .executable(name: "example-syncpair", targets: ["example-syncpair"]),
        .executable(name: "example-customtransport", targets: ["example-customtransport"]),
        .executable(name: "example-backendchoice", targets: ["example-backendchoice"]),
        .executable(name: "example-appandextension", targets: ["example-appandextension"]),
    ],
    traits: [
        .default(enabledTraits: ["SQLite"]),
        .trait(name: "SQLite", description: "Storage backend on SQLite (libsqlite3)."),
        .trait(name: "LMDB", description: "Storage backend on LMDB (liblmdb)."),
        .trait(name: "DNSSD", description: "Peer discovery over DNS-SD through Avahi (libavahi-client), re-exported by the umbrella."),
        .trait(name: "Mesh", description: "The multipeer replicator and its Wi-Fi transport (DNS-SD + WebSocket over mutual TLS), re-exported by the umbrella; turns DNSSD on.",
               enabledTraits: ["DNSSD"]),
        .trait(name: "BLE", description: "Bluetooth LE transport and discovery through BlueZ (libbluetooth) for the mesh, re-exported by the umbrella; turns Mesh on.",
               enabledTraits: ["Mesh"]),
    ],
    targets: [
        // MARK: Core
        library("PeerSyncCore", folder: "Core"),
        // What the conformance suites share (failure type, checks, running every case); not a
        // product: the testing products re-export it.
        library("PeerSyncConformance", folder: "Core"),
        tests("PeerSyncCoreTests", folder: "Core", dependencies: ["PeerSyncCore"]),

        // MARK: Storage
        library("PeerSyncStorage", folder: "Storage", dependencies: ["PeerSyncCore"]),
        library("PeerSyncStorageTesting", folder: "Storage", dependencies: ["PeerSyncStorage", "PeerSyncConformance", "PeerSyncCore"]),
        tests("PeerSyncStorageTests", folder: "Storage",
              dependencies: ["PeerSyncStorage", "PeerSyncStorageTesting", "PeerSyncCore"]),

        // MARK: SQLite
        .systemLibrary(name: "CSQLite", path: "Packages/SQLite/Sources/CSQLite",
                       pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        library("PeerSyncSQLite", folder: "SQLite", dependencies: ["PeerSyncStorage", "PeerSyncCore", "CSQLite"]),
        tests("PeerSyncSQLiteTests", folder: "SQLite",
              dependencies: ["PeerSyncSQLite", "PeerSyncStorage", "PeerSyncCore", "PeerSyncSQLiteBaseline"]),

        // MARK: LMDB
        .systemLibrary(name: "CLMDB", path: "Packages/LMDB/Sources/CLMDB",
                       pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        library("PeerSyncLMDB", folder: "LMDB", dependencies: ["PeerSyncStorage", "PeerSyncCore", "CLMDB"]),
        // A second process for the multi-process tests, and a benchmark driver (`bench`).
        .executableTarget(name: "PeerSyncLMDBTestHelper",
                          dependencies: ["PeerSyncLMDB", "PeerSyncStorage", "PeerSyncCore", "PeerSyncLMDBBaseline"],
                          path: "Packages/LMDB/Tests/PeerSyncLMDBTestHelper", swiftSettings: swiftSettings),
        tests("PeerSyncLMDBTests", folder: "LMDB",
              dependencies: ["PeerSyncLMDB", "PeerSyncStorage", "PeerSyncCore", "PeerSyncLMDBTestHelper",
                             "PeerSyncLMDBBaseline", "PeerSyncTestSupport"]),

        // MARK: Database
        library("PeerSyncDatabase", folder: "Database", dependencies: ["PeerSyncStorage", "PeerSyncCore"]),
        // Child process of the multi-process database tests; a dependency of the tests so that
        // it is always built next to them.
        .executableTarget(
            name: "database-test-child",
            dependencies: ["PeerSync", "PeerSyncDatabase", "PeerSyncStorage", "PeerSyncCore"],
            path: "Packages/Database/Tests/DatabaseTestChild",
            swiftSettings: swiftSettings
        ),
        // The storage backends a test body runs over (`Backend`), for the database's tests and
        // those of the packages built on it. Test code only, no product.
        .target(name: "PeerSyncDatabaseTestSupport",
                dependencies: ["PeerSyncStorage",
                               .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"])),
                               .target(name: "PeerSyncLMDB", condition: .when(traits: ["LMDB"]))],
                path: "Packages/Database/Tests/PeerSyncDatabaseTestSupport", swiftSettings: swiftSettings),
        tests("PeerSyncDatabaseTests", folder: "Database",
              dependencies: ["PeerSyncDatabase", "PeerSyncStorage", "PeerSyncCore", "database-test-child", "PeerSyncTestSupport",
                             "PeerSyncDatabaseTestSupport",
                             .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"])),
                             .target(name: "PeerSyncLMDB", condition: .when(traits: ["LMDB"]))]),

        // MARK: Query
        library("PeerSyncQuery", folder: "Query", dependencies: ["PeerSyncDatabase", "PeerSyncStorage", "PeerSyncCore"]),
        // The differential test compares with SQLite's JSON functions through the baseline
        // target (the one place besides PeerSyncSQLite that calls libsqlite3).
        // The live-query tests sync two in-process peers (PeerSyncReplicatorTestSupport).
        tests("PeerSyncQueryTests", folder: "Query",
              dependencies: ["PeerSyncQuery", "PeerSyncDatabase", "PeerSyncStorage", "PeerSyncCore", "PeerSyncDatabaseTestSupport",
                             "PeerSyncReplicatorTestSupport", "PeerSyncReplicator",
                             // The stale-index tests write through a process that has no query module.
                             "database-test-child", "PeerSyncTestSupport",
                             .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"])),
                             .target(name: "PeerSyncLMDB", condition: .when(traits: ["LMDB"])),
                             .target(name: "PeerSyncSQLiteBaseline", condition: .when(traits: ["SQLite"]))]),

        // MARK: Transport
        library("PeerSyncTransport", folder: "Transport", dependencies: ["PeerSyncCore"]),
        library("PeerSyncTransportTesting", folder: "Transport", dependencies: ["PeerSyncTransport", "PeerSyncConformance", "PeerSyncCore"]),
        tests("PeerSyncTransportTests", folder: "Transport",
              dependencies: ["PeerSyncTransport", "PeerSyncTransportTesting", "PeerSyncCore"]),

        // MARK: Loopback
        library("PeerSyncLoopback", folder: "Loopback", dependencies: ["PeerSyncTransport", "PeerSyncCore"]),
        tests("PeerSyncLoopbackTests", folder: "Loopback",
              dependencies: ["PeerSyncLoopback", "PeerSyncTransport", "PeerSyncTransportTesting", "PeerSyncCore"]),

        // MARK: Auth
        .systemLibrary(name: "COpenSSL", path: "Packages/Auth/Sources/COpenSSL",
                       pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        library("PeerSyncAuth", folder: "Auth", dependencies: ["PeerSyncTransport", "PeerSyncCore", "COpenSSL"]),
        tests("PeerSyncAuthTests", folder: "Auth", dependencies: ["PeerSyncAuth", "PeerSyncCore", "PeerSyncTestSupport"]),

        // MARK: Posix
        // CEpoll: <sys/epoll.h> and <malloc.h>, which Swift's Glibc module does not export.
        .systemLibrary(name: "CEpoll", path: "Packages/Posix/Sources/CEpoll"),
        library("PeerSyncPosix", folder: "Posix",
                dependencies: ["PeerSyncTransport", "PeerSyncCore",
                               .target(name: "CEpoll", condition: .when(platforms: [.linux]))]),
        tests("PeerSyncPosixTests", folder: "Posix", dependencies: ["PeerSyncPosix", "PeerSyncTransport", "PeerSyncCore"]),

        // MARK: WebSocket
        library("PeerSyncWebSocketCodec", folder: "WebSocket", dependencies: ["PeerSyncCore"]),
        tests("PeerSyncWebSocketCodecTests", folder: "WebSocket", dependencies: ["PeerSyncWebSocketCodec", "PeerSyncCore"]),
        library("PeerSyncWebSocket", folder: "WebSocket",
                dependencies: ["PeerSyncWebSocketCodec", "PeerSyncPosix", "PeerSyncTransport", "PeerSyncAuth", "PeerSyncCore"]),
        // What the WebSocket tests and the interop tests with Python `websockets`
        // (Tests/PeerSyncInteropTests) share: a test identity, an echo server, client options.
        // Test code only, no product.
        .target(name: "PeerSyncWebSocketTestSupport",
                dependencies: ["PeerSyncWebSocket", "PeerSyncAuth", "PeerSyncTransport", "PeerSyncTransportTesting", "PeerSyncCore"],
                path: "Packages/WebSocket/Tests/PeerSyncWebSocketTestSupport", swiftSettings: swiftSettings),
        tests("PeerSyncWebSocketTests", folder: "WebSocket",
              dependencies: ["PeerSyncWebSocket", "PeerSyncWebSocketCodec", "PeerSyncPosix", "PeerSyncTransport",
                             "PeerSyncTransportTesting", "PeerSyncAuth", "PeerSyncCore", "PeerSyncTestSupport",
                             "PeerSyncWebSocketTestSupport"]),

        // MARK: BLIP
        .systemLibrary(name: "CZlib", path: "Packages/BLIP/Sources/CZlib",
                       pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        library("PeerSyncBLIP", folder: "BLIP", dependencies: ["PeerSyncCore", "CZlib"]),
        tests("PeerSyncBLIPTests", folder: "BLIP", dependencies: ["PeerSyncBLIP", "PeerSyncCore"]),

        // MARK: Discovery
        library("PeerSyncDiscovery", folder: "Discovery", dependencies: ["PeerSyncCore"]),
        library("PeerSyncDiscoveryTesting", folder: "Discovery", dependencies: ["PeerSyncDiscovery", "PeerSyncConformance", "PeerSyncCore"]),
        tests("PeerSyncDiscoveryTests", folder: "Discovery",
              dependencies: ["PeerSyncDiscovery", "PeerSyncDiscoveryTesting", "PeerSyncCore"]),

        // MARK: DNSSD
        // No pkgConfig: avahi-client's .pc adds -D_REENTRANT, which makes SwiftPM warn on every
        // build; the module map names the libraries instead.
        .systemLibrary(name: "CAvahi", path: "Packages/DNSSD/Sources/CAvahi",
                       providers: [.apt(["libavahi-client-dev"])]),
        library("PeerSyncDNSSD", folder: "DNSSD", dependencies: ["PeerSyncDiscovery", "PeerSyncCore", "CAvahi"]),
        tests("PeerSyncDNSSDTests", folder: "DNSSD",
              dependencies: ["PeerSyncDNSSD", "PeerSyncDiscovery", "PeerSyncDiscoveryTesting", "PeerSyncCore", "PeerSyncTestSupport"]),

        // MARK: BLE
        // CBlueZ: libbluetooth's headers (HCI, L2CAP). The kernel may lack AF_BLUETOOTH (this
        // build machine does): the wrapper then fails with one clear error, at run time only.
        .systemLibrary(name: "CBlueZ", path: "Packages/BLE/Sources/CBlueZ",
                       providers: [.apt(["libbluetooth-dev"])]),
        library("PeerSyncBLE", folder: "BLE",
                dependencies: ["PeerSyncDiscovery", "PeerSyncTransport", "PeerSyncPosix", "PeerSyncCore",
                               "PeerSyncAuth", "PeerSyncWebSocket",
                               .target(name: "CBlueZ", condition: .when(platforms: [.linux]))]),
        tests("PeerSyncBLETests", folder: "BLE",
              dependencies: ["PeerSyncBLE", "PeerSyncDiscovery", "PeerSyncDiscoveryTesting", "PeerSyncTransport",
                             "PeerSyncTransportTesting", "PeerSyncPosix", "PeerSyncCore",
                             "PeerSyncAuth", "PeerSyncWebSocket", "PeerSyncReplicator", "PeerSyncDatabase",
                             "PeerSyncStorage", "PeerSyncBLIP"]),

        // MARK: Replicator
        library("PeerSyncReplicator", folder: "Replicator",
                dependencies: ["PeerSyncDatabase", "PeerSyncBLIP", "PeerSyncTransport", "PeerSyncCore"]),
        // The replicator's test harness (in-process peers on a loopback network, one-shot syncs,
        // snapshots), shared by its unit tests and the convergence runs
        // (Tests/PeerSyncConvergenceTests). Test code only, no product.
        .target(name: "PeerSyncReplicatorTestSupport",
                dependencies: ["PeerSyncReplicator", "PeerSyncDatabase", "PeerSyncStorage", "PeerSyncBLIP",
                               "PeerSyncTransport", "PeerSyncLoopback", "PeerSyncCore"],
                path: "Packages/Replicator/Tests/PeerSyncReplicatorTestSupport", swiftSettings: swiftSettings),
        tests("PeerSyncReplicatorTests", folder: "Replicator",
              dependencies: ["PeerSyncReplicator", "PeerSyncDatabase", "PeerSyncStorage", "PeerSyncBLIP",
                             "PeerSyncTransport", "PeerSyncLoopback", "PeerSyncCore", "PeerSyncReplicatorTestSupport"]),

        // MARK: WebSocket replication (the active side's ws(s):// connector; needs Replicator)
        library("PeerSyncWebSocketReplication", folder: "WebSocket",
                dependencies: ["PeerSyncWebSocket", "PeerSyncReplicator", "PeerSyncAuth", "PeerSyncTransport", "PeerSyncCore"]),
        tests("PeerSyncWebSocketReplicationTests", folder: "WebSocket",
              dependencies: ["PeerSyncWebSocketReplication", "PeerSyncWebSocket", "PeerSyncReplicator", "PeerSyncAuth",
                             "PeerSyncTransport", "PeerSyncCore"]),

        // MARK: Listener
        library("PeerSyncListener", folder: "Listener",
                dependencies: ["PeerSyncReplicator", "PeerSyncWebSocket", "PeerSyncAuth", "PeerSyncDatabase",
                               "PeerSyncBLIP", "PeerSyncTransport", "PeerSyncCore"]),
        tests("PeerSyncListenerTests", folder: "Listener",
              dependencies: ["PeerSyncListener", "PeerSyncReplicator", "PeerSyncWebSocket", "PeerSyncWebSocketReplication",
                             "PeerSyncPosix", "PeerSyncAuth",
                             "PeerSyncDatabase", "PeerSyncStorage", "PeerSyncTransport", "PeerSyncTransportTesting", "PeerSyncCore", "PeerSyncBLIP",
                             .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"]))]),

        // MARK: Mesh
        library("PeerSyncMesh", folder: "Mesh",
                dependencies: ["PeerSyncReplicator", "PeerSyncDiscovery", "PeerSyncAuth", "PeerSyncDatabase",
                               "PeerSyncBLIP", "PeerSyncTransport", "PeerSyncLoopback", "PeerSyncPosix", "PeerSyncCore"]),
        // With the Bluetooth module: the Wi-Fi ⇄ Bluetooth switching runs over simulated BLE.
        tests("PeerSyncMeshTests", folder: "Mesh",
              dependencies: ["PeerSyncMesh", "PeerSyncReplicator", "PeerSyncDiscovery", "PeerSyncAuth", "PeerSyncDatabase",
                             "PeerSyncStorage", "PeerSyncBLIP", "PeerSyncTransport", "PeerSyncLoopback", "PeerSyncCore",
                             "PeerSyncMeshBluetooth", "PeerSyncMeshWiFi", "PeerSyncBLE",
                             .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"]))]),
        library("PeerSyncMeshWiFi", folder: "Mesh",
                dependencies: ["PeerSyncMesh", "PeerSyncDNSSD", "PeerSyncDiscovery", "PeerSyncWebSocket", "PeerSyncPosix",
                               "PeerSyncAuth", "PeerSyncTransport", "PeerSyncCore"]),
        tests("PeerSyncMeshWiFiTests", folder: "Mesh",
              dependencies: ["PeerSyncMeshWiFi", "PeerSyncMesh", "PeerSyncDiscovery", "PeerSyncWebSocket", "PeerSyncPosix",
                             "PeerSyncAuth", "PeerSyncTransport", "PeerSyncTransportTesting", "PeerSyncDatabase",
                             "PeerSyncStorage", "PeerSyncCore",
                             .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"]))]),
        // The mesh on Bluetooth LE, and Wi-Fi ⇄ Bluetooth wiring (used with the BLE trait).
        library("PeerSyncMeshBluetooth", folder: "Mesh",
                dependencies: ["PeerSyncMesh", "PeerSyncMeshWiFi", "PeerSyncBLE", "PeerSyncDiscovery", "PeerSyncWebSocket",
                               "PeerSyncAuth", "PeerSyncTransport", "PeerSyncCore"]),

        // MARK: Umbrella and CLI
        .target(
            name: "PeerSync",
            dependencies: [
                "PeerSyncCore", "PeerSyncStorage", "PeerSyncDatabase", "PeerSyncQuery",
                "PeerSyncTransport", "PeerSyncAuth", "PeerSyncWebSocket", "PeerSyncReplicator",
                "PeerSyncWebSocketReplication", "PeerSyncListener",
                .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"])),
                .target(name: "PeerSyncLMDB", condition: .when(traits: ["LMDB"])),
                .target(name: "PeerSyncDiscovery", condition: .when(traits: ["DNSSD"])),
                .target(name: "PeerSyncDNSSD", condition: .when(traits: ["DNSSD"])),
                .target(name: "PeerSyncMesh", condition: .when(traits: ["Mesh"])),
                .target(name: "PeerSyncMeshWiFi", condition: .when(traits: ["Mesh"])),
                .target(name: "PeerSyncBLE", condition: .when(traits: ["BLE"])),
                .target(name: "PeerSyncMeshBluetooth", condition: .when(traits: ["BLE"])),
            ],
            path: "Packages/PeerSync/Sources/PeerSync",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "peersync",
            dependencies: [
                "PeerSync", "PeerSyncCore", "PeerSyncStorage", "PeerSyncDatabase", "PeerSyncAuth",
                "PeerSyncListener", "PeerSyncReplicator", "PeerSyncTransport", "PeerSyncWebSocket", "PeerSyncWebSocketReplication",
                "PeerSyncPosix", "PeerSyncLoopback", "PeerSyncMesh", "PeerSyncMeshWiFi", "PeerSyncDiscovery", "PeerSyncBLIP",
                .target(name: "PeerSyncBLE", condition: .when(traits: ["BLE"])),
                .target(name: "PeerSyncMeshBluetooth", condition: .when(traits: ["BLE"])),
                .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"])),
                .target(name: "PeerSyncLMDB", condition: .when(traits: ["LMDB"])),
                .target(name: "PeerSyncSQLiteBaseline", condition: .when(traits: ["SQLite"])),
                .target(name: "PeerSyncLMDBBaseline", condition: .when(traits: ["LMDB"])),
            ],
            path: "Tools/peersync",
            swiftSettings: swiftSettings
        ),
        // `import PeerSync` alone: the umbrella's re-exports and Couchbase Lite's names, end to end.
        .testTarget(
            name: "PeerSyncUmbrellaTests",
            dependencies: ["PeerSync"],
            path: "Tests/PeerSyncUmbrellaTests",
            swiftSettings: swiftSettings
        ),
        // The CLI: commands in-process (`@testable import peersync`, output captured) and the
        // built `peersync` run as a child process (help, exit codes, progress, revs, compact).
        .testTarget(
            name: "PeerSyncCLITests",
            dependencies: ["peersync", "PeerSync", "PeerSyncDatabase", "PeerSyncAuth", "PeerSyncCore", "PeerSyncTestSupport"],
            path: "Tests/PeerSyncCLITests",
            swiftSettings: swiftSettings
        ),

        // MARK: Benchmark baselines (no product; see the table at the top)
        .target(name: "PeerSyncSQLiteBaseline", dependencies: ["PeerSyncCore", "CSQLite"],
                path: "Tools/baselines/SQLite", swiftSettings: swiftSettings),
        .target(name: "PeerSyncLMDBBaseline", dependencies: ["PeerSyncStorage", "PeerSyncCore", "CLMDB"],
                path: "Tools/baselines/LMDB", swiftSettings: swiftSettings),

        // MARK: Examples
        .executableTarget(
            name: "example-tasklist",
            dependencies: ["PeerSync", "ExampleSupport"],
            path: "Examples/TaskList",
            swiftSettings: swiftSettings
        ),
        // Three processes, one mesh (needs the Mesh trait; `Examples/Mesh/run` runs it).
        .executableTarget(
            name: "example-mesh",
            dependencies: ["PeerSync"],
            path: "Examples/Mesh",
            exclude: ["run", "README.md"],
            swiftSettings: swiftSettings
        ),
        // What the examples below share (printing, deadlines, comparing databases); no product.
        .target(
            name: "ExampleSupport",
            dependencies: ["PeerSync"],
            path: "Examples/Support",
            swiftSettings: swiftSettings
        ),
        // A listener and a replicator in one program: TLS, a password, continuous sync both ways.
        .executableTarget(
            name: "example-syncpair",
            dependencies: ["PeerSync", "ExampleSupport"],
            path: "Examples/SyncPair",
            exclude: ["README.md"],
            swiftSettings: swiftSettings
        ),
        // A transport written outside the library (Unix-domain sockets) that passes the
        // transport conformance suite and carries a sync between two processes.
        .executableTarget(
            name: "example-customtransport",
            dependencies: ["PeerSync", "PeerSyncCore", "PeerSyncTransport", "PeerSyncTransportTesting", "PeerSyncBLIP", "ExampleSupport"],
            path: "Examples/CustomTransport",
            exclude: ["README.md"],
            swiftSettings: swiftSettings
        ),
        // One app on SQLite, LMDB or a toy storage backend of its own (which passes the storage
        // conformance suite), chosen by `--backend`.
        .executableTarget(
            name: "example-backendchoice",
            dependencies: ["PeerSync", "PeerSyncStorageTesting", "ExampleSupport"],
            path: "Examples/BackendChoice",
            exclude: ["README.md", "run"],
            swiftSettings: swiftSettings
        ),
        // An app and its extension: two processes on one database folder, the app syncing with
        // a listener whose REST API `curl` writes to (`Examples/AppAndExtension/run`).
        .executableTarget(
            name: "example-appandextension",
            dependencies: ["PeerSync", "ExampleSupport"],
            path: "Examples/AppAndExtension",
            exclude: ["README.md", "run"],
            swiftSettings: swiftSettings
        ),

        // MARK: Cross-package tests
        // What the test targets share: one child-process helper, the products-directory lookup,
        // temporary directories, an in-memory ByteStream pair. Not a product: test code only.
        .target(
            name: "PeerSyncTestSupport",
            dependencies: ["PeerSyncCore", "PeerSyncTransportTesting"],
            path: "Tests/PeerSyncTestSupport",
            swiftSettings: swiftSettings
        ),
        // Separate processes end to end: `peersync serve` and `peersync sync` as children,
        // exit codes, SIGKILL of either side.
        .testTarget(
            name: "PeerSyncEndToEndTests",
            dependencies: ["peersync", "PeerSync", "PeerSyncTestSupport"],
            path: "Tests/PeerSyncEndToEndTests",
            swiftSettings: swiftSettings
        ),
        // The child process of the multi-process storage conformance cases (picks a backend
        // by name); a dependency of StorageConformanceTests so that it is always built.
        .executableTarget(
            name: "storage-conformance-child",
            dependencies: ["PeerSync", "PeerSyncStorage", "PeerSyncStorageTesting"],
            path: "Tests/StorageConformanceChild",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StorageConformanceTests",
            dependencies: [
                "PeerSyncStorage", "PeerSyncStorageTesting", "PeerSyncCore", "storage-conformance-child", "PeerSyncTestSupport",
                .target(name: "PeerSyncSQLite", condition: .when(traits: ["SQLite"])),
                .target(name: "PeerSyncLMDB", condition: .when(traits: ["LMDB"])),
            ],
            path: "Tests/StorageConformanceTests",
            swiftSettings: swiftSettings
        ),
        // Interop with an independent WebSocket implementation: Python `websockets` as client
        // and server, ws:// and wss:// (the interpreter: PEERSYNC_PYTHON, which Tools/test sets
        // to its venv, else a venv the tests make).
        .testTarget(
            name: "PeerSyncInteropTests",
            dependencies: ["PeerSyncWebSocket", "PeerSyncWebSocketTestSupport", "PeerSyncTestSupport",
                           "PeerSyncTransportTesting", "PeerSyncTransport", "PeerSyncAuth", "PeerSyncCore"],
            path: "Tests/PeerSyncInteropTests",
            swiftSettings: swiftSettings
        ),
        // The convergence runs: 3 to 6 in-process peers, random edits and syncs (some cut
        // part-way), seeded (PEERSYNC_CONVERGENCE_SEEDS=N), must end identical.
        .testTarget(
            name: "PeerSyncConvergenceTests",
            dependencies: ["PeerSyncReplicatorTestSupport", "PeerSyncReplicator", "PeerSyncDatabase",
                           "PeerSyncLoopback", "PeerSyncCore"],
            path: "Tests/PeerSyncConvergenceTests",
            swiftSettings: swiftSettings
        ),
    ]
)
