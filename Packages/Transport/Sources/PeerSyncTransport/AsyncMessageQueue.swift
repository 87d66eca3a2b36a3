import PeerSyncCore

/// A bounded, multi-producer, multi-consumer async FIFO channel with backpressure: the building
/// block transports use to hand incoming messages to their reader (and outgoing ones to a
/// writer task).
///
/// Contract:
/// - Capacity is `maxCount` elements and `maxBytes` bytes (each element's size is given by the
///   `cost` function). An element is admitted when the queue is empty (so a single element
///   larger than `maxBytes` still passes, alone) or when both limits hold after adding it.
///   Memory held is therefore at most `maxBytes` plus one element, plus the elements of
///   suspended senders, which are not copied.
/// - ``send(_:)`` suspends until its element is admitted. Suspended senders are admitted strictly
///   in arrival order, and a new sender never overtakes a suspended one, so elements from one
///   task keep their order and elements are never interleaved or split.
/// - ``receive()`` returns elements in order, suspending while the queue is empty. Several tasks
///   may receive at once; each element goes to exactly one of them, first come first served.
/// - ``finish(throwing:discardingBuffered:)`` ends the queue. Buffered elements are still
///   received (unless discarded), then every ``receive()`` returns `nil` (finished without an
///   error) or throws the error, again on every later call. Suspended and later senders throw
///   the error, or `PeerSyncError.Code.connectionClosed` after a clean finish.
/// - Cancellation: a suspended ``send(_:)`` or ``receive()`` whose task is cancelled throws
///   `PeerSyncError.Code.cancelled`; a cancelled send did not enqueue its element and a
///   cancelled receive did not take one. Nothing else is affected.
///
/// All methods are thread-safe; the state is guarded by one lock and continuations are
/// resumed outside it.
///
/// Sending and receiving are inlinable (their state `@usableFromInline`): a link's two
/// queues carry every frame of a replication, and called across modules unspecialized each
/// call looked up the generic metadata of its buffers (a specialization per element type
/// in the calling module instead).
public final class AsyncMessageQueue<Element: Sendable>: Sendable {
    /// The maximum number of buffered elements (at least 1).
    public let maxCount: Int
    /// The maximum number of buffered bytes (at least 1); see the admission rule above.
    public let maxBytes: Int
    @usableFromInline let cost: @Sendable (Element) -> Int
    @usableFromInline let state = LockedValue(State())

    /// Creates a queue holding at most `maxCount` elements and `maxBytes` bytes, where `cost`
    /// gives the size of an element in bytes (default: 0, so only `maxCount` limits). Values
    /// below 1 are raised to 1.
    public init(maxCount: Int, maxBytes: Int = .max, cost: @escaping @Sendable (Element) -> Int = { _ in 0 }) {
        self.maxCount = Swift.max(1, maxCount)
        self.maxBytes = Swift.max(1, maxBytes)
        self.cost = cost
    }

    // MARK: Sending

    /// Appends `element`, suspending while the queue is full. Throws the finish error (or
    /// `PeerSyncError.Code.connectionClosed`) if the queue is finished before the element is
    /// admitted, and `PeerSyncError.Code.cancelled` if the task is cancelled while waiting;
    /// in both cases the element was not enqueued.
    @inlinable
    public func send(_ element: Element) async throws {
        // Fast path (most sends on a flowing link): admitted or handed to a waiting receiver
        // at once, without a continuation or a cancellation handler.
        if try trySend(element) { return }
        let size = Swift.max(0, cost(element))
        let id = state.withLock { $0.makeID() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let action: SendAction = state.withLock { s in
                    if let end = s.end { return .fail(end.senderError) }
                    if let receiver = s.receivers.popFirst() {
                        return .handOff(receiver.continuation)
                    }
                    if s.senders.isEmpty && s.canAdmit(size, maxCount: maxCount, maxBytes: maxBytes) {
                        s.buffer.append((element, size))
                        s.bytes += size
                        return .done
                    }
                    if Task.isCancelled { return .fail(Self.cancelledError("send")) }
                    s.senders.append(Sender(id: id, element: element, size: size, continuation: continuation))
                    return .wait
                }
                switch action {
                case .done: continuation.resume()
                case .wait: break
                case .fail(let error): continuation.resume(throwing: error)
                case .handOff(let receiver):
                    receiver.resume(returning: element)
                    continuation.resume()
                }
            }
        } onCancel: {
            let sender = state.withLock { s -> Sender? in
                guard let index = s.senders.firstIndex(where: { $0.id == id }) else { return nil }
                return s.senders.remove(at: index)
            }
            sender?.continuation.resume(throwing: Self.cancelledError("send"))
            // Removing a waiting sender can let the ones behind it in.
            admitWaitingSenders()
        }
    }

    /// Appends `element` if it can be admitted now. Returns `false` (and does not enqueue) when
    /// the queue is full or has suspended senders; throws like ``send(_:)`` when finished.
    @inlinable
    public func trySend(_ element: Element) throws -> Bool {
        let size = Swift.max(0, cost(element))
        let action: SendAction = state.withLock { s in
            if let end = s.end { return .fail(end.senderError) }
            if let receiver = s.receivers.popFirst() { return .handOff(receiver.continuation) }
            if s.senders.isEmpty && s.canAdmit(size, maxCount: maxCount, maxBytes: maxBytes) {
                s.buffer.append((element, size))
                s.bytes += size
                return .done
            }
            return .wait
        }
        switch action {
        case .done: return true
        case .wait: return false
        case .fail(let error): throw error
        case .handOff(let receiver):
            receiver.resume(returning: element)
            return true
        }
    }

    // MARK: Receiving

    /// Removes and returns the oldest element, suspending while the queue is empty. Returns
    /// `nil` once the queue finished cleanly and is drained; throws the finish error once it
    /// finished with one and is drained; throws `PeerSyncError.Code.cancelled` if the task is
    /// cancelled while waiting.
    @inlinable
    public func receive() async throws -> Element? {
        // Fast path: an element is buffered (the same first step as the slow path's).
        if let element = tryReceive() { return element }
        let id = state.withLock { $0.makeID() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Element?, any Error>) in
                let action: ReceiveAction = state.withLock { s in
                    if let (element, admitted) = s.takeFirst(maxCount: maxCount, maxBytes: maxBytes) {
                        return .element(element, admitted)
                    }
                    if let end = s.end {
                        if let error = end.error { return .fail(error) }
                        return .finished
                    }
                    if Task.isCancelled { return .fail(Self.cancelledError("receive")) }
                    s.receivers.append(Receiver(id: id, continuation: continuation))
                    return .wait
                }
                switch action {
                case .element(let element, let admitted):
                    for sender in admitted { sender.resume() }
                    continuation.resume(returning: element)
                case .finished: continuation.resume(returning: nil)
                case .fail(let error): continuation.resume(throwing: error)
                case .wait: break
                }
            }
        } onCancel: {
            let receiver = state.withLock { s -> Receiver? in
                guard let index = s.receivers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.receivers.remove(at: index)
            }
            receiver?.continuation.resume(throwing: Self.cancelledError("receive"))
        }
    }

    /// Removes and returns the oldest buffered element without waiting, or `nil` if none is
    /// buffered. Never throws; check ``isFinished`` to tell "empty" from "ended".
    @inlinable
    public func tryReceive() -> Element? {
        let taken = state.withLock { s in s.takeFirst(maxCount: maxCount, maxBytes: maxBytes) }
        guard let (element, admitted) = taken else { return nil }
        for sender in admitted { sender.resume() }
        return element
    }

    // MARK: Ending

    /// Ends the queue. With `error == nil`, receivers get the buffered elements and then `nil`;
    /// with an error, they get the buffered elements and then that error. With
    /// `discardingBuffered`, buffered elements are dropped first and returned, so the caller can
    /// dispose of them (e.g. close pending connections).
    ///
    /// Only the first call decides how the queue ended; a later call can still discard what is
    /// buffered. Suspended senders throw `error` (or `PeerSyncError.Code.connectionClosed`).
    @discardableResult
    public func finish(throwing error: (any Error)? = nil, discardingBuffered: Bool = false) -> [Element] {
        let (senders, receivers, end, discarded) = state.withLock { s in
            if s.end == nil { s.end = End(error: error) }
            var discarded: [Element] = []
            if discardingBuffered {
                discarded = s.buffer.drain().map(\.element)
                s.bytes = 0
            }
            let senders = s.senders.drain()
            let receivers = s.buffer.isEmpty ? s.receivers.drain() : []
            // `s.end` was set above (first call wins).
            return (senders, receivers, s.end ?? End(error: error), discarded)
        }
        for sender in senders { sender.continuation.resume(throwing: end.senderError) }
        for receiver in receivers {
            if let error = end.error {
                receiver.continuation.resume(throwing: error)
            } else {
                receiver.continuation.resume(returning: nil)
            }
        }
        return discarded
    }

    // MARK: Inspection

    /// The number of buffered elements.
    public var count: Int { state.withLock { $0.buffer.count } }
    /// The number of buffered bytes (sum of `cost`).
    public var byteCount: Int { state.withLock { $0.bytes } }
    /// Whether ``finish(throwing:discardingBuffered:)`` was called.
    public var isFinished: Bool { state.withLock { $0.end != nil } }
    /// The number of senders currently suspended waiting for room.
    public var waitingSenderCount: Int { state.withLock { $0.senders.count } }

    // MARK: Internals

    @usableFromInline
    func admitWaitingSenders() {
        let admitted = state.withLock { s in s.admitSenders(maxCount: maxCount, maxBytes: maxBytes) }
        for sender in admitted { sender.resume() }
    }

    @usableFromInline
    static func cancelledError(_ operation: String) -> PeerSyncError {
        PeerSyncError(.cancelled, "the task was cancelled", context: ["operation": operation])
    }

    @usableFromInline
    enum SendAction {
        case done, wait
        case fail(any Error)
        case handOff(CheckedContinuation<Element?, any Error>)
    }

    @usableFromInline
    enum ReceiveAction {
        case element(Element, [CheckedContinuation<Void, any Error>])
        case finished, wait
        case fail(any Error)
    }

    @usableFromInline
    struct Sender {
        @usableFromInline let id: UInt64
        @usableFromInline let element: Element
        @usableFromInline let size: Int
        @usableFromInline let continuation: CheckedContinuation<Void, any Error>

        @usableFromInline
        init(id: UInt64, element: Element, size: Int, continuation: CheckedContinuation<Void, any Error>) {
            self.id = id
            self.element = element
            self.size = size
            self.continuation = continuation
        }
    }

    @usableFromInline
    struct Receiver {
        @usableFromInline let id: UInt64
        @usableFromInline let continuation: CheckedContinuation<Element?, any Error>

        @usableFromInline
        init(id: UInt64, continuation: CheckedContinuation<Element?, any Error>) {
            self.id = id
            self.continuation = continuation
        }
    }

    @usableFromInline
    struct End {
        @usableFromInline let error: (any Error)?
        @usableFromInline var senderError: any Error {
            error ?? PeerSyncError(.connectionClosed, "the queue is finished", context: ["operation": "send"])
        }
    }

    @usableFromInline
    struct State {
        @usableFromInline var buffer = FIFO<(element: Element, size: Int)>()
        @usableFromInline var bytes = 0
        @usableFromInline var senders = FIFO<Sender>()
        @usableFromInline var receivers = FIFO<Receiver>()
        @usableFromInline var end: End?
        @usableFromInline var nextID: UInt64 = 0

        @inlinable
        mutating func makeID() -> UInt64 {
            nextID &+= 1
            return nextID
        }

        @inlinable
        func canAdmit(_ size: Int, maxCount: Int, maxBytes: Int) -> Bool {
            buffer.isEmpty || (buffer.count < maxCount && bytes <= maxBytes - size)
        }

        /// Moves waiting senders into the buffer while they fit; returns their continuations.
        @inlinable
        mutating func admitSenders(maxCount: Int, maxBytes: Int) -> [CheckedContinuation<Void, any Error>] {
            var admitted: [CheckedContinuation<Void, any Error>] = []
            while let first = senders.first, canAdmit(first.size, maxCount: maxCount, maxBytes: maxBytes) {
                _ = senders.popFirst()
                buffer.append((first.element, first.size))
                bytes += first.size
                admitted.append(first.continuation)
            }
            return admitted
        }

        @inlinable
        mutating func takeFirst(maxCount: Int, maxBytes: Int) -> (Element, [CheckedContinuation<Void, any Error>])? {
            guard let first = buffer.popFirst() else { return nil }
            bytes -= first.size
            return (first.element, admitSenders(maxCount: maxCount, maxBytes: maxBytes))
        }
    }
}

extension AsyncMessageQueue where Element == TransportMessage {
    /// A queue of transport messages limited by count and by payload bytes
    /// (``TransportMessage/byteCount``).
    public convenience init(maxCount: Int, maxBytes: Int) {
        self.init(maxCount: maxCount, maxBytes: maxBytes, cost: { $0.byteCount })
    }
}

extension AsyncMessageQueue: AsyncSequence {
    public typealias Failure = any Error

    /// Iterates with ``receive()`` until the queue ends.
    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let queue: AsyncMessageQueue
        public mutating func next() async throws -> Element? { try await queue.receive() }
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(any Error) -> Element? {
            try await queue.receive()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(queue: self) }
}

/// A simple array-backed FIFO with amortized O(1) removal from the front. Removed slots are
/// cleared at once, so the FIFO never keeps a popped element alive.
@usableFromInline
struct FIFO<T> {
    @usableFromInline var storage: [T?] = []
    @usableFromInline var head = 0

    @inlinable var count: Int { storage.count - head }
    @inlinable var isEmpty: Bool { head == storage.count }
    @inlinable var first: T? { isEmpty ? nil : storage[head] }

    @inlinable mutating func append(_ item: T) { storage.append(item) }

    @inlinable
    mutating func popFirst() -> T? {
        guard head < storage.count else { return nil }
        let item = storage[head]
        storage[head] = nil
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: storage.count <= 1024)
            head = 0
        } else if head >= 1024 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return item
    }

    @inlinable
    func firstIndex(where predicate: (T) -> Bool) -> Int? {
        var i = head
        while i < storage.count {
            if let item = storage[i], predicate(item) { return i - head }
            i += 1
        }
        return nil
    }

    @inlinable
    mutating func remove(at offset: Int) -> T? {
        storage.remove(at: head + offset)
    }

    mutating func drain() -> [T] {
        let items = storage[head...].compactMap { $0 }
        storage.removeAll()
        head = 0
        return items
    }
}
