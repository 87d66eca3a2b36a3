// Minimal reproduction: ThreadSanitizer on Linux reports data races on a value that is only
// ever touched inside `Synchronization.Mutex.withLock`, as soon as threads contend for the lock.
//
//   swiftc -sanitize=thread -g repro.swift -o repro
//   ./repro            Mutex                         -> races reported, yet the total is exact
//   ./repro nslock     same work under NSLock        -> no report
//   ./repro annotate   Mutex, plus __tsan_acquire / __tsan_release on a token at the start and
//                      end of each critical section  -> no report
//   clang -shared -fPIC Tools/sanitizers/tsan-mutex-shim.c -o shim.so -ldl
//   LD_PRELOAD=$PWD/shim.so ./repro                  -> no report (what Tools/test does)
//
// Why: Mutex's fast paths are inlined into the caller (an acquiring / releasing compare-exchange
// that TSan sees), but under contention `_lockSlow` / `_unlockSlow` in the uninstrumented
// libswiftSynchronization.so hand the lock over in the kernel (FUTEX_LOCK_PI / FUTEX_UNLOCK_PI
// write the new owner's TID into the lock word); TSan never sees that release -> acquire edge.
// `annotate` adds exactly that edge and nothing else, and the reports go away.
import Foundation
import Synchronization

@_silgen_name("__tsan_acquire") func tsanAcquire(_ addr: UnsafeMutableRawPointer)
@_silgen_name("__tsan_release") func tsanRelease(_ addr: UnsafeMutableRawPointer)

let mode = CommandLine.arguments.dropFirst().first ?? "mutex"
final class Box: @unchecked Sendable { var dict: [String: Int] = [:]; let lock = NSLock() }
let token = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)
nonisolated(unsafe) let edge = token
let mutex = Mutex<[String: Int]>([:])
let box = Box()
let threads = 4, rounds = 20_000
let group = DispatchGroup()
for t in 0..<threads {
    group.enter()
    Thread.detachNewThread {
        for i in 0..<rounds {
            let key = "k\((t * rounds + i) % 64)"
            switch mode {
            case "nslock":
                box.lock.lock(); box.dict[key, default: 0] += 1; box.lock.unlock()
            case "annotate":
                mutex.withLock { d in tsanAcquire(edge); d[key, default: 0] += 1; tsanRelease(edge) }
            default:
                mutex.withLock { $0[key, default: 0] += 1 }
            }
        }
        group.leave()
    }
}
group.wait()
let total = mode == "nslock" ? box.dict.values.reduce(0, +) : mutex.withLock { $0.values.reduce(0, +) }
print(mode, "total", total, "expected", threads * rounds)
