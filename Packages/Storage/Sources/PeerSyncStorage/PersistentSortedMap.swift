#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A key of ``PersistentSortedMap``: `Comparable`, plus a three-way comparison so that a
/// walk down the tree compares a node's key once, not with `<` both ways.
protocol SortedMapKey: Comparable, Sendable {
    /// Negative, zero or positive as `a` sorts before, equal to or after `b` (the order of `<`).
    static func order(_ a: Self, _ b: Self) -> Int
}

extension SortedMapKey where Self: BinaryInteger {
    static func order(_ a: Self, _ b: Self) -> Int { a < b ? -1 : (a == b ? 0 : 1) }
}

extension UInt64: SortedMapKey {}
extension Int: SortedMapKey {}  // the tests' maps

/// Keys compared by their bytes (UTF-8 for strings): the storage layer's one key order.
///
/// Swift's `String` comparison and equality follow Unicode canonical equivalence
/// (`"é" == "e\u{301}"`), which is not what a byte-ordered store does, so the in-memory
/// backend keys everything by raw UTF-8 bytes instead.
struct ByteKey: SortedMapKey, Hashable, Sendable {
    let bytes: [UInt8]

    init(_ string: String) { bytes = Array(string.utf8) }

    var string: String { String(decoding: bytes, as: UTF8.self) }

    /// Byte order by `memcmp`, then length (a prefix comes first): the order of
    /// `lexicographicallyPrecedes`, without its per-byte iterator (every lookup and insert of
    /// the memory store compares keys ~log₂ n times, each of them twice per node).
    static func < (a: ByteKey, b: ByteKey) -> Bool { order(a, b) < 0 }

    /// The same order, three-way: one `memcmp`.
    static func order(_ a: ByteKey, _ b: ByteKey) -> Int {
        a.bytes.withUnsafeBufferPointer { order($0, b) }
    }

    /// ``order(_:_:)`` of the key whose bytes are `bytes` against `b`.
    static func order(_ bytes: UnsafeBufferPointer<UInt8>, _ b: ByteKey) -> Int {
        b.bytes.withUnsafeBufferPointer { pb in
            let common = min(bytes.count, pb.count)
            if common > 0, let x = bytes.baseAddress, let y = pb.baseAddress {
                let order = memcmp(x, y, common)
                if order != 0 { return order < 0 ? -1 : 1 }
            }
            return bytes.count < pb.count ? -1 : (bytes.count == pb.count ? 0 : 1)
        }
    }
}

extension PersistentSortedMap where Key == ByteKey {
    /// The entry for `key`'s UTF-8 bytes, found without building a ``ByteKey`` (an array
    /// allocation): the memory store looks a keyspace and a record up this way on every read.
    func entry(_ key: String) -> (key: ByteKey, value: Value)? {
        var key = key
        return key.withUTF8 { bytes in entry { ByteKey.order(bytes, $0) } }
    }
}

/// An immutable AVL tree node. Nodes are never mutated, so a tree can be shared by any
/// number of snapshots; an update copies only the path from the root to the changed node.
final class AVLNode<Key: SortedMapKey, Value: Sendable>: Sendable {
    let key: Key
    let value: Value
    let left: AVLNode?
    let right: AVLNode?
    let height: Int

    init(_ key: Key, _ value: Value, _ left: AVLNode?, _ right: AVLNode?) {
        self.key = key
        self.value = value
        self.left = left
        self.right = right
        self.height = max(left?.height ?? 0, right?.height ?? 0) + 1
    }
}

/// A persistent (immutable, structurally shared) sorted map: copying is O(1), and
/// `set`/`remove` cost O(log n) time and allocation without affecting other copies.
/// This is what gives the in-memory backend cheap snapshots.
struct PersistentSortedMap<Key: SortedMapKey, Value: Sendable>: Sendable {
    typealias Node = AVLNode<Key, Value>

    private(set) var root: Node?
    private(set) var count = 0

    init() {}

    /// The value for `key` (``entry(ordering:)`` with ``SortedMapKey/order(_:_:)``).
    subscript(key: Key) -> Value? {
        entry { Key.order(key, $0) }?.value
    }

    /// The entry whose key `order` finds (`order(key)` negative, zero or positive as the
    /// sought key sorts before, equal to or after `key`): one comparison per node. Returns the
    /// stored key too, so a caller can reuse it instead of building another.
    ///
    /// The walk holds the nodes it passes unretained (`Unmanaged`): `root`, kept alive for
    /// the whole call, keeps every node below it alive, and nodes are immutable, so the
    /// retain and release of each node and of each node's key on the way down (~2–3 % of a
    /// replication's CPU) are not needed.
    func entry(ordering order: (Key) -> Int) -> (key: Key, value: Value)? {
        guard let root else { return nil }
        return withExtendedLifetime(root) { () -> (key: Key, value: Value)? in
            var node = Unmanaged.passUnretained(root)
            while true {
                let (found, next) = node._withUnsafeGuaranteedRef { n -> (Bool, Unmanaged<Node>?) in
                    let o = order(n.key)
                    if o == 0 { return (true, nil) }
                    guard let child = o < 0 ? n.left : n.right else { return (false, nil) }
                    return (false, Unmanaged.passUnretained(child))
                }
                if found { return node._withUnsafeGuaranteedRef { ($0.key, $0.value) } }
                guard let next else { return nil }
                node = next
            }
        }
    }

    /// Inserts or replaces; returns the previous value.
    @discardableResult
    mutating func set(_ value: Value, for key: Key) -> Value? {
        let (newRoot, old) = Self.insert(root, key, value)
        root = newRoot
        if old == nil { count += 1 }
        return old
    }

    /// Removes `key`; returns the removed value.
    @discardableResult
    mutating func remove(_ key: Key) -> Value? {
        let (newRoot, old) = Self.remove(root, key)
        guard let old else { return nil }
        root = newRoot
        count -= 1
        return old
    }

    /// Calls `body` for every entry with `lower <= key` and `key < upper` (`key <= upper` when
    /// `upperInclusive`), ascending or descending; `body` returns false to stop.
    /// Returns false if it was stopped.
    @discardableResult
    func forEach(from lower: Key?, to upper: Key?, upperInclusive: Bool, descending: Bool,
                 _ body: (Key, Value) throws -> Bool) rethrows -> Bool {
        func below(_ key: Key) -> Bool {  // key is under the upper bound
            guard let upper else { return true }
            return upperInclusive ? !(upper < key) : key < upper
        }
        func above(_ key: Key) -> Bool {  // key is at or over the lower bound
            guard let lower else { return true }
            return !(key < lower)
        }
        func ascend(_ node: Node?) throws -> Bool {
            guard let n = node else { return true }
            let aboveLower = above(n.key), belowUpper = below(n.key)
            if aboveLower, try !ascend(n.left) { return false }
            if aboveLower && belowUpper, try !body(n.key, n.value) { return false }
            if belowUpper, try !ascend(n.right) { return false }
            return true
        }
        func descend(_ node: Node?) throws -> Bool {
            guard let n = node else { return true }
            let aboveLower = above(n.key), belowUpper = below(n.key)
            if belowUpper, try !descend(n.right) { return false }
            if aboveLower && belowUpper, try !body(n.key, n.value) { return false }
            if aboveLower, try !descend(n.left) { return false }
            return true
        }
        return descending ? try descend(root) : try ascend(root)
    }

    // MARK: AVL algorithms (path copying)

    private static func height(_ node: Node?) -> Int { node?.height ?? 0 }

    /// Builds a node from parts that are each balanced and differ in height by at most 2.
    private static func balanced(_ key: Key, _ value: Value, _ left: Node?, _ right: Node?) -> Node {
        let hl = height(left), hr = height(right)
        if hl > hr + 1, let l = left {
            if height(l.left) >= height(l.right) {
                return Node(l.key, l.value, l.left, Node(key, value, l.right, right))
            }
            if let lr = l.right {
                return Node(lr.key, lr.value, Node(l.key, l.value, l.left, lr.left), Node(key, value, lr.right, right))
            }
        } else if hr > hl + 1, let r = right {
            if height(r.right) >= height(r.left) {
                return Node(r.key, r.value, Node(key, value, left, r.left), r.right)
            }
            if let rl = r.left {
                return Node(rl.key, rl.value, Node(key, value, left, rl.left), Node(r.key, r.value, rl.right, r.right))
            }
        }
        return Node(key, value, left, right)
    }

    private static func insert(_ node: Node?, _ key: Key, _ value: Value) -> (Node, Value?) {
        guard let n = node else { return (Node(key, value, nil, nil), nil) }
        let order = Key.order(key, n.key)
        if order < 0 {
            let (l, old) = insert(n.left, key, value)
            return (balanced(n.key, n.value, l, n.right), old)
        }
        if order > 0 {
            let (r, old) = insert(n.right, key, value)
            return (balanced(n.key, n.value, n.left, r), old)
        }
        return (Node(key, value, n.left, n.right), n.value)
    }

    private static func remove(_ node: Node?, _ key: Key) -> (Node?, Value?) {
        guard let n = node else { return (nil, nil) }
        if key < n.key {
            let (l, old) = remove(n.left, key)
            guard old != nil else { return (n, nil) }
            return (balanced(n.key, n.value, l, n.right), old)
        }
        if n.key < key {
            let (r, old) = remove(n.right, key)
            guard old != nil else { return (n, nil) }
            return (balanced(n.key, n.value, n.left, r), old)
        }
        guard let left = n.left else { return (n.right, n.value) }
        guard let right = n.right else { return (left, n.value) }
        let (newRight, minKey, minValue) = removeMin(right)
        return (balanced(minKey, minValue, left, newRight), n.value)
    }

    private static func removeMin(_ n: Node) -> (Node?, Key, Value) {
        guard let left = n.left else { return (n.right, n.key, n.value) }
        let (newLeft, k, v) = removeMin(left)
        return (balanced(n.key, n.value, newLeft, n.right), k, v)
    }
}
