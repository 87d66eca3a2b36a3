// Makes ThreadSanitizer see the lock hand-over of a contended Synchronization.Mutex on Linux.
//
// Loaded with LD_PRELOAD by `Tools/test --sanitize thread` (built into the TSan scratch path).
//
// Why: Mutex's fast paths (an acquiring compare-exchange to lock, a releasing one to unlock) are
// inlined into our instrumented code, so TSan sees them. Under contention the inlined code calls
// `_MutexHandle._lockSlow(_:)`, `_tryLockSlow()` and `_unlockSlow()` in libswiftSynchronization.so,
// which is not instrumented: `_lockSlow` spins on a plain `lock cmpxchg` and then parks in
// FUTEX_LOCK_PI, `_unlockSlow` hands the lock to a waiter with FUTEX_UNLOCK_PI (the kernel writes
// the new owner's TID into the lock word). TSan never sees that release -> acquire edge and
// reports the values inside `withLock` as raced between the two owners — a false positive
// (reproduced by Tools/sanitizers/mutex-tsan-repro.swift: exact totals, no report under NSLock).
//
// What: wrappers with the same (exported, Swift-mangled) names that call the real function
// (dlsym RTLD_NEXT) and add exactly the missing edge on the lock word's address — the address
// the inlined fast paths' atomics already synchronize on: `__tsan_acquire` after a slow lock
// succeeds, `__tsan_release` before a slow unlock. Nothing else changes, so a real race (an
// access to the same data outside the lock) is still reported. Swift passes `self` (the lock
// word's address) in the `swiftself` register, hence `swiftcall` and `swift_context`; build with
// clang (the Swift toolchain's). `__tsan_*` are weak: in an uninstrumented child process (python,
// openssl, sqlite3 inherit LD_PRELOAD) the wrappers only forward.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SWIFTCALL __attribute__((swiftcall))
#define SELF __attribute__((swift_context))

#define LOCK_SLOW "$s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF"
#define TRY_LOCK_SLOW "$s15Synchronization12_MutexHandleV12_tryLockSlowSbyF"
#define UNLOCK_SLOW "$s15Synchronization12_MutexHandleV11_unlockSlowyyF"

extern void __tsan_acquire(void *addr) __attribute__((weak));
extern void __tsan_release(void *addr) __attribute__((weak));

typedef SWIFTCALL void (*lock_slow_fn)(uint32_t self_id, SELF void *handle);
typedef SWIFTCALL bool (*try_lock_slow_fn)(SELF void *handle);
typedef SWIFTCALL void (*unlock_slow_fn)(SELF void *handle);

// Resolved on first use (an uninstrumented child never calls them); racing first calls store
// the same pointer, atomically.
static void *next_symbol(void **cache, const char *name) {
    void *symbol = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (symbol) return symbol;
    symbol = dlsym(RTLD_NEXT, name);
    if (!symbol) {
        fprintf(stderr, "tsan-mutex-shim: %s not found after the shim (%s)\n", name, dlerror());
        abort();
    }
    __atomic_store_n(cache, symbol, __ATOMIC_RELEASE);
    return symbol;
}

SWIFTCALL void lock_slow(uint32_t self_id, SELF void *handle) __asm__(LOCK_SLOW);
SWIFTCALL void lock_slow(uint32_t self_id, SELF void *handle) {
    static void *cache;
    lock_slow_fn next = (lock_slow_fn)next_symbol(&cache, LOCK_SLOW);
    next(self_id, handle);
    if (__tsan_acquire) __tsan_acquire(handle);
}

SWIFTCALL bool try_lock_slow(SELF void *handle) __asm__(TRY_LOCK_SLOW);
SWIFTCALL bool try_lock_slow(SELF void *handle) {
    static void *cache;
    try_lock_slow_fn next = (try_lock_slow_fn)next_symbol(&cache, TRY_LOCK_SLOW);
    bool locked = next(handle);
    if (locked && __tsan_acquire) __tsan_acquire(handle);
    return locked;
}

SWIFTCALL void unlock_slow(SELF void *handle) __asm__(UNLOCK_SLOW);
SWIFTCALL void unlock_slow(SELF void *handle) {
    static void *cache;
    unlock_slow_fn next = (unlock_slow_fn)next_symbol(&cache, UNLOCK_SLOW);
    if (__tsan_release) __tsan_release(handle);
    next(handle);
}
