/* host-int native kernel: the device numerics contract (docs/CONTRACTS.md) for one skinny GEMM call.
 *
 * Twins (bitwise, tested): onebit_engine.quant.activations.quantize_rows,
 * onebit_engine.gemm.int_kernels.matmul_int_reference, onebit_engine.quant.activations.dequantize_acc.
 * Built by onebit_engine/gemm/native.py with `python -m ziglang cc -O2 -mavx2 -ffp-contract=off`.
 *
 * Design (AVX2, no VNNI needed):
 *  - Activations are quantized here (float32 division, round half to even, clip +-127) and written in
 *    the *kernel order* of the weight format, so the packed weight bytes are used exactly as stored
 *    (file format v1 unchanged): one 32-byte load of packed weights decodes to 1, 2 or 4 vectors of
 *    32 codes, and the activations are permuted once per call to match.
 *  - Every 32-byte weight chunk is loaded and decoded once and used for up to 8 rows held in
 *    registers (rows 9..16 take a second pass over the same channel, which is then in L1).
 *  - Within a block of up to 8 rows the activations are interleaved by chunk ([chunk][row][32 * cpb]),
 *    so one channel's pass reads them as a single forward stream (the hardware prefetcher keeps it
 *    in L1 better than 8 streams 4 KiB apart: 6-23% at 8 rows, 4096 x 4096).
 *  - int8: maddubs(|w| as u8, s8) then madd with ones into int32. For 1-2 rows the s8 operand is
 *    sign(x, w) (pair sums <= 2*127*127); for 3+ rows it is x ^ (w < 0 ? 0xFF : 0) = x or -x - 1
 *    (pair sums <= 2*127*128 < 32767) and sum(|w| over w < 0) is added back per channel: vpsignb
 *    competes with the multiplies for the same two pipes on Zen 4, vpxor does not.
 *  - int4 / ternary: biased unsigned codes (code + 8 = nibble ^ 8; code + 1 via a 4-entry shuffle),
 *    maddubs(biased u8, x s8) cannot saturate (2*15*127, 2*2*127), several chunks are summed in int16
 *    before widening, and bias * sum(x) is subtracted at the end.
 *  - All sums are integers in int32 without overflow (K <= 133144 is checked by the caller; biased
 *    partial sums wrap modulo 2^32 at worst and the final value fits, so the result is exact).
 *    The result therefore cannot depend on the summation order, the row block, the thread split or
 *    the other rows.
 *  - Epilogue: y = ((float)acc * sa[r]) * sw[n], two float32 multiplies (no contraction possible).
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FMT_INT8 0
#define FMT_INT4 1
#define FMT_TERNARY 2
#define RB 8        /* rows per register block */
#define MAX_THREADS 64

static const int CPB[3] = {1, 2, 4};      /* codes per packed byte */
static const int BIAS[3] = {0, 8, 1};     /* biased code = code + BIAS */

typedef struct {
    int fmt;
    int64_t m, n, nbytes, xstride;
    const int8_t *xs;     /* m * xstride activation codes in kernel order, zero padded, row blocks
                           * of RB rows interleaved by chunk (act_offset) */
    const int32_t *xcorr; /* [m] BIAS * sum(xq[r]) */
    const uint8_t *w;     /* [n, nbytes] packed codes (format v1) */
    const float *sa, *sw; /* [m], [n]; NULL -> write int32 acc instead of float y */
    float *y;
    int32_t *acc;
    int64_t n0, n1;
} job_t;

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* out[r] += sum of the 8 lanes of acc[r] + corr, r < R, modulo 2^32 (biased partial sums may wrap;
 * the final values fit). For 4+ rows, one transposed reduction (vphaddd) instead of R scalar ones. */
static inline __attribute__((always_inline)) void add_hsums(int32_t *out, const __m256i *acc, int R, uint32_t corr) {
    if (R < 4) {
        for (int r = 0; r < R; r++) out[r] = (int32_t)((uint32_t)out[r] + (uint32_t)hsum_epi32(acc[r]) + corr);
        return;
    }
    const __m256i z = _mm256_setzero_si256();
    __m256i a[8];
    for (int r = 0; r < 8; r++) a[r] = r < R ? acc[r] : z;
    __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
    /* lane halves: h0 = [rows 0-3 low half, rows 0-3 high half], h1 likewise for rows 4-7 */
    __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, _mm256_add_epi32(s, _mm256_set1_epi32((int)corr)));
    for (int r = 0; r < R; r++) out[r] = (int32_t)((uint32_t)out[r] + lanes[r]);
}

/* Software prefetch of the weight stream PREFETCH_AHEAD bytes ahead, once per 64-byte line (even c).
 * The hardware prefetchers stop at each 4 KiB page and must pick the stream up again, so at 1 row,
 * where memory sets the pace, the call ran ~20% slower than it now does (cold caches, Zen 4 VM,
 * interleaved A/B: 512 B to 8 KiB ahead all helped, 1-2 KiB most). Prefetches never fault; the
 * address is formed as an integer, so reading past the last row is not pointer arithmetic. */
#define PREFETCH_AHEAD 2048
static inline void prefetch_ahead(const uint8_t *wrow, int64_t c) {
    if (!(c & 1)) _mm_prefetch((const char *)((uintptr_t)wrow + (uintptr_t)(32 * c + PREFETCH_AHEAD)), _MM_HINT_T0);
}

/* Chunk c of a packed row: a plain load, or, for the last partial chunk, a zero-padded copy. */
static inline __m256i load_chunk(const uint8_t *wrow, int64_t c, int64_t nbytes) {
    if ((c + 1) * 32 <= nbytes) return _mm256_loadu_si256((const __m256i *)(wrow + 32 * c));
    uint8_t buf[32] = {0};
    memcpy(buf, wrow + 32 * c, (size_t)(nbytes - 32 * c));
    return _mm256_loadu_si256((const __m256i *)buf);
}

/* The dot products of one channel (packed row wrow) over chunks [c0, c1) with the R activation rows
 * of one row block (xs; chunk c of row r at xs + c * cstride + r * 32 * cpb), added to out[0..R).
 * c1 is at most the number of full chunks, except for one call that covers the last (partial)
 * chunk alone. */
#define DOT_BEGIN(NAME)                                                                                    \
    static inline __attribute__((always_inline)) void NAME(const uint8_t *wrow, int64_t nbytes, int64_t c0, \
                                                           int64_t c1, const int8_t *xs, int64_t cstride, \
                                                           int R, int32_t *out)

DOT_BEGIN(dot_int8) {
    __m256i acc[RB];
    const __m256i ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
    __m256i neg = zero; /* 4 x u64: sum of |w| over the negative codes (xor form only) */
    for (int r = 0; r < R; r++) acc[r] = zero;
    for (int64_t c = c0; c < c1; c++) {
        prefetch_ahead(wrow, c);
        __m256i w = load_chunk(wrow, c, nbytes);
        __m256i aw = _mm256_abs_epi8(w);
        if (R <= 2) { /* sign form: fewest uops per chunk, for the memory-bound 1-2 row calls */
            for (int r = 0; r < R; r++) {
                __m256i x = _mm256_loadu_si256((const __m256i *)(xs + c * cstride + 32 * r));
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, ones));
            }
        } else { /* xor form: vpsignb shares the multiply pipes, vpxor does not (docs/host-int.md) */
            __m256i m = _mm256_cmpgt_epi8(zero, w); /* 0xFF where w < 0 */
            neg = _mm256_add_epi64(neg, _mm256_sad_epu8(_mm256_and_si256(aw, m), zero));
            for (int r = 0; r < R; r++) {
                __m256i x = _mm256_loadu_si256((const __m256i *)(xs + c * cstride + 32 * r));
                /* x ^ m = x, or -x - 1 where w < 0: |w| * (x ^ m) = w * x - |w| there; the pair sums are
                 * <= 2 * 127 * 128 < 32767, and sum(|w|, w < 0) is added back below */
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_xor_si256(x, m));
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, ones));
            }
        }
    }
    /* the sad lanes are < 2^32, so their low dwords hold them and the high dwords are 0 */
    add_hsums(out, acc, R, (uint32_t)hsum_epi32(neg));
}

/* int4 / ternary: the int16 sums a16 of a group of G chunks stay in registers and are widened into acc
 * after the group, outside the hot loop. v2 kept a16, acc (8 rows each) and all decoded fields live
 * in one loop, more than the 16 ymm registers, and the compiler spilled accumulators on every chunk;
 * now the hot loop holds a16, one decoded field and the constants (a few reloads remain at R = 8). */
#define GROUP_LOOP(G, BODY)                                                                                \
    __m256i acc[RB], a16[RB];                                                                              \
    const __m256i ones = _mm256_set1_epi16(1);                                                             \
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_si256();                                           \
    for (int64_t g = c0; g < c1; g += (G)) {                                                               \
        int64_t ge = g + (G) < c1 ? g + (G) : c1;                                                          \
        for (int r = 0; r < R; r++) a16[r] = _mm256_setzero_si256();                                       \
        for (int64_t c = g; c < ge; c++) { BODY }                                                          \
        for (int r = 0; r < R; r++) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(a16[r], ones));    \
    }                                                                                                      \
    add_hsums(out, acc, R, 0);

DOT_BEGIN(dot_int4) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x88);
    GROUP_LOOP(4, {
        const int8_t *x = xs + c * cstride;
        prefetch_ahead(wrow, c);
        __m256i w = _mm256_xor_si256(load_chunk(wrow, c, nbytes), flip);
        __m256i lo = _mm256_and_si256(w, m4);
        for (int r = 0; r < R; r++) /* <= 4 chunks * 2 * 2 * 15 * 127 = 30480 */
            a16[r] = _mm256_add_epi16(a16[r], _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(x + 64 * r))));
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        for (int r = 0; r < R; r++)
            a16[r] = _mm256_add_epi16(a16[r], _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 64 * r + 32))));
    })
}

DOT_BEGIN(dot_ternary) {
    const __m256i m2 = _mm256_set1_epi8(3);
    /* 2-bit field f -> code + 1: 0 (code 0) -> 1, 1 (+1) -> 2, 2 (-1) -> 0; 3 is refused at pack time. */
    const __m256i lut = _mm256_setr_epi8(1, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         1, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    GROUP_LOOP(16, {
        const int8_t *x = xs + c * cstride;
        prefetch_ahead(wrow, c);
        __m256i w = load_chunk(wrow, c, nbytes);
        for (int s = 0; s < 4; s++) { /* <= 16 chunks * 4 * 2 * 2 * 127 = 32512 */
            __m256i f = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(w, 2 * s), m2));
            for (int r = 0; r < R; r++)
                a16[r] = _mm256_add_epi16(a16[r], _mm256_maddubs_epi16(f, _mm256_loadu_si256((const __m256i *)(x + 128 * r + 32 * s))));
        }
    })
}

#define GEN(NAME)                                                                                        \
    static void NAME##_rows(const uint8_t *w, int64_t nb, int64_t c0, int64_t c1, const int8_t *xs,      \
                            int64_t xst, int R, int32_t *o) {                                            \
        switch (R) {                                                                                     \
        case 1: NAME(w, nb, c0, c1, xs, xst, 1, o); break;                                               \
        case 2: NAME(w, nb, c0, c1, xs, xst, 2, o); break;                                               \
        case 3: NAME(w, nb, c0, c1, xs, xst, 3, o); break;                                               \
        case 4: NAME(w, nb, c0, c1, xs, xst, 4, o); break;                                               \
        case 5: NAME(w, nb, c0, c1, xs, xst, 5, o); break;                                               \
        case 6: NAME(w, nb, c0, c1, xs, xst, 6, o); break;                                               \
        case 7: NAME(w, nb, c0, c1, xs, xst, 7, o); break;                                               \
        default: NAME(w, nb, c0, c1, xs, xst, 8, o); break;                                              \
        }                                                                                                \
    }
GEN(dot_int8)
GEN(dot_int4)
GEN(dot_ternary)

typedef void (*dot_fn)(const uint8_t *, int64_t, int64_t, int64_t, const int8_t *, int64_t, int, int32_t *);

/* One channel at a time over all of K. Cache blocking (several channels per K block) measured slower
 * on the Zen 4 VM at every size tried (16x32, 8x64, 4x32, 2x64 channels x chunks): the weight rows
 * then stream as several interleaved page-sized pieces, which the hardware prefetcher follows worse
 * than one stream; at 1 row, where memory sets the pace, it lost 20-50%. */
static void *run_job(void *arg) {
    const job_t *j = (const job_t *)arg;
    dot_fn dot = j->fmt == FMT_INT8 ? dot_int8_rows : (j->fmt == FMT_INT4 ? dot_int4_rows : dot_ternary_rows);
    int64_t nfull = j->nbytes / 32, nch = (j->nbytes + 31) / 32, cb = 32 * CPB[j->fmt];
    for (int64_t i = j->n0; i < j->n1; i++) {
        const uint8_t *wrow = j->w + i * j->nbytes;
        int32_t acc[2 * RB] = {0};
        for (int64_t r0 = 0; r0 < j->m; r0 += RB) {
            int R = (int)(j->m - r0 < RB ? j->m - r0 : RB);
            const int8_t *xs = j->xs + r0 * j->xstride; /* row block: [chunk][R rows][cb] */
            if (nfull > 0) dot(wrow, j->nbytes, 0, nfull, xs, R * cb, R, acc + r0);
            if (nfull < nch) dot(wrow, j->nbytes, nfull, nch, xs, R * cb, R, acc + r0);
        }
        for (int64_t r = 0; r < j->m; r++) {
            int32_t a = (int32_t)((uint32_t)acc[r] - (uint32_t)j->xcorr[r]);
            if (j->sa) j->y[r * j->n + i] = ((float)a * j->sa[r]) * j->sw[i];
            else j->acc[r * j->n + i] = a;
        }
    }
    return NULL;
}

/* Threads actually used: at most `threads`, and only when each gets >= 256 KiB of packed weights
 * (waking a pooled worker costs up to tens of us when it sleeps). Bits do not depend on it. */
static int64_t threads_for(int64_t n, int64_t nbytes, int threads) {
    int64_t t = (n * nbytes) / (256 * 1024);
    if (t > threads) t = threads;
    if (t > n) t = n;
    if (t > MAX_THREADS) t = MAX_THREADS;
    return t < 1 ? 1 : t;
}

static void run_job_v(void *arg) { run_job(arg); }

#include "host_int_pool.h"

static void run_all(job_t *base, int threads) {
    int64_t t = threads_for(base->n, base->nbytes, threads);
    if (t == 1) {
        base->n0 = 0;
        base->n1 = base->n;
        run_job(base);
        return;
    }
    job_t jobs[MAX_THREADS];
    for (int64_t i = 0; i < t; i++) {
        jobs[i] = *base;
        jobs[i].n0 = base->n * i / t;
        jobs[i].n1 = base->n * (i + 1) / t;
    }
    if (pool_run(run_job_v, jobs, sizeof(job_t), (int)t) == 0) return;
    /* the pool is in use by another thread's call, or could not start: threads of our own */
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int64_t i = 1; i < t; i++) started[i] = pthread_create(&tid[i], NULL, run_job, &jobs[i]) == 0;
    run_job(&jobs[0]);
    for (int64_t i = 1; i < t; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else run_job(&jobs[i]); /* could not start a thread: do its share here */
    }
}

/* Kernel order: code k of chunk c (C = 32 * cpb codes) sits at byte j, field s of the chunk
 * (l = k - c*C, j = l / cpb, s = l % cpb) and is multiplied with activation byte 32*s + j of chunk c.
 * Rows come in blocks of RB; block b (rows RB*b .. RB*b + Rb - 1) starts at xs + RB*b*xstride and
 * holds chunk c of its row i at (c * Rb + i) * C, so one pass over a channel reads it front to back. */
static int64_t act_offset(int64_t r, int64_t m, int64_t xstride, int64_t c, int64_t C) {
    int64_t b = r / RB, rb = m - RB * b < RB ? m - RB * b : RB;
    return RB * b * xstride + (c * rb + r % RB) * C;
}

static void to_kernel_order(int fmt, const int8_t *q, int64_t k, int8_t *xs, int64_t xstride, int64_t r, int64_t m) {
    int cpb = CPB[fmt];
    int64_t C = 32 * cpb;
    if (cpb == 1 && m - RB * (r / RB) == 1) { /* a lone row in its block: the natural order */
        int8_t *dst = xs + RB * (r / RB) * xstride;
        memcpy(dst, q, (size_t)k);
        memset(dst + k, 0, (size_t)(xstride - k));
        return;
    }
    for (int64_t c = 0; c * C < xstride; c++) {
        int8_t *dst = xs + act_offset(r, m, xstride, c, C);
        memset(dst, 0, (size_t)C);
        int64_t n = k - c * C < C ? k - c * C : C; /* codes of this chunk (0 in the zero padding) */
        const int8_t *src = q + c * C;
        if (cpb == 1) memcpy(dst, src, (size_t)(n > 0 ? n : 0));
        else
            for (int64_t l = 0; l < n; l++) dst[32 * (l % cpb) + l / cpb] = src[l];
    }
}

static int64_t xstride_for(int fmt, int64_t nbytes) { return ((nbytes + 31) / 32) * 32 * CPB[fmt]; }

/* Contract steps 1-2 for one row: returns 0, or -1 if the row holds NaN or inf. */
static int quantize_row(const float *x, int64_t k, int8_t *q, float *sa_out) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 big = _mm256_set1_ps(3.4028234663852886e38f);
    __m256 vmax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ)); /* NaN or inf */
        vmax = _mm256_max_ps(vmax, a);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float amax = 0.0f;
    for (int l = 0; l < 8; l++) amax = lanes[l] > amax ? lanes[l] : amax;
    int isbad = _mm256_movemask_ps(bad) != 0;
    for (; i < k; i++) {
        float a = fabsf(x[i]);
        if (!(a <= 3.4028234663852886e38f)) isbad = 1;
        amax = a > amax ? a : amax;
    }
    if (isbad) return -1;
    float sa = amax > 0.0f ? amax / 127.0f : 1.0f;
    *sa_out = sa;
    const __m256 vsa = _mm256_set1_ps(sa), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    i = 0;
    for (; i + 32 <= k; i += 32) {
        __m256i v[4];
        for (int u = 0; u < 4; u++) {
            __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * u), vsa),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v[u] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
        }
        __m256i p16a = _mm256_packs_epi32(v[0], v[1]), p16b = _mm256_packs_epi32(v[2], v[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        /* undo the per-lane interleave of the two packs: dword order 0 4 1 5 2 6 3 7 */
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + i), p8);
    }
    for (; i < k; i++) {
        float r = nearbyintf(x[i] / sa);
        r = r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r);
        q[i] = (int8_t)r;
    }
    return 0;
}

static int32_t sum_codes(const int8_t *q, int64_t k) {
    int32_t s = 0;
    for (int64_t i = 0; i < k; i++) s += q[i];
    return s;
}

int onebit_hi_abi_version(void) { return 1; }

/* AVX2 reported by cpuid (leaf 7, ebx bit 5) and YMM state enabled by the OS (xgetbv bits 1-2). */
int onebit_hi_cpu_ok(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6u) != 6u) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 5) & 1;
}

/* Exact integer product: xq int8 [m, k] (natural order) x packed w -> acc int32 [m, n].
 * Returns 0, or -2 on a bad argument (m outside 1..16, unknown format). */
int onebit_hi_gemm_int(int fmt, const int8_t *xq, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                       int64_t nbytes, int32_t *acc, int threads) {
    if (fmt < 0 || fmt > 2 || m < 1 || m > 2 * RB || threads < 1) return -2;
    int64_t xstride = xstride_for(fmt, nbytes);
    int8_t *xs = (int8_t *)malloc((size_t)(m * xstride));
    if (!xs) return -3;
    int32_t xcorr[2 * RB];
    for (int64_t r = 0; r < m; r++) {
        to_kernel_order(fmt, xq + r * k, k, xs, xstride, r, m);
        xcorr[r] = BIAS[fmt] * sum_codes(xq + r * k, k);
    }
    job_t job = {fmt, m, n, nbytes, xstride, xs, xcorr, w, NULL, NULL, NULL, acc, 0, n};
    run_all(&job, threads);
    free(xs);
    return 0;
}

/* The whole contract: x float32 [m, k] -> y float32 [m, n]. Returns 0; -1 - r if row r is not
 * finite (nothing written); -2 on a bad argument; -3 if out of memory. */
int onebit_hi_matmul(int fmt, const float *x, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                     int64_t nbytes, const float *sw, float *y, int threads) {
    if (fmt < 0 || fmt > 2 || m < 1 || m > 2 * RB || threads < 1) return -2;
    int64_t xstride = xstride_for(fmt, nbytes);
    int8_t *buf = (int8_t *)malloc((size_t)(m * xstride + k));
    if (!buf) return -3;
    int8_t *xs = buf, *q = buf + m * xstride;
    int32_t xcorr[2 * RB];
    float sa[2 * RB];
    for (int64_t r = 0; r < m; r++) {
        if (quantize_row(x + r * k, k, q, &sa[r])) {
            free(buf);
            return (int)(-1 - r);
        }
        to_kernel_order(fmt, q, k, xs, xstride, r, m);
        xcorr[r] = BIAS[fmt] * sum_codes(q, k);
    }
    job_t job = {fmt, m, n, nbytes, xstride, xs, xcorr, w, sa, sw, y, NULL, 0, n};
    run_all(&job, threads);
    free(buf);
    return 0;
}
