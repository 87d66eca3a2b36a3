import Foundation
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncWebSocket

/// The listener's REST API (JSON in and out, same port and authentication as replication),
/// on the listener's first collection:
///
/// | Request | Answer |
/// |---|---|
/// | `GET /` | `{"name":"PeerSync","databases":[…]}` |
/// | `GET /<db>` | `{"db_name","doc_count","update_seq","collections"}` |
/// | `GET /<db>/_changes?since=N&limit=M` | `{"results":[{"seq","id","changes":[{"rev"}],"deleted"?}],"last_seq"}` |
/// | `GET /<db>/<docid>` | the body with `_id` and `_rev`; 404 if missing or deleted |
/// | `PUT /<db>/<docid>[?rev=R]` | 201 `{"ok":true,"id","rev"}`; updating needs the current `rev` (query or `_rev` in the body), else 409 |
/// | `DELETE /<db>/<docid>?rev=R` | 200 `{"ok":true,"id","rev"}`; 409 without the current `rev`, 404 if missing |
///
/// Errors are `{"error","reason"}` with 400 (bad JSON — including an object with the same
/// key twice —, an ID that ``DocumentID/validate(_:)`` refuses after percent-decoding, e.g.
/// one holding `%00`, or a bad body), 401 (credentials), 403 (read-only listener), 404, 405,
/// 409, 413, 500. The HTTP layer itself answers 400 to a request with two `Authorization`
/// headers and 501 to a `Transfer-Encoding` other than `chunked` alone.
struct RESTHandler: Sendable {
    let listener: URLEndpointListener

    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        listener.restBegan()
        defer { listener.restEnded() }
        guard listener.restAuthorized(request) else {
            var r = Self.error(401, "unauthorized", "authentication required")
            r.headers.add("WWW-Authenticate", WebSocketAuthResult.basicChallenge(realm: URLEndpointListener.authenticationRealm))
            return r
        }
        do {
            return try await route(request)
        } catch let error as PeerSyncError {
            return Self.error(for: error)
        } catch {
            return Self.error(500, "internal_error", "\(error)")
        }
    }

    private func route(_ request: HTTPRequest) async throws -> HTTPResponse {
        let rawSegments = request.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        var segments: [String] = []
        for raw in rawSegments {
            guard let decoded = String(raw).removingPercentEncoding else {
                return Self.error(400, "bad_request", "malformed percent-encoding in the path")
            }
            segments.append(decoded)
        }
        if segments.last == "" && segments.count > 1 { segments.removeLast() }
        let method = request.method == "HEAD" ? "GET" : request.method
        let query = Self.parseQuery(request.query)

        if segments.isEmpty || segments == [""] {
            guard method == "GET" else { return Self.methodNotAllowed("GET, HEAD") }
            return Self.json(200, ["name": "PeerSync", "databases": .array([.string(listener.databaseName)])])
        }
        guard segments[0] == listener.databaseName else {
            return Self.error(404, "not_found", "no database '\(segments[0])'")
        }
        let collection = listener.config.collections[0]
        switch segments.count {
        case 1:
            guard method == "GET" else { return Self.methodNotAllowed("GET, HEAD") }
            let count = try await collection.count
            let lastSequence = try await collection.lastSequence
            return Self.json(200, [
                "db_name": .string(listener.databaseName),
                "doc_count": .int(Int64(count)),
                "update_seq": .int(Int64(clamping: lastSequence)),
                "collections": .array(listener.config.collections.map { .string($0.fullName) }),
            ])
        case 2:
            let name = segments[1]
            if name == "_changes" {
                guard method == "GET" else { return Self.methodNotAllowed("GET, HEAD") }
                return try await changes(collection, query)
            }
            if name == "_blipsync" {
                var r = Self.error(426, "upgrade_required", "this path serves WebSocket replication only")
                r.headers.add("Upgrade", "websocket")
                return r
            }
            if name.hasPrefix("_") {
                return Self.error(404, "not_found", "no endpoint '\(name)'")
            }
            // The percent-decoded ID, checked like every other entry point: `%00` and the
            // other control characters are a 400, never stored.
            guard ["GET", "PUT", "DELETE"].contains(method) else { return Self.methodNotAllowed("GET, HEAD, PUT, DELETE") }
            try DocumentID.validate(name)
            switch method {
            case "GET": return try await get(collection, name)
            case "PUT": return try await put(collection, name, request, query)
            case "DELETE": return try await delete(collection, name, query)
            default: return Self.methodNotAllowed("GET, HEAD, PUT, DELETE")
            }
        default:
            return Self.error(404, "not_found", "no endpoint at \(request.path)")
        }
    }

    private func get(_ collection: Collection, _ id: String) async throws -> HTTPResponse {
        guard let doc = try await collection.document(id: id) else {
            return Self.error(404, "not_found", "missing")
        }
        var body = doc.properties
        body["_id"] = .string(doc.id)
        body["_rev"] = doc.revisionID.map(JSONValue.string) ?? .null
        return Self.json(200, body)
    }

    private func put(_ collection: Collection, _ id: String, _ request: HTTPRequest,
                     _ query: [String: String]) async throws -> HTTPResponse {
        if listener.config.readOnly { return Self.error(403, "forbidden", "the listener is read-only") }
        let parsed: JSONValue
        do {
            parsed = try JSONValue(parsing: request.body, options: .strict)
        } catch {
            return Self.error(400, "bad_request", "the body is not valid JSON: \(error.message)")
        }
        guard var body = parsed.objectValue else {
            return Self.error(400, "bad_request", "the body must be a JSON object")
        }
        if let bodyID = body["_id"] {
            guard bodyID.stringValue == id else { return Self.error(400, "bad_request", "_id in the body does not match the URL") }
            body["_id"] = nil
        }
        var rev = query["rev"]
        if let bodyRev = body["_rev"] {
            guard let r = bodyRev.stringValue, rev == nil || rev == r else {
                return Self.error(400, "bad_request", "_rev in the body does not match ?rev=")
            }
            rev = r
            body["_rev"] = nil
        }
        let existing = try await collection.document(id: id)
        var doc: MutableDocument
        if let existing {
            guard let rev, rev == existing.revisionID else {
                return Self.error(409, "conflict", "document update conflict: give the current revision as ?rev=")
            }
            doc = existing.toMutable()
            doc.properties = body
        } else {
            if rev != nil { return Self.error(409, "conflict", "document update conflict: the document does not exist") }
            doc = MutableDocument(id: id, data: body)
        }
        guard try await collection.save(document: &doc, concurrencyControl: .failOnConflict) else {
            return Self.error(409, "conflict", "document update conflict")
        }
        return Self.json(201, ["ok": true, "id": .string(id), "rev": doc.revisionID.map(JSONValue.string) ?? .null])
    }

    private func delete(_ collection: Collection, _ id: String, _ query: [String: String]) async throws -> HTTPResponse {
        if listener.config.readOnly { return Self.error(403, "forbidden", "the listener is read-only") }
        guard let existing = try await collection.document(id: id) else {
            return Self.error(404, "not_found", "missing")
        }
        guard let rev = query["rev"], rev == existing.revisionID else {
            return Self.error(409, "conflict", "document update conflict: give the current revision as ?rev=")
        }
        guard try await collection.delete(document: existing, concurrencyControl: .failOnConflict) else {
            return Self.error(409, "conflict", "document update conflict")
        }
        let tombstone = try await collection.documentIncludingDeleted(id: id)
        return Self.json(200, ["ok": true, "id": .string(id), "rev": tombstone?.revisionID.map(JSONValue.string) ?? .null])
    }

    private func changes(_ collection: Collection, _ query: [String: String]) async throws -> HTTPResponse {
        var since: UInt64 = 0
        if let s = query["since"] {
            guard let v = UInt64(s) else { return Self.error(400, "bad_request", "since must be a sequence number") }
            since = v
        }
        var limit: Int?
        if let l = query["limit"] {
            guard let v = Int(l), v > 0 else { return Self.error(400, "bad_request", "limit must be a positive integer") }
            limit = v
        }
        let entries = try await collection.changes(since: since, limit: limit)
        let results: [JSONValue] = entries.map { e in
            var o: [String: JSONValue] = [
                "seq": .int(Int64(clamping: e.sequence)),
                "id": .string(e.docID),
                "changes": .array([.object(["rev": .string(e.revID.description)])]),
            ]
            if e.deleted { o["deleted"] = true }
            return .object(o)
        }
        var last = since
        if let final = entries.last?.sequence {
            last = final
        } else if limit == nil {
            last = max(since, try await collection.lastSequence)
        }
        return Self.json(200, ["results": .array(results), "last_seq": .int(Int64(clamping: last))])
    }

    // MARK: Helpers

    static func parseQuery(_ query: String?) -> [String: String] {
        guard let query else { return [:] }
        var out: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = String(parts[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(parts[0])
            let value = parts.count > 1
                ? (String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(parts[1])) : ""
            out[key] = value
        }
        return out
    }

    static func json(_ status: Int, _ object: [String: JSONValue]) -> HTTPResponse {
        var body = JSONValue.object(object).canonicalData
        body.append(0x0A)
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body)
    }

    static func error(_ status: Int, _ error: String, _ reason: String) -> HTTPResponse {
        json(status, ["error": .string(error), "reason": .string(reason)])
    }

    static func methodNotAllowed(_ allow: String) -> HTTPResponse {
        var r = error(405, "method_not_allowed", "method not allowed here")
        r.headers.add("Allow", allow)
        return r
    }

    static func error(for error: PeerSyncError) -> HTTPResponse {
        switch error.code {
        case .invalidDocumentID, .invalidArgument, .invalidJSON, .invalidRevisionID:
            return Self.error(400, "bad_request", error.message)
        case .tooLarge: return Self.error(413, "too_large", error.message)
        case .notFound: return Self.error(404, "not_found", error.message)
        case .conflict: return Self.error(409, "conflict", error.message)
        default: return Self.error(500, "internal_error", error.message)
        }
    }
}
