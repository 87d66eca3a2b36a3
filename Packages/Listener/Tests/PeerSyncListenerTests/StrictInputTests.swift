import Foundation
import PeerSyncCore
import PeerSyncListener
import PeerSyncWebSocket
import Testing

/// Issue 9: what the listener refuses at its HTTP entry points, over real TCP on 127.0.0.1 —
/// document IDs that cannot replicate, JSON bodies with duplicate keys, two `Authorization`
/// headers and transfer codings it does not decode. Each refusal leaves the database unchanged.
@Suite struct StrictInputTests {
    @Test func restRefusesControlCharactersInDocumentIDs() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            let auth = basic("alice", "secret")
            for encoded in ["a%00b", "%00", "a%01", "tab%09", "x%7F"] {
                for method in ["PUT", "GET", "DELETE"] {
                    let r = try await httpRequest(port: port, method, "/server/\(encoded)",
                                                  body: method == "PUT" ? "{}" : nil, headers: [auth])
                    #expect(r.status == 400, "\(method) /server/\(encoded)")
                    #expect(r.json?["error"] == "bad_request")
                    #expect(r.json?["reason"]?.stringValue?.contains("control character") == true, "\(r.json ?? [:])")
                }
            }
            #expect(try await db.defaultCollection().count == 0)
            // Percent-encoded printable characters are still fine.
            #expect(try await httpRequest(port: port, "PUT", "/server/a%20b%C3%A9", body: "{}", headers: [auth]).status == 201)
            #expect(try await db.defaultCollection().document(id: "a bé") != nil)
            await listener.stop()
            try await db.close()
        }
    }

    @Test func restRefusesDuplicateKeysInJSONBodies() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            let auth = basic("alice", "secret")
            for body in [#"{"a":1,"a":2}"#, #"{"x":{"b":1,"b":1}}"#, #"{"_id":"d","_id":"d"}"#] {
                let r = try await httpRequest(port: port, "PUT", "/server/d", body: body, headers: [auth])
                #expect(r.status == 400, "\(body)")
                #expect(r.json?["reason"]?.stringValue?.contains("duplicate key") == true, "\(r.json ?? [:])")
            }
            #expect(try await db.defaultCollection().count == 0)
            #expect(try await httpRequest(port: port, "PUT", "/server/d", body: #"{"a":1,"b":{"a":2}}"#, headers: [auth]).status == 201)
            await listener.stop()
            try await db.close()
        }
    }

    @Test func twoAuthorizationHeadersAreRefused() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            let right = "\(basic("alice", "secret").0): \(basic("alice", "secret").1)\r\n"
            let wrong = "\(basic("alice", "nope").0): \(basic("alice", "nope").1)\r\n"
            let upgrade = "GET /server/_blipsync HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: Upgrade\r\n"
                + "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                + "Sec-WebSocket-Protocol: BLIP_3+CBMobile_3\r\n"
            let rest = "GET /server HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
            // A single right header is accepted (controls for the cases below).
            #expect(try await httpExchange(port: port, Array((upgrade + right + "\r\n").utf8)).status == 101)
            #expect(try await httpExchange(port: port, Array((rest + right + "\r\n").utf8)).status == 200)
            for head in [upgrade, rest] {
                for pair in [right + wrong, wrong + right, right + right] {
                    let r = try await httpExchange(port: port, Array((head + pair + "\r\n").utf8))
                    #expect(r.status == 400, "\(head.prefix(20)) with \(pair)")
                    #expect(r.bodyText.contains("more than one Authorization header"))
                }
            }
            await listener.stop()
            try await db.close()
        }
    }

    @Test func transferCodingsOtherThanChunkedAreNotImplemented() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            let auth = "\(basic("alice", "secret").0): \(basic("alice", "secret").1)\r\n"
            func put(_ id: String, _ codings: String) -> [UInt8] {
                Array(("PUT /server/\(id) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n" + auth
                       + "Transfer-Encoding: \(codings)\r\n\r\n7\r\n{\"a\":1}\r\n0\r\n\r\n").utf8)
            }
            for codings in ["gzip, chunked", "deflate, chunked", "chunked, chunked", "gzip"] {
                let r = try await httpExchange(port: port, put("coded", codings))
                #expect(r.status == 501, "Transfer-Encoding: \(codings)")
            }
            #expect(try await db.defaultCollection().count == 0)
            #expect(try await httpExchange(port: port, put("plain", "chunked")).status == 201)
            #expect(try await db.defaultCollection().document(id: "plain")?.properties == ["a": 1])
            await listener.stop()
            try await db.close()
        }
    }
}

extension HTTPResponse {
    var bodyText: String { String(decoding: body, as: UTF8.self) }
}
