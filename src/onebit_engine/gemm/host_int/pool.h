/* Persistent worker threads for the host-int kernel (included by kernel.c, after run_job).
 *
 * Why: starting and joining a pthread per call cost 24-29% of a 2-thread 1-row 4096 x 4096 call with
 * the workers awake between calls, ~10% when they must be woken (more than the ~30-45 us of create +
 * join; a new thread also starts with cold caches).
 *
 * How: workers are started on first need and never exit. A call's work is a few jobs per thread
 * (team_t), each claimed by whichever thread is free. A call opens `call` (its generation, a closed bit
 * and the count of workers inside it), bumps `gen` and wakes sleeping workers. A worker that takes part
 * enters the call if it is still open, claims jobs until none are left and leaves; the caller claims
 * jobs too, then closes the call (no worker may enter any more) and waits for the workers inside it.
 * So a worker the scheduler keeps off its core holds up at most the job it is in, and one that wakes
 * after the caller took every job is not waited for at all.
 * Every wait is a bounded spin, then a futex sleep, so on a busy machine a waiting thread gives its
 * core to whoever can use it (a bare spin of the caller made 2-thread calls several times slower with
 * another process busy on both cores: docs/host-int.md, "The pool on a busy machine"):
 *  - the caller spins for at most CALLER_SPIN_NS, then sleeps on `done`, which the last worker to leave
 *    a closed call bumps;
 *  - a worker spins for at most SPIN_NS after a call, yielding its core every few us, then sleeps on
 *    `gen`. 2 ms because a verify's GEMMs come up to ~1 ms apart (the delta-net recurrence runs between
 *    them): with 200 us the workers slept and woke for most calls (a 2-thread medium verify took 25-28 ms
 *    instead of 19-20 ms). Any spin stops early once the thread finds it was kept off its core.
 * One call at a time uses the pool (trylock); a concurrent call from another thread, or a failure to
 * start a worker, runs the same team on threads of its own (same bits: the jobs are the same). After
 * fork() the child starts with no workers (pthread_atfork).
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
#define PREEMPTED_NS 100000
#define CALL_CLOSED (1ull << 31)
#define CALL_COUNT(c) ((c) & (CALL_CLOSED - 1))

typedef void (*pool_fn)(void *);

/* A call's work: njobs jobs, claimed one at a time. */
typedef struct {
    pool_fn fn;
    char *jobs; /* job i at jobs + i * job_size */
    size_t job_size;
    int njobs;
    _Atomic int next;
} team_t;

static void team_work(team_t *tm) {
    for (int i; (i = atomic_fetch_add(&tm->next, 1)) < tm->njobs;) tm->fn(tm->jobs + (size_t)i * tm->job_size);
}

static struct {
    pthread_mutex_t lock;     /* held by the one call that uses the pool */
    _Atomic uint32_t gen;     /* bumped once per pooled call; workers sleep on it */
    _Atomic uint64_t call;    /* [63:32] gen of the open call, bit 31 closed, [30:0] workers inside */
    _Atomic uint32_t done;    /* bumped when the last worker leaves a closed call; the caller sleeps on it */
    _Atomic int caller_waits; /* the caller may be asleep on done */
    _Atomic int sleepers;     /* workers asleep (or about to be) on gen */
    int nworkers;             /* started so far: ids 1..nworkers */
    int active;               /* workers 1..active take part in the open call */
    team_t *team;
    uint32_t start_gen[MAX_THREADS];
    int atfork;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) { /* returns at once if *addr != val */
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr) { syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spin while *addr == val for at most spin_ns (yielding every 256 pauses when `yield`); returns the
 * value that ended the spin, or val on timeout. A gap of PREEMPTED_NS between two looks at the clock
 * means another thread had this core meanwhile: the machine is busy, so stop spinning and sleep (a
 * spinning thread spends the CPU share the scheduler would give it back on its next wake-up). */
static uint32_t spin_while(_Atomic uint32_t *addr, uint32_t val, int64_t spin_ns, int yield) {
    int64_t t0 = now_ns(), last = t0;
    uint32_t v;
    for (int it = 1; (v = atomic_load_explicit(addr, memory_order_acquire)) == val; it++) {
        _mm_pause();
        if ((it & 255) != 0) continue;
        if (yield) sched_yield(); /* a runnable thread on this core (BLAS, say) goes first */
        int64_t t = now_ns();
        if (t - t0 > spin_ns || t - last > PREEMPTED_NS) break;
        last = t;
    }
    return v;
}

/* Enter call g if it is still open; 1 if entered. */
static int call_enter(uint32_t g) {
    uint64_t c = atomic_load(&pool.call);
    while ((uint32_t)(c >> 32) == g && !(c & CALL_CLOSED))
        if (atomic_compare_exchange_weak(&pool.call, &c, c + 1)) return 1;
    return 0;
}

static void call_leave(void) {
    uint64_t c = atomic_fetch_sub(&pool.call, 1) - 1;
    if ((c & CALL_CLOSED) && CALL_COUNT(c) == 0) {
        atomic_fetch_add(&pool.done, 1);
        if (atomic_load(&pool.caller_waits)) futex_wake(&pool.done);
    }
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
        if (call_enter(g)) { /* inside, the team and `active` are those of call g */
            if (id <= pool.active) team_work(pool.team);
            call_leave();
        }
    }
    return NULL;
}

static void *team_thread_main(void *arg) { /* a thread of its own, when the pool cannot be used */
    team_work((team_t *)arg);
    return NULL;
}

static void pool_after_fork_child(void) { /* the workers did not come along */
    pthread_mutex_init(&pool.lock, NULL);
    atomic_store(&pool.call, 0);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.caller_waits, 0);
    pool.nworkers = 0;
}

/* Run the team on this thread and t - 1 pooled workers; returns 0, or -1 if the pool is busy or could
 * not start its workers (nothing was run then). */
static int pool_run(team_t *team, int t) {
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
    uint32_t g = atomic_load(&pool.gen) + 1;
    pool.team = team;
    pool.active = t - 1;
    atomic_store(&pool.call, (uint64_t)g << 32); /* open, nobody inside (every earlier call is closed and empty) */
    atomic_store(&pool.gen, g);
    if (atomic_load(&pool.sleepers) > 0) futex_wake(&pool.gen);
    team_work(team);
    uint64_t c = atomic_fetch_or(&pool.call, CALL_CLOSED) | CALL_CLOSED;
    while (CALL_COUNT(c) != 0) { /* workers still inside a job */
        uint32_t d = atomic_load(&pool.done);
        if (CALL_COUNT(c = atomic_load(&pool.call)) == 0) break;
        if (spin_while(&pool.done, d, CALLER_SPIN_NS, 0) == d) {
            atomic_store(&pool.caller_waits, 1);
            if (CALL_COUNT(atomic_load(&pool.call)) != 0) futex_wait(&pool.done, d); /* the last to leave wakes us */
            atomic_store(&pool.caller_waits, 0);
        }
        c = atomic_load(&pool.call);
    }
    pthread_mutex_unlock(&pool.lock);
    return 0;
}

/* The team on t threads: the pool, or, when another call holds it, threads of our own. */
static void team_run(team_t *team, int t) {
    if (pool_run(team, t) == 0) return;
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 1; i < t; i++) started[i] = pthread_create(&tid[i], NULL, team_thread_main, team) == 0;
    team_work(team); /* also takes the jobs of any thread that could not start */
    for (int i = 1; i < t; i++)
        if (started[i]) pthread_join(tid[i], NULL);
}
