/* host-int native kernel: the device numerics contract (docs/CONTRACTS.md) for one skinny GEMM call.
 *
 * Twins (bitwise, tested): onebit_engine.quant.activations.quantize_rows,
 * onebit_engine.gemm.host_int.int_kernels.matmul_int_reference, onebit_engine.quant.activations.dequantize_acc;
 * the tile layout's twin is onebit_engine.gemm.host_int.layout. Built by onebit_engine/gemm/host_int/native.py
 * with `python -m ziglang cc -O2 -mavx2 -ffp-contract=off` together with avx2.c and
 * vnni.c (whose AVX-512 functions carry their own target attribute).
 *
 * One call: quantize the rows (quant.h), lay them out for broadcasts (tiles.h), run
 * the path's tile function over every tile of output channels, K block and row block, then the epilogue
 * y = ((float)(acc + ccorr[n] - BIAS * sum(xq[r])) * sa[r]) * sw[n] (two float32 multiplies, no
 * contraction possible). All sums are integers modulo 2^32 whose final value fits int32 (K <= 133144 is
 * checked by the caller), so the result cannot depend on the path, the summation order, the K or row
 * blocking, the thread split or the other rows.
 *
 * The path runs only where cpuid and xgetbv (read here, at run time) say the CPU and OS support it.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "numpy_data.h"
#include "quant.h"
#include "tiles.h"

#define MAX_ROWS 16
#define MAX_THREADS 64
#define MAX_JOBS 256
/* Default K blocks, per path: none (avx2: blocks holding 16 KiB of activations were 1-7% slower at 8 and
 * 16 rows on 4096 x 4096, shuffled A/B on Zen 3; vnni: 16 KiB blocks made 8-row calls 20-30% slower than
 * one pass on Zen 5, cold 4096 x 4096 and 17408 x 5120, int8 and int4: the weight stream stays sequential). */
static const int64_t KB_ACT_BYTES[2] = {0, 0};

static const int CPB[3] = {1, 2, 4};              /* codes per packed byte */
static const int BIAS[2][3] = {{0, 8, 1}, {128, 8, 1}}; /* [path][fmt]: stored field = code + BIAS */
static const int TILE_W[2] = {8, 16};             /* channels per tile */
static const int ROW_BLOCK[2] = {8, 16};          /* rows held in registers per pass */

/* A packed weight as Python's host_int_layout.TiledWeight hands it over (one ctypes struct per weight). */
typedef struct {
    int32_t path, fmt;
    int64_t n, k, steps;  /* steps: S per tile */
    const uint8_t *tiles; /* [ceil(n / T)][S][T][4] */
    const int32_t *ccorr; /* [ceil(n / T) * T] added per channel (AVX2 int8: sum |w| over w < 0, for the rows of
                           * blocks of 2+ rows: the xor form), or NULL */
    const float *sw;      /* [n] */
} hi_weight_t;

typedef struct {
    const hi_weight_t *w;
    tile_fn fn;
    int64_t m, kb, T, rb, cpb;
    const int8_t *xs;       /* row blocks of rb rows, block at xs + r0 * G * 4 (G = S * cpb groups) */
    const int32_t *rowcorr; /* [m] BIAS * sum(xq[r]) */
    const float *sa;        /* [m]; NULL -> write int32 acc instead of float y */
    float *y;
    int32_t *acc;
    int32_t *scratch;       /* [tiles][m][T] partial sums, when K is blocked */
    int64_t t0, t1;         /* tiles of this job */
} job_t;

/* ---- CPU features, read at run time -------------------------------------------------------------- */
#define CPU_OSXSAVE (1u << 0)   /* cpuid 1 ECX bit 27 */
#define CPU_AVX (1u << 1)       /* cpuid 1 ECX bit 28 */
#define CPU_XCR0_YMM (1u << 2)  /* XCR0 bits 1, 2: SSE and AVX state enabled by the OS */
#define CPU_XCR0_ZMM (1u << 3)  /* XCR0 bits 5, 6, 7: opmask, ZMM_Hi256, Hi16_ZMM state */
#define CPU_AVX2 (1u << 4)      /* cpuid 7.0 EBX bit 5 */
#define CPU_AVX512F (1u << 5)   /* cpuid 7.0 EBX bit 16 */
#define CPU_AVX512BW (1u << 6)  /* cpuid 7.0 EBX bit 30 */
#define CPU_AVX512VL (1u << 7)  /* cpuid 7.0 EBX bit 31 */
#define CPU_AVX512VNNI (1u << 8) /* cpuid 7.0 ECX bit 11 */
#define NEED_AVX2 (CPU_OSXSAVE | CPU_AVX | CPU_XCR0_YMM | CPU_AVX2)
#define NEED_VNNI (NEED_AVX2 | CPU_XCR0_ZMM | CPU_AVX512F | CPU_AVX512BW | CPU_AVX512VL | CPU_AVX512VNNI)

static uint32_t xcr0_low(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return lo;
}

static unsigned read_cpu_flags(void);

/* The CPU's feature bits, read once: on a VM each cpuid leaves the guest (~12 us for the leaves below, which
 * delta.c's per-call check paid on every call of a step until it was cached here). A race only reads the same
 * value twice. */
unsigned onebit_hi_cpu_flags(void) {
    static unsigned flags = ~0u;
    if (flags == ~0u) flags = read_cpu_flags();
    return flags;
}

static unsigned read_cpu_flags(void) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (c & (1u << 27)) f |= CPU_OSXSAVE;
    if (c & (1u << 28)) f |= CPU_AVX;
    if (f & CPU_OSXSAVE) { /* xgetbv faults unless the OS enabled it */
        uint32_t x = xcr0_low();
        if ((x & 0x06u) == 0x06u) f |= CPU_XCR0_YMM;
        if ((x & 0xE6u) == 0xE6u) f |= CPU_XCR0_ZMM;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (b & (1u << 5)) f |= CPU_AVX2;
        if (b & (1u << 16)) f |= CPU_AVX512F;
        if (b & (1u << 30)) f |= CPU_AVX512BW;
        if (b & (1u << 31)) f |= CPU_AVX512VL;
        if (c & (1u << 11)) f |= CPU_AVX512VNNI;
    }
    return f;
}

/* The raw evidence for describe(): cpuid 7.0 EBX, 7.0 ECX, 7.1 EAX and XCR0 (low word; 0 without OSXSAVE). */
void onebit_hi_cpu_regs(uint32_t out[4]) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    memset(out, 0, 4 * sizeof(uint32_t));
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) out[0] = b, out[1] = c;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) out[2] = a;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) out[3] = xcr0_low();
}

/* 1 if `path` can run here. The emulated VNNI library runs its path wherever AVX2 runs. */
int onebit_hi_path_ok(int path) {
    const unsigned flags = onebit_hi_cpu_flags();
    if (path == PATH_AVX2) return (flags & NEED_AVX2) == NEED_AVX2;
    if (path == PATH_VNNI) {
        unsigned need = onebit_hi_vnni_emulated() ? NEED_AVX2 : NEED_VNNI;
        return (flags & need) == need;
    }
    return 0;
}

int onebit_hi_abi_version(void) { return 6; } /* 3: tile_block, read_stream; 4: matmul_many; 5: delta_heads; 6: its threads */

/* ---- the tiled product ---------------------------------------------------------------------------- */
/* 8 channels at a time (a scalar loop was ~8% of the instructions of an 8-row call at K = 768); a partial
 * last tile uses masked loads and stores, so nothing past sw[n - 1] or row r's outputs is touched.
 * vcvtdq2ps rounds like the scalar (float) cast, and the two multiplies stay separate (-ffp-contract=off). */
static void epilogue(const job_t *j, int64_t t, const int32_t *acc) {
    const hi_weight_t *W = j->w;
    int64_t n0 = t * j->T, nn = W->n - n0 < j->T ? W->n - n0 : j->T;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = 0; c < nn; c += 8) {
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nn - c)), lane);
        int full = nn - c >= 8;
        __m256i cc = W->ccorr ? _mm256_loadu_si256((const __m256i *)(W->ccorr + n0 + c)) : _mm256_setzero_si256();
        __m256 sw = full ? _mm256_loadu_ps(W->sw + n0 + c) : _mm256_maskload_ps(W->sw + n0 + c, mask);
        for (int64_t r = 0; r < j->m; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(acc + r * j->T + c));
            if (j->m - (r - r % j->rb) > 1) v = _mm256_add_epi32(v, cc); /* not for a 1-row block (see ccorr) */
            v = _mm256_sub_epi32(v, _mm256_set1_epi32(j->rowcorr[r]));
            if (j->sa) {
                __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(j->sa[r])), sw);
                float *y = j->y + r * W->n + n0 + c;
                if (full) _mm256_storeu_ps(y, f);
                else _mm256_maskstore_ps(y, mask, f);
            } else {
                int32_t *o = j->acc + r * W->n + n0 + c;
                if (full) _mm256_storeu_si256((__m256i *)o, v);
                else _mm256_maskstore_epi32(o, mask, v);
            }
        }
    }
}

/* K blocks outermost, then tiles, then row blocks: a tile's run of one K block is read once from memory
 * and, for a second row block, again from L1/L2. */
static void run_job(void *arg) {
    const job_t *j = (const job_t *)arg;
    const hi_weight_t *W = j->w;
    int64_t S = W->steps, vb = 4 * j->T, G = S * j->cpb, nkb = S > 0 ? (S + j->kb - 1) / j->kb : 1; /* K = 0: acc = 0 */
    int32_t local[MAX_ROWS * 16];
    for (int64_t kbi = 0; kbi < nkb; kbi++) {
        int64_t s0 = kbi * j->kb, s1 = s0 + j->kb < S ? s0 + j->kb : S;
        for (int64_t t = j->t0; t < j->t1; t++) {
            int32_t *acc = nkb == 1 ? local : j->scratch + t * j->m * j->T;
            const uint8_t *wt = W->tiles + (t * S + s0) * vb;
            const uint8_t *next = t + 1 < j->t1 ? wt + S * vb : W->tiles + (j->t0 * S + s1) * vb;
            for (int64_t r0 = 0; r0 < j->m; r0 += j->rb) {
                int R = (int)(j->m - r0 < j->rb ? j->m - r0 : j->rb);
                j->fn(W->fmt, R, wt, s1 - s0, next, j->xs + r0 * G * 4 + s0 * j->cpb * R * 4, acc + r0 * j->T, kbi == 0);
            }
            if (kbi == nkb - 1) epilogue(j, t, acc);
        }
    }
}

/* Threads actually used: at most `threads`, and only when each gets about 20 us of work or more (waking
 * a pooled worker costs up to tens of us when it sleeps). Work is counted in bytes of a 1-row weight
 * stream (256 KiB per thread, ~20 us here) or, when larger, in multiply-adds: MACS_PER_BYTE[path][fmt]
 * MACs take the time of one streamed byte (avx2, 1 thread: ~14 bytes/ns at 1 row; ~60 / 100 / 120 MACs/ns
 * int8 / int4 / ternary at 8 rows; vnni: a guess, not measured). By bytes alone the int4 and ternary
 * layers of the medium config ran their compute-bound 8-row calls on one thread. Bits do not depend on it. */
static const int64_t MACS_PER_BYTE[2][3] = {{4, 7, 8}, {16, 16, 16}};
#define BYTES_PER_THREAD (256 * 1024)
static int64_t work_of(const job_t *j, int64_t tiles) { /* in streamed bytes */
    int64_t bytes = tiles * j->w->steps * 4 * j->T, macs = bytes * j->cpb * j->m;
    int64_t work = macs / MACS_PER_BYTE[j->w->path][j->w->fmt];
    return work > bytes ? work : bytes;
}
static int64_t threads_for(const job_t *j, int64_t tiles, int threads) {
    int64_t t = work_of(j, tiles) / BYTES_PER_THREAD;
    if (t > threads) t = threads;
    if (t > tiles) t = tiles;
    if (t > MAX_THREADS) t = MAX_THREADS;
    return t < 1 ? 1 : t;
}

#include "pool.h"

/* Jobs of decreasing size, claimed as threads come free (guided: each takes 1/(2t) of the tiles not yet
 * handed out, at least MIN_JOB_TILES and 1/128 of all, so there are at most ~128 + 2t ln 64 jobs): the
 * threads finish close together, and on a busy machine a thread the scheduler keeps waiting holds up a
 * small job, not half the call. Job i is tiles [b[i], b[i + 1]); returns the job count (1 on one thread). */
#define MIN_JOB_TILES 4
static int64_t plan_jobs(int64_t tiles, int64_t t, int64_t b[MAX_JOBS + 1]) {
    int64_t nj = 0, least = tiles / 128 > MIN_JOB_TILES ? tiles / 128 : MIN_JOB_TILES;
    b[0] = 0;
    for (int64_t t0 = 0; t0 < tiles || nj == 0; nj++) {
        int64_t n = t == 1 ? tiles : (tiles - t0) / (2 * t);
        if (t > 1 && n < least) n = least;
        if (nj == MAX_JOBS - 1 || t0 + n > tiles) n = tiles - t0;
        b[nj + 1] = t0 += n;
    }
    return nj;
}

static void run_all(job_t *base, int64_t tiles, int threads) {
    int64_t t = threads_for(base, tiles, threads), b[MAX_JOBS + 1], nj = plan_jobs(tiles, t, b);
    if (t == 1) {
        base->t0 = 0;
        base->t1 = tiles;
        run_job(base);
        return;
    }
    job_t jobs[MAX_JOBS];
    for (int64_t i = 0; i < nj; i++) {
        jobs[i] = *base;
        jobs[i].t0 = b[i];
        jobs[i].t1 = b[i + 1];
    }
    team_t team = {run_job, (char *)jobs, sizeof(job_t), (int)nj, 0};
    team_run(&team, (int)t);
}

/* delta.c's value heads as a team of njobs independent jobs on up to t threads of the pool (t = 1: in turn on
 * this thread). Each job writes only its own head, so the bits do not depend on t. */
void onebit_hi_team(void (*fn)(void *), void *jobs, size_t job_size, int njobs, int t) {
    if (t > MAX_THREADS) t = MAX_THREADS;
    if (t > njobs) t = njobs;
    team_t team = {fn, (char *)jobs, job_size, njobs, 0};
    if (t <= 1) team_work(&team);
    else team_run(&team, t);
}

/* For the tests: the threads and jobs a call of m rows would use, out = {threads, jobs, tiles of job 0,
 * tiles of the last job}; returns 0, or -2 on a bad argument. */
int onebit_hi_plan(const hi_weight_t *W, int64_t m, int threads, int64_t out[4]) {
    if (!W || W->path < 0 || W->path > 1 || W->fmt < 0 || W->fmt > 2 || m < 1 || m > MAX_ROWS || threads < 1) return -2;
    int64_t T = TILE_W[W->path], tiles = (W->n + T - 1) / T, b[MAX_JOBS + 1];
    job_t j = {W, NULL, m, 0, T, ROW_BLOCK[W->path], CPB[W->fmt]};
    out[0] = threads_for(&j, tiles, threads);
    out[1] = plan_jobs(tiles, out[0], b);
    out[2] = b[1] - b[0];
    out[3] = b[out[1]] - b[out[1] - 1];
    return 0;
}

/* ---- per-call buffers: one per calling thread, kept (malloc per call cost several us on small layers) */
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static void buf_key_init(void) { pthread_key_create(&buf_key, free); }

static void *call_buffer(size_t need) {
    pthread_once(&buf_once, buf_key_init);
    size_t *b = (size_t *)pthread_getspecific(buf_key);
    if (b && b[0] >= need) return b + 8;
    free(b);
    b = (size_t *)malloc(need + 8 * sizeof(size_t));
    pthread_setspecific(buf_key, b);
    if (!b) return NULL;
    b[0] = need;
    return b + 8; /* 64 bytes in: malloc's alignment kept */
}

/* Row r's codes q (G * 4 bytes, zero padded) into its row block: group g at (g * R + i) * 4. */
static void place_row(const int8_t *q, int64_t G, int8_t *xs, int64_t r, int64_t m, int64_t rb) {
    int64_t r0 = r - r % rb, R = m - r0 < rb ? m - r0 : rb, i = r % rb;
    int8_t *dst = xs + r0 * G * 4;
    if (R == 1) {
        memcpy(dst, q, (size_t)(G * 4));
        return;
    }
    for (int64_t g = 0; g < G; g++) memcpy(dst + (g * R + i) * 4, q + 4 * g, 4);
}

static int32_t sum_codes(const int8_t *q, int64_t k) {
    int32_t s = 0;
    for (int64_t i = 0; i < k; i++) s += q[i];
    return s;
}

static int bad_args(const hi_weight_t *W, int64_t m) {
    return !W || W->path < 0 || W->path > 1 || W->fmt < 0 || W->fmt > 2 || m < 1 || m > MAX_ROWS;
}

/* Quantize x float32 [m, k] (or copy the codes xq int8 [m, k]) into the row blocks at xs (m * G * 4 bytes),
 * q a scratch row of G * 4 + 64 bytes; fills rowcorr and sa. Returns 0, or -1 - r if row r is not finite. */
static int place_rows(const hi_weight_t *W, const float *x, const int8_t *xq, int64_t m, int8_t *xs, int8_t *q,
                      int32_t *rowcorr, float *sa) {
    int64_t k = W->k, G = W->steps * CPB[W->fmt];
    for (int64_t r = 0; r < m; r++) {
        if (xq) memcpy(q, xq + r * k, (size_t)k);
        else if (quantize_row(x + r * k, k, q, &sa[r])) return (int)(-1 - r);
        memset(q + k, 0, (size_t)(G * 4 - k));
        place_row(q, G, xs, r, m, ROW_BLOCK[W->path]);
        rowcorr[r] = BIAS[W->path][W->fmt] * sum_codes(q, k);
    }
    return 0;
}

static tile_fn path_fn(const hi_weight_t *W) { return W->path == PATH_VNNI ? onebit_hi_vnni_tile : onebit_hi_avx2_tile; }

/* x float32 [m, k] (or, when xq is set, the codes xq int8 [m, k]) -> y float32 [m, n] (or acc int32).
 * kb: steps per K block, 0 for the default. Returns 0; -1 - r if row r is not finite (nothing written);
 * -2 on a bad argument; -3 if out of memory; -4 if the CPU cannot run the weight's path. */
static int run(const hi_weight_t *W, const float *x, const int8_t *xq, int64_t m, float *y, int32_t *acc,
               int threads, int64_t kb) {
    if (bad_args(W, m) || threads < 1 || kb < 0) return -2;
    if (!onebit_hi_path_ok(W->path)) return -4;
    int64_t T = TILE_W[W->path], cpb = CPB[W->fmt], S = W->steps, G = S * cpb, tiles = (W->n + T - 1) / T;
    if (kb == 0) kb = KB_ACT_BYTES[W->path] ? KB_ACT_BYTES[W->path] / (m * cpb * 4) : S;
    if (kb < 1) kb = 1;
    int64_t nkb = S > 0 ? (S + kb - 1) / kb : 1;
    size_t xs_bytes = (size_t)(m * G * 4), q_bytes = (size_t)(G * 4 + 64);
    size_t scratch_bytes = nkb > 1 ? (size_t)(tiles * m * T) * sizeof(int32_t) : 0;
    char *buf = (char *)call_buffer(scratch_bytes + xs_bytes + q_bytes);
    if (!buf) return -3;
    int32_t *scratch = (int32_t *)buf;
    int8_t *xs = (int8_t *)(buf + scratch_bytes), *q = xs + xs_bytes;
    int32_t rowcorr[MAX_ROWS];
    float sa[MAX_ROWS];
    int rc = place_rows(W, x, xq, m, xs, q, rowcorr, sa);
    if (rc) return rc;
    job_t job = {W, path_fn(W), m, kb, T, ROW_BLOCK[W->path], cpb, xs, rowcorr, xq ? NULL : sa, y, acc, scratch, 0, tiles};
    run_all(&job, tiles, threads);
    return 0;
}

/* Several products in one pooled call: product i is W[i] on x[i] float32 [m[i], k_i] -> y[i] [m[i], n_i], each
 * row set quantized and laid out as a call of its own would, each in one K pass (the default of both paths).
 * Why: the routed experts of a MoE layer are 8-10 small products a token; a pooled call each paid the pool's
 * wake and join every time. The jobs are tile ranges of the products, so the bits are a call each's (tested).
 * x, y: numpy array objects when data_off >= 0, as for onebit_hi_matmul. Returns 0; -16 - i if a row of x[i] is
 * not finite (nothing of that product written); -2 on a bad argument; -3 if out of memory; -4 as above. */
#define MAX_MANY 64
int onebit_hi_matmul_many(const hi_weight_t *const *W, const char *const *x, const int64_t *m, char *const *y,
                          int count, int threads, int64_t data_off) {
    if (count < 1 || count > MAX_MANY || threads < 1) return -2;
    size_t off[MAX_MANY + 1], q_bytes = 64;
    int64_t tiles[MAX_MANY], total = 0, work = 0;
    off[0] = 0;
    for (int i = 0; i < count; i++) {
        if (bad_args(W[i], m[i])) return -2;
        if (!onebit_hi_path_ok(W[i]->path)) return -4;
        int64_t T = TILE_W[W[i]->path], G = W[i]->steps * CPB[W[i]->fmt];
        tiles[i] = (W[i]->n + T - 1) / T;
        total += tiles[i];
        off[i + 1] = off[i] + (size_t)(m[i] * G * 4 + 64) / 64 * 64;
        if ((size_t)(G * 4 + 64) > q_bytes) q_bytes = (size_t)(G * 4 + 64);
        job_t one = {W[i], NULL, m[i], 0, T, 0, CPB[W[i]->fmt]};
        work += work_of(&one, tiles[i]);
    }
    char *buf = (char *)call_buffer(off[count] + q_bytes + (size_t)count * MAX_ROWS * (sizeof(int32_t) + sizeof(float)));
    if (!buf) return -3;
    int8_t *q = (int8_t *)(buf + off[count]);
    int32_t *rowcorr = (int32_t *)(buf + off[count] + q_bytes);
    float *sa = (float *)(rowcorr + count * MAX_ROWS);
    int64_t t = work / BYTES_PER_THREAD;
    t = t < threads ? t : threads;
    t = t < total ? t : total;
    t = t < MAX_THREADS ? t : MAX_THREADS;
    if (t < 1) t = 1;
    /* equal tile ranges small enough that the threads finish close together, few enough for MAX_JOBS */
    int64_t chunk = t == 1 ? total : total / (8 * t);
    int64_t least = (total + MAX_JOBS - count - 1) / (MAX_JOBS - count);
    if (chunk < MIN_JOB_TILES) chunk = MIN_JOB_TILES;
    if (chunk < least) chunk = least;
    job_t jobs[MAX_JOBS];
    const float *xps[MAX_MANY];
    int nj = 0;
    for (int i = 0; i < count; i++) {
        const float *xp = xps[i] = (const float *)numpy_data(x[i], data_off);
        float *yp = (float *)numpy_data(y[i], data_off);
        /* an input an earlier product of the same path, format and shape already placed is not quantized again
         * (a MoE token's routed experts, shared expert and its gate all read the same row): the same codes */
        int src = i;
        for (int j = 0; j < i && src == i; j++)
            if (xps[j] == xp && m[j] == m[i] && W[j]->k == W[i]->k && W[j]->path == W[i]->path && W[j]->fmt == W[i]->fmt)
                src = j;
        int8_t *xs = (int8_t *)(buf + off[src]);
        if (src == i && place_rows(W[i], xp, NULL, m[i], xs, q, rowcorr + i * MAX_ROWS, sa + i * MAX_ROWS))
            return -16 - i;
        job_t base = {W[i], path_fn(W[i]), m[i], W[i]->steps > 0 ? W[i]->steps : 1, TILE_W[W[i]->path],
                      ROW_BLOCK[W[i]->path], CPB[W[i]->fmt], xs, rowcorr + src * MAX_ROWS, sa + src * MAX_ROWS, yp, NULL,
                      NULL, 0, 0};
        for (int64_t t0 = 0; t0 < tiles[i]; t0 += chunk) {
            jobs[nj] = base;
            jobs[nj].t0 = t0;
            jobs[nj++].t1 = t0 + chunk < tiles[i] ? t0 + chunk : tiles[i];
        }
    }
    if (t == 1) {
        for (int i = 0; i < nj; i++) run_job(&jobs[i]);
        return 0;
    }
    team_t team = {run_job, (char *)jobs, sizeof(job_t), nj, 0};
    team_run(&team, (int)t);
    return 0;
}

/* The whole contract. x and y are numpy array objects when data_off >= 0 (their data pointer is read at
 * that offset of the object: no per-call ctypes objects, see native.py), else plain pointers. */
int onebit_hi_matmul(const hi_weight_t *W, const char *x, int64_t m, char *y, int threads, int64_t kb,
                     int64_t data_off) {
    const float *xp = (const float *)numpy_data(x, data_off);
    float *yp = (float *)numpy_data(y, data_off);
    return run(W, xp, NULL, m, yp, NULL, threads, kb);
}

/* The exact integer product of codes xq int8 [m, k] (natural order) -> acc int32 [m, n]. */
int onebit_hi_gemm_int(const hi_weight_t *W, const int8_t *xq, int64_t m, int32_t *acc, int threads, int64_t kb) {
    return run(W, NULL, xq, m, NULL, acc, threads, kb);
}

/* ---- the read stream: the bound of a kernel that only reads its weights ------------------------------ */
/* Reads n bytes once, 64 at a time, prefetching as the tile kernels do, on `threads` pooled threads (the
 * same pool, so the same threads a GEMM call gets); returns the OR of every byte (so no read is elided).
 * Its twin is numpy's bitwise_or.reduce (measure/membw.py). Time it to get memory bandwidth as this
 * library can use it: numpy's own reductions do not reach it on every CPU. */
typedef struct {
    const uint8_t *p;
    int64_t n;
    uint8_t out;
} stream_job_t;

static void stream_job(void *arg) {
    stream_job_t *j = (stream_job_t *)arg;
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 64 <= j->n; i += 64) {
        __builtin_prefetch((const char *)((uintptr_t)j->p + (uintptr_t)(i + PREFETCH_AHEAD_VNNI)));
        a = _mm256_or_si256(a, _mm256_loadu_si256((const __m256i *)(j->p + i)));
        b = _mm256_or_si256(b, _mm256_loadu_si256((const __m256i *)(j->p + i + 32)));
    }
    uint8_t lanes[32], o = 0;
    _mm256_storeu_si256((__m256i *)lanes, _mm256_or_si256(a, b));
    for (int l = 0; l < 32; l++) o |= lanes[l];
    for (; i < j->n; i++) o |= j->p[i];
    j->out = o;
}

int onebit_hi_read_stream(const uint8_t *buf, int64_t n, int threads) {
    if (!buf || n < 0 || threads < 1 || threads > MAX_THREADS) return -2;
    stream_job_t jobs[MAX_JOBS];
    int64_t nj = threads == 1 ? 1 : (16 * threads < MAX_JOBS ? 16 * threads : MAX_JOBS);
    int64_t step = ((n + nj - 1) / nj + 63) / 64 * 64; /* nj steps cover n */
    for (int64_t i = 0; i < nj; i++) {
        int64_t lo = i * step < n ? i * step : n, hi = (i + 1) * step < n ? (i + 1) * step : n;
        jobs[i] = (stream_job_t){buf + lo, hi - lo, 0};
    }
    if (threads == 1) {
        stream_job(jobs);
    } else {
        team_t team = {stream_job, (char *)jobs, sizeof(stream_job_t), (int)nj, 0};
        team_run(&team, threads);
    }
    uint8_t o = 0;
    for (int64_t i = 0; i < nj; i++) o |= jobs[i].out;
    return o;
}
