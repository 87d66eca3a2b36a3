import PeerSyncCore
import PeerSyncStorage

// The keyspace table of an ``LMDBTransaction``: each keyspace's entry in the meta DB (ID, last
// sequence, counts), read once per transaction, counted in memory by the writes and written
// back before the commit.
extension LMDBTransaction {
    /// The state of keyspace `name` (of ordered key set `name` when `keySet`), or nil.
    func lookupKeyspace(_ name: String, keySet: Bool = false) throws(PeerSyncError) -> KeyspaceState? {
        if let last = lastKeyspace, last.isKeySet == keySet, sameUTF8(last.name, name) { return last }
        if let cached = keySet ? keySetCache[ByteExactName(name: name)] : keyspaceCache[ByteExactName(name: name)] {
            switch cached {
            case .present(let state):
                lastKeyspace = state
                return state
            case .absent:
                return nil
            }
        }
        let state = try readKeyspace(name, keySet: keySet)
        if let state {
            setCached(name, keySet: keySet, .present(state))
            lastKeyspace = state
        } else {
            setCached(name, keySet: keySet, .absent)
        }
        return state
    }

    func setCached(_ name: String, keySet: Bool, _ value: CachedKeyspace) {
        if keySet { keySetCache[ByteExactName(name: name)] = value } else { keyspaceCache[ByteExactName(name: name)] = value }
    }

    static func metaTag(keySet: Bool) -> UInt8 { keySet ? Layout.MetaKey.keySet : Layout.MetaKey.keyspace }

    private func readKeyspace(_ name: String, keySet: Bool) throws(PeerSyncError) -> KeyspaceState? {
        guard let key = metaBuffer.write(tag: Self.metaTag(keySet: keySet), text: name, limit: Layout.maxLMDBKeySize) else {
            return nil  // a name that long cannot have been stored
        }
        guard let data = try currentTxn().get(env.meta, key: key, context: ["keyspace": name]) else { return nil }
        return try KeyspaceState.decode(name: name, data, isKeySet: keySet)
    }

    func createKeyspace(_ name: String, keySet: Bool = false) throws(PeerSyncError) -> KeyspaceState {
        let id: UInt32
        if let next = nextKeyspaceID {
            id = next
        } else {
            id = try LMDBEnvironment.getMetaU32(try currentTxn(), env.meta, key: Layout.MetaKey.nextKeyspaceID) ?? 1
        }
        guard id < UInt32.max else {
            throw PeerSyncError(.storage, "keyspace IDs are exhausted", context: ctx)
        }
        try LMDBEnvironment.putMetaU32(try currentTxn(), env.meta, key: Layout.MetaKey.nextKeyspaceID, value: id + 1)
        nextKeyspaceID = id + 1
        let state = KeyspaceState(name: name, id: id, isKeySet: keySet)
        try writeKeyspace(state)
        setCached(name, keySet: keySet, .present(state))
        lastKeyspace = state
        return state
    }

    private func writeKeyspace(_ state: KeyspaceState) throws(PeerSyncError) {
        guard let key = metaBuffer.write(tag: Self.metaTag(keySet: state.isKeySet), text: state.name,
                                         limit: Layout.maxLMDBKeySize) else {
            throw PeerSyncError(.tooLarge, "the keyspace name is longer than \(Layout.maxKeyspaceNameSize) bytes",
                                context: ["keyspace": state.name])
        }
        let data = try currentTxn().reserve(env.meta, key: key, size: KeyspaceState.encodedSize,
                                            context: ["keyspace": state.name])
        guard let dest = data.baseAddress else { throw noTransaction() }
        state.encode(into: dest)
        state.dirty = false
    }

    func flushKeyspaces() throws(PeerSyncError) {
        for case .present(let state) in keyspaceCache.values where state.dirty {
            try writeKeyspace(state)
        }
        for case .present(let state) in keySetCache.values where state.dirty {
            try writeKeyspace(state)
        }
    }
}
