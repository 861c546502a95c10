/* Persistent worker threads for the host-int kernel (included by host_int_kernel.c).
 *
 * Why: starting and joining a pthread per call cost 24-29% of a 2-thread 1-row 4096 x 4096 call on
 * the Zen 4 VM with the workers awake between calls, ~10% when they must be woken from their sleep
 * (cold weights, A/B in alternating processes). That is more than the ~30-45 us of create + join; a
 * new thread also starts with cold caches, and may first run on its parent's core (not measured).
 *
 * How: workers are started on first need and never exit. A call bumps `gen` and broadcasts; each
 * worker runs its share if it takes part, then decrements `pending`; the caller runs share 0 and
 * spins until `pending` is 0, so no worker can lag into the next call. Between calls a worker spins
 * for SPIN_NS, yielding its core every few us, then sleeps on the condition variable: an idle
 * process holds no core. 2 ms because a verify's GEMMs come up to ~1 ms apart (the delta-net
 * recurrence runs between them): with 200 us the workers slept and woke for most calls, and a
 * 2-thread medium verify took 25-28 ms instead of 19-20 ms. One call at a time uses the pool (trylock); a concurrent call from another
 * thread, or a failure to start a worker, falls back to pthread_create / join (same bits: the split
 * is the same). After fork() the child starts with no workers (pthread_atfork).
 */
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#define SPIN_NS 2000000

typedef void (*pool_fn)(void *);

static struct {
    pthread_mutex_t lock;      /* held by the one call that uses the pool */
    pthread_mutex_t wake_lock; /* guards the sleep on `wake` */
    pthread_cond_t wake;
    _Atomic uint64_t gen;      /* bumped once per pooled call */
    _Atomic int pending;       /* workers that have not finished the current call */
    int nworkers;              /* started so far: ids 1..nworkers */
    int active;                /* workers 1..active run a share of the current call */
    pool_fn fn;
    char *jobs;                /* share i at jobs + i * job_size */
    size_t job_size;
    uint64_t start_gen[MAX_THREADS];
    int atfork;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake_lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *pool_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t seen = pool.start_gen[id], g;
    for (;;) {
        int64_t t0 = now_ns();
        for (int it = 1; (g = atomic_load_explicit(&pool.gen, memory_order_acquire)) == seen; it++) {
            _mm_pause();
            if ((it & 255) != 0) continue;
            sched_yield(); /* every few us: a runnable thread on this core (BLAS, say) goes first */
            if (now_ns() - t0 > SPIN_NS) {
                pthread_mutex_lock(&pool.wake_lock);
                while ((g = atomic_load_explicit(&pool.gen, memory_order_acquire)) == seen)
                    pthread_cond_wait(&pool.wake, &pool.wake_lock);
                pthread_mutex_unlock(&pool.wake_lock);
                break;
            }
        }
        seen = g;
        if (id <= pool.active) pool.fn(pool.jobs + (size_t)id * pool.job_size);
        atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
    }
    return NULL;
}

static void pool_after_fork_child(void) { /* the workers did not come along */
    pthread_mutex_init(&pool.lock, NULL);
    pthread_mutex_init(&pool.wake_lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
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
    atomic_store_explicit(&pool.pending, pool.nworkers, memory_order_relaxed);
    pthread_mutex_lock(&pool.wake_lock);
    atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.wake_lock);
    fn(jobs);
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) _mm_pause();
    pthread_mutex_unlock(&pool.lock);
    return 0;
}
