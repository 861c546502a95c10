/* Persistent worker threads for the host-int kernel (included by host_int_kernel.c).
 *
 * Why: starting and joining a pthread per call cost 24-29% of a 2-thread 1-row 4096 x 4096 call with
 * the workers awake between calls, ~10% when they must be woken (more than the ~30-45 us of create +
 * join; a new thread also starts with cold caches).
 *
 * How: workers are started on first need and never exit. A call bumps `gen` and wakes sleepers; each
 * worker runs its share if it takes part, then decrements `pending`; the caller runs share 0 and waits
 * until `pending` is 0, so no worker can lag into the next call. Every wait is a bounded spin, then a
 * futex sleep, so on a busy machine a waiting thread gives its core to whoever can use it (a bare
 * spin of the caller made 2-thread calls 10-20x slower with another process busy on both cores:
 * docs/host-int.md, "The pool on a busy machine"):
 *  - the caller spins for at most CALLER_SPIN_NS (its workers normally finish within a few us of it),
 *    then sleeps on `pending`; the last worker to finish wakes it;
 *  - a worker spins for at most SPIN_NS after a call, yielding its core every few us, then sleeps on
 *    `gen`. 2 ms because a verify's GEMMs come up to ~1 ms apart (the delta-net recurrence runs between
 *    them): with 200 us the workers slept and woke for most calls (a 2-thread medium verify took 25-28 ms
 *    instead of 19-20 ms).
 * One call at a time uses the pool (trylock); a concurrent call from another thread, or a failure to
 * start a worker, falls back to pthread_create / join (same bits: the split is the same). After fork()
 * the child starts with no workers (pthread_atfork).
 */
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 2000000
#define CALLER_SPIN_NS 50000

typedef void (*pool_fn)(void *);

static struct {
    pthread_mutex_t lock;  /* held by the one call that uses the pool */
    _Atomic uint32_t gen;  /* bumped once per pooled call; workers sleep on it */
    _Atomic int sleepers;  /* workers asleep (or about to be) on gen */
    _Atomic uint32_t pending; /* workers that have not finished the current call; the caller sleeps on it */
    _Atomic int caller_waits; /* the caller may be asleep on pending */
    int nworkers;          /* started so far: ids 1..nworkers */
    int active;            /* workers 1..active run a share of the current call */
    pool_fn fn;
    char *jobs;            /* share i at jobs + i * job_size */
    size_t job_size;
    uint32_t start_gen[MAX_THREADS];
    int atfork;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) { /* returns at once if *addr != val */
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n) { syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0); }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spin while *addr == val for at most spin_ns (yielding every 256 pauses when `yield`); returns the
 * value that ended the spin, or val on timeout. */
static uint32_t spin_while(_Atomic uint32_t *addr, uint32_t val, int64_t spin_ns, int yield) {
    int64_t t0 = now_ns();
    uint32_t v;
    for (int it = 1; (v = atomic_load_explicit(addr, memory_order_acquire)) == val; it++) {
        _mm_pause();
        if ((it & 255) != 0) continue;
        if (yield) sched_yield(); /* a runnable thread on this core (BLAS, say) goes first */
        if (now_ns() - t0 > spin_ns) break;
    }
    return v;
}

static void *pool_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint32_t seen = pool.start_gen[id], g;
    for (;;) {
        while ((g = spin_while(&pool.gen, seen, SPIN_NS, 1)) == seen) {
            atomic_fetch_add(&pool.sleepers, 1);
            futex_wait(&pool.gen, seen); /* the caller wakes the sleepers after bumping gen */
            atomic_fetch_sub(&pool.sleepers, 1);
        }
        seen = g;
        if (id <= pool.active) pool.fn(pool.jobs + (size_t)id * pool.job_size);
        if (atomic_fetch_sub(&pool.pending, 1) == 1 && atomic_load(&pool.caller_waits)) futex_wake(&pool.pending, 1);
    }
    return NULL;
}

static void *pool_thread_main(void *arg) { /* a thread of its own, when the pool cannot be used */
    run_job(arg);
    return NULL;
}

static void pool_after_fork_child(void) { /* the workers did not come along */
    pthread_mutex_init(&pool.lock, NULL);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.caller_waits, 0);
    pool.nworkers = 0;
}

/* Run fn on shares 0..t-1 of `jobs` (share 0 on this thread); returns 0, or -1 if the pool is busy
 * or could not start its workers (nothing was run then). */
static int pool_run(pool_fn fn, void *jobs, size_t job_size, int t) {
    if (pthread_mutex_trylock(&pool.lock)) return -1;
    if (!pool.atfork) pool.atfork = pthread_atfork(NULL, NULL, pool_after_fork_child) == 0 ? 1 : -1;
    while (pool.nworkers < t - 1) {
        int id = pool.nworkers + 1;
        pool.start_gen[id] = atomic_load(&pool.gen);
        pthread_t tid;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&tid, &attr, pool_worker, (void *)(intptr_t)id);
        pthread_attr_destroy(&attr);
        if (rc) break;
        pool.nworkers = id;
    }
    if (pool.nworkers < t - 1) {
        pthread_mutex_unlock(&pool.lock);
        return -1;
    }
    pool.fn = fn;
    pool.jobs = (char *)jobs;
    pool.job_size = job_size;
    pool.active = t - 1;
    atomic_store(&pool.pending, (uint32_t)pool.nworkers);
    atomic_fetch_add(&pool.gen, 1);
    if (atomic_load(&pool.sleepers) > 0) futex_wake(&pool.gen, INT_MAX);
    fn(jobs);
    for (uint32_t p; (p = atomic_load(&pool.pending)) != 0;) {
        if (spin_while(&pool.pending, p, CALLER_SPIN_NS, 0) != p) continue; /* one finished: spin anew */
        atomic_store(&pool.caller_waits, 1);
        futex_wait(&pool.pending, p); /* the last worker to finish wakes us */
        atomic_store(&pool.caller_waits, 0);
    }
    pthread_mutex_unlock(&pool.lock);
    return 0;
}
