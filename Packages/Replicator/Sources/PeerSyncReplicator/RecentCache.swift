/// A map that remembers only recent entries, so a session's memory does not grow with the
/// number of documents it replicates: entries go into a current generation; when it holds
/// `capacity` entries it becomes the previous generation (the one before is dropped). A
/// lookup sees both, so at least the last `capacity` entries set are always found and at
/// most `2 × capacity` are held.
///
/// The replication session keeps what it knows about the peer here (revisions it has, closed
/// branches already sent). Forgetting an entry only costs a round trip: the peer answers a
/// proposal of a revision it has with 304, and one without the right server revision with
/// 409 naming its revision.
struct RecentMap<Value> {
    static var defaultCapacity: Int { 20_000 }
    let capacity: Int
    private var current: [String: Value] = [:]
    private var previous: [String: Value] = [:]

    init(capacity: Int = Self.defaultCapacity) {
        self.capacity = max(1, capacity)
    }

    subscript(key: String) -> Value? {
        get { current[key] ?? previous[key] }
        set {
            guard let newValue else {
                current[key] = nil
                previous[key] = nil
                return
            }
            if current.updateValue(newValue, forKey: key) == nil, current.count >= capacity {
                previous = current
                current = [:]
                current.reserveCapacity(capacity)
            }
        }
    }

    /// How many entries are held (at most `2 × capacity`; a key in both generations counts twice).
    var count: Int { current.count + previous.count }
}

/// A set with the same bounded memory as ``RecentMap``.
struct RecentSet: ExpressibleByArrayLiteral {
    private var map: RecentMap<Void>

    init(capacity: Int = RecentMap<Void>.defaultCapacity) {
        map = RecentMap(capacity: capacity)
    }

    init(arrayLiteral elements: String...) {
        self.init()
        for e in elements { insert(e) }
    }

    func contains(_ key: String) -> Bool { map[key] != nil }
    mutating func insert(_ key: String) { map[key] = () }
    var count: Int { map.count }
}
