import Foundation
import PeerSyncAuth
import PeerSyncCore
import Testing
@testable import peersync

/// `peersync identity ...`, run in-process with its output captured.
@Suite(.timeLimit(.minutes(1))) struct IdentityCommandTests {
    struct Run {
        let status: Int32
        let out: String
        let err: String
    }

    static func run(_ args: [String]) -> Run {
        var out = "", err = ""
        let status = IdentityCommand.run(args, output: { out += $0 }, errorOutput: { err += $0 })
        return Run(status: status, out: out, err: err)
    }

    /// A fresh directory for one test, removed by `cleanup()`.
    struct Scratch {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-cli-\(UUID().uuidString)").path
        init() throws { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        func file(_ name: String) -> String { path + "/" + name }
        func cleanup() { try? FileManager.default.removeItem(atPath: path) }
    }

    static func permissions(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test func fullLifecycle() throws {
        let dir = try Scratch()
        defer { dir.cleanup() }
        let ks = ["--keystore", dir.file("ks")]

        var r = Self.run(["create", "--label", "root", "--ca", "--cn", "Fleet Root"] + ks)
        #expect(r.status == 0, "\(r.err)")
        r = Self.run(["create", "--label", "node1", "--issuer", "root", "--usage", "server", "--hostname", "node1.local",
                      "--ip", "10.1.2.3", "--days", "30"] + ks)
        #expect(r.status == 0, "\(r.err)")
        r = Self.run(["identity", "create", "--label", "solo"] + ks)   // a leading "identity" is accepted
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.hasPrefix("created solo "))

        r = Self.run(["list"] + ks)
        #expect(r.status == 0)
        let lines = r.out.split(separator: "\n")
        #expect(lines.map { $0.split(separator: "\t").first.map(String.init) } == ["node1", "root", "solo"])
        #expect(lines[0].contains("CN=node1\tserver\tissuer=Fleet Root"))
        #expect(lines[1].contains("CN=Fleet Root\tca\tself-signed"))
        #expect(lines[2].contains("CN=solo\tboth\tself-signed"))

        // --pem prints the chain only.
        r = Self.run(["export", "--label", "node1", "--pem"] + ks)
        #expect(r.status == 0)
        #expect(!r.out.contains("PRIVATE KEY"))
        let chain = try Certificate.certificates(fromPEM: r.out)
        #expect(chain.count == 2)
        #expect(chain[0].subjectAlternativeNames.contains(.dnsName("node1.local")))
        #expect(chain[0].subjectAlternativeNames.contains(.ipAddress("10.1.2.3")))
        #expect(chain[0].notAfter.timeIntervalSinceNow < 31 * 86400)
        #expect(chain[0].keyUsages == .serverAuth)

        let p12 = dir.file("node1.p12")
        r = Self.run(["export", "--label", "node1", "--p12", p12, "--password", "pw"] + ks)
        #expect(r.status == 0, "\(r.err)")
        #expect(try Self.permissions(p12) == 0o600)
        r = Self.run(["import", p12, "--label", "node1-copy", "--password", "pw"] + ks)
        #expect(r.status == 0, "\(r.err)")
        let store = TLSKeyStore(directory: dir.file("ks"))
        #expect(try store.identity(withLabel: "node1-copy")?.peerID == chain[0].peerID)

        r = Self.run(["delete", "--label", "node1-copy"] + ks)
        #expect(r.status == 0)
        #expect(try store.labels() == ["node1", "root", "solo"])

        // A damaged entry is listed as such; the others still show.
        try "junk".write(toFile: dir.file("ks/solo.pem"), atomically: true, encoding: .utf8)
        r = Self.run(["list"] + ks)
        #expect(r.status == 0)
        #expect(r.out.contains("solo\tunreadable: "))
        #expect(r.out.contains("node1\tCN=node1"))
    }

    @Test func failuresExitOneWithOneLine() throws {
        let dir = try Scratch()
        defer { dir.cleanup() }
        let ks = ["--keystore", dir.path]
        #expect(Self.run(["create", "--label", "a"] + ks).status == 0)
        for args in [["create", "--label", "a"],                       // exists
                     ["delete", "--label", "nope"],                    // not found
                     ["export", "--label", "nope", "--pem"],
                     ["create", "--label", "b", "--issuer", "a"],      // issuer is not a CA
                     ["create", "--label", "c", "--issuer", "missing"],
                     ["import", dir.file("missing.p12"), "--label", "x"],
                     ["create", "--label", "../evil"]] {
            let r = Self.run(args + ks)
            #expect(r.status == 1, "\(args): \(r.err)")
            #expect(r.err.split(separator: "\n").count == 1, "\(args): \(r.err)")
            #expect(r.err.hasPrefix("peersync identity: "))
        }
        let p12 = dir.file("a.p12")
        #expect(Self.run(["export", "--label", "a", "--p12", p12, "--password", "right"] + ks).status == 0)
        let wrong = Self.run(["import", p12, "--label", "b", "--password", "wrong"] + ks)
        #expect(wrong.status == 1)
        #expect(wrong.err.contains("wrongPassword"))
    }

    /// An issuer that is not a CA: exit 1, one line on stderr (no usage text) that says how to
    /// make a CA, and nothing created.
    @Test func nonCAIssuerIsOneLineThatPointsToCA() throws {
        let dir = try Scratch()
        defer { dir.cleanup() }
        let ks = ["--keystore", dir.path]
        #expect(Self.run(["create", "--label", "plain"] + ks).status == 0)
        let r = Self.run(["create", "--label", "leaf", "--issuer", "plain"] + ks)
        #expect(r.status == 1)
        #expect(r.out.isEmpty)
        #expect(r.err == "peersync identity: invalidArgument: the issuer 'plain' is not a certificate authority; "
                + "create one with 'peersync identity create --label LABEL --ca'\n")
        #expect(try TLSKeyStore(directory: dir.path).labels() == ["plain"])
    }

    @Test func usageErrorsExitTwo() throws {
        let dir = try Scratch()
        defer { dir.cleanup() }
        let ks = ["--keystore", dir.path]
        for args in [[], ["frobnicate"], ["create"] + ks, ["create", "--label"], ["create", "--label", "a", "--bogus"] + ks,
                     ["create", "--label", "a", "--usage", "everything"] + ks, ["create", "--label", "a", "--days", "0"] + ks,
                     ["create", "--label", "a", "--self-signed", "--ca"] + ks,
                     ["create", "--label", "a", "--label", "b"] + ks,
                     ["export", "--label", "a"] + ks, ["export", "--label", "a", "--pem", "--p12", "f"] + ks,
                     ["export", "--label", "a", "--p12", "f"] + ks,
                     ["import", "--label", "a"] + ks, ["delete"] + ks, ["list", "extra"] + ks] {
            let r = Self.run(args)
            #expect(r.status == 2, "\(args): \(r.err)")
            #expect(r.err.contains("usage:"))
        }
        #expect(try TLSKeyStore(directory: dir.path).labels() == [])
    }
}
