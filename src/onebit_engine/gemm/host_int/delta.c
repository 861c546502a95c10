/* The gated delta rule of one delta-net layer for the n rows of a call, every value head a job on the GEMM
 * pool (kernel.c's onebit_hi_team; the caller passes the backend's threads): the compiled twin of
 * ops/gated_delta_fast._heads (which stays the reference; tests/ops/test_delta_native.py pins the two bitwise, on
 * this CPU's path, on the AVX-512 emulation and on 1 to 3 threads).
 *
 * Why: numba's loop over a head's state stores three arrays per element (S, the read-out sum, the next
 * row's read sum), as LLVM cannot keep the sums in registers across its loops; with a few vectors of columns
 * at a time (delta_body.h) they stay in registers and only S is stored. One head of 8 rows at dk = dv = 128 took 12 us
 * here against numba's 25-31 us (Zen 4, warm). On the pool: the heads are independent and the pool's second
 * worker only waits between GEMM calls; 18 layers of 16 heads (0.8B) took 0.60 (8 rows) to 0.74 (1 row) of the
 * one-thread time on 2 threads (docs/host-int.md, "The delta rule in C").
 *
 * Paths: AVX-512 (16 columns a vector; target attribute, run only where cpuid and xgetbv allow, like
 * vnni.c; built against avx512_emul.h in the emulated test library) and AVX2 (8 columns), the same body
 * (delta_body.h); columns past the last whole vector go through a scalar loop with the same operations.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "numpy_data.h"

typedef struct {
    float *S;                 /* [dk, dv] this head's state, written */
    const float *S0;          /* [dk, dv] the state it starts from (S itself, or a snapshot: only read) */
    const float *alphas, *betas; /* row t at [t * hv] */
    const float *ks, *qs;     /* row t at [t * k_row], dk floats */
    const float *vs;          /* row t at [t * v_row], dv floats */
    float *o;                 /* row t at [t * o_row], dv floats (read_out) */
    int64_t n, dk, dv, hv, k_row, v_row, o_row;
    int read_out;
    const char *next_S0; /* the next head this thread runs: its start state, prefetched while this one computes */
    char *next_S;        /* and the state it writes (NULL: no next head) */
} delta_head_t;

/* A cursor over the next head's states: one cache line of each a step of a block's loop over i. A head's rows
 * after the first are compute-bound on its state, held in the cache; the next head's state meanwhile came from
 * memory only when its own first row asked for it, so memory and compute took turns. Prefetching changes no value. */
typedef struct {
    const char *r;
    char *w; /* NULL when the next head's state is updated in place (one write prefetch of r serves both) */
    int64_t off, end;
} pf_t;

static inline __attribute__((always_inline)) void pf_step(pf_t *p) {
    if (p->off < p->end) {
        if (p->w) {
            __builtin_prefetch(p->r + p->off, 0, 2);
            __builtin_prefetch(p->w + p->off, 1, 2);
        } else {
            __builtin_prefetch(p->r + p->off, 1, 2);
        }
        p->off += 64;
    }
}

static pf_t pf_of(const delta_head_t *J) {
    pf_t p = {J->next_S0, J->next_S == (const char *)J->next_S0 ? 0 : J->next_S, 0,
              J->next_S0 ? J->dk * J->dv * (int64_t)sizeof(float) : 0};
    return p;
}

#ifdef ONEBIT_HI_EMULATE_AVX512
#include "avx512_emul.h"
#define TARGET
#else
#include <immintrin.h>
#define TARGET __attribute__((target("avx512f")))
#endif
#define VEC __m512
#define W 16
#define NB16 8 /* blocks at once: 24 sums, the broadcasts and the two values a step in 32 vector registers */
#define NB_MAX NB16
#define LD _mm512_loadu_ps
#define ST _mm512_storeu_ps
#define MUL _mm512_mul_ps
#define ADD _mm512_add_ps
#define SUB _mm512_sub_ps
#define SET1 _mm512_set1_ps
#define ZERO _mm512_setzero_ps
#define BLOCK block16
#define ROW0 row0_16
#include "delta_body.h"
#undef VEC
#undef W
#undef NB_MAX
#undef LD
#undef ST
#undef MUL
#undef ADD
#undef SUB
#undef SET1
#undef ZERO
#undef BLOCK
#undef ROW0
#undef TARGET

#ifndef ONEBIT_HI_EMULATE_AVX512
#define TARGET
#define VEC __m256
#define W 8
#define NB8 2 /* 6 sums in 16 vector registers: 4 blocks spilled */
#define NB_MAX NB8
#define LD _mm256_loadu_ps
#define ST _mm256_storeu_ps
#define MUL _mm256_mul_ps
#define ADD _mm256_add_ps
#define SUB _mm256_sub_ps
#define SET1 _mm256_set1_ps
#define ZERO _mm256_setzero_ps
#define BLOCK block8
#define ROW0 row0_8
#include "delta_body.h"
#undef TARGET
#endif

/* One column, the same operations as a block's lanes. */
static void column1(const delta_head_t *J, int64_t j) {
    const int64_t n = J->n, dk = J->dk, dv = J->dv;
    float *S = J->S + j;
    const float *S0 = J->S0 + j;
    float mem = 0.0f, a = J->alphas[0];
    for (int64_t i = 0; i < dk; i++) {
        float s = S0[i * dv] * a;
        S[i * dv] = s;
        mem = mem + J->ks[i] * s;
    }
    for (int64_t t = 0; t < n; t++) {
        const float *kt = J->ks + t * J->k_row, *qt = J->qs + t * J->k_row;
        mem = (J->vs[t * J->v_row + j] - mem) * J->betas[t * J->hv];
        float ot = 0.0f;
        if (t + 1 == n) {
            for (int64_t i = 0; i < dk; i++) {
                float s = S[i * dv] + kt[i] * mem;
                S[i * dv] = s;
                ot = ot + qt[i] * s;
            }
        } else {
            const float *k2 = J->ks + (t + 1) * J->k_row;
            float a2 = J->alphas[(t + 1) * J->hv], nxt = 0.0f;
            for (int64_t i = 0; i < dk; i++) {
                float s = S[i * dv] + kt[i] * mem;
                ot = ot + qt[i] * s;
                float s2 = s * a2;
                S[i * dv] = s2;
                nxt = nxt + k2[i] * s2;
            }
            mem = nxt;
        }
        if (J->read_out) J->o[t * J->o_row + j] = ot;
    }
}

#ifdef ONEBIT_HI_EMULATE_AVX512
#define TARGET_512
#else
#define TARGET_512 __attribute__((target("avx512f")))
#endif

static TARGET_512 void head16(const delta_head_t *J, float *mem) {
    const int64_t jv = J->dv / 16 * 16;
    int64_t j = 0;
    pf_t pf = pf_of(J);
    row0_16(J, jv, mem);
    for (; j + 16 * NB16 <= jv; j += 16 * NB16) block16(J, j, mem + j, NB16, &pf);
    for (; j < jv; j += 16) block16(J, j, mem + j, 1, &pf);
    for (int64_t j = jv; j < J->dv; j++) column1(J, j);
}

#ifndef ONEBIT_HI_EMULATE_AVX512
static void head8(const delta_head_t *J, float *mem) {
    const int64_t jv = J->dv / 8 * 8;
    int64_t j = 0;
    pf_t pf = {0, 0, 0, 0}; /* no prefetch: on AVX2 it made a verify of 8 rows 1.14x slower (Zen 4; Zen 3 not measured) */
    row0_8(J, jv, mem);
    for (; j + 8 * NB8 <= jv; j += 8 * NB8) block8(J, j, mem + j, NB8, &pf);
    for (; j < jv; j += 8) block8(J, j, mem + j, 1, &pf);
    for (int64_t j = jv; j < J->dv; j++) column1(J, j);
}
#endif

unsigned onebit_hi_cpu_flags(void); /* kernel.c */
int onebit_hi_vnni_emulated(void);   /* vnni.c */

/* 1 if delta path `path` (1: 16 lanes, AVX-512F or its emulation; 0: 8 lanes, AVX2) runs here. */
int onebit_hi_delta_path_ok(int path) {
    const unsigned f = onebit_hi_cpu_flags(), ymm = 1u | 2u | 4u | 16u; /* osxsave, avx, xcr0 ymm, avx2 */
#ifdef ONEBIT_HI_EMULATE_AVX512
    return path == 1 && (f & ymm) == ymm;
#else
    if (path == 0) return (f & ymm) == ymm;
    if (path == 1) return (f & (ymm | 8u | 32u)) == (ymm | 8u | 32u); /* + xcr0 zmm, avx512f */
    return 0;
#endif
}

/* One value head: a job of the team (onebit_hi_team in kernel.c), one job function per path. */
typedef struct {
    delta_head_t J;
    float *mem; /* dv floats of its own: row 0's reads */
    int count;  /* heads this entry's job runs from it (0: an entry inside another's run) */
} delta_job_t;

void onebit_hi_team(void (*fn)(void *), void *jobs, size_t job_size, int njobs, int t); /* kernel.c */

/* The heads of a run after the first get their states prefetched by the one before (pf_t). */
static void link_run(delta_job_t *j) {
    for (int c = 0; c < j->count; c++) {
        const int last = c + 1 == j->count;
        j[c].J.next_S0 = last ? 0 : (const char *)j[c + 1].J.S0;
        j[c].J.next_S = last ? 0 : (char *)j[c + 1].J.S;
    }
}

static void job16(void *p) {
    delta_job_t *j = (delta_job_t *)p;
    link_run(j);
    for (int c = 0; c < j->count; c++) head16(&j[c].J, j[c].mem);
}
#ifndef ONEBIT_HI_EMULATE_AVX512
static void job8(void *p) {
    delta_job_t *j = (delta_job_t *)p;
    link_run(j);
    for (int c = 0; c < j->count; c++) head8(&j[c].J, j[c].mem);
}
#endif

/* Threads for a call, like the GEMM's rule (kernel.c, threads_for): more than one only when each gets ~50 us of
 * work. Work in ns, from one head on Zen 4: ~0.45 ns an element of the state for the first row, ~0.12 for each
 * later one. Small calls paid for the pool (interleaved, 2 threads against 1): 2 heads of 64 x 64, a plain step
 * 1.16x and a commit 1.8x slower; 8 heads of 64 x 64, 8 rows (~42 us of work), no faster. */
static int delta_threads(int64_t n, int64_t HV, int64_t dk, int64_t dv, int threads) {
    int64_t work = HV * dk * dv * (45 + 12 * (n - 1)) / 100, t = work / 50000;
    if (t > threads) t = threads;
    if (t > HV) t = HV;
    return t < 1 ? 1 : (int)t;
}

/* For the tests: the threads a call of these sizes would use (-2 on a bad argument). */
int onebit_hi_delta_threads(int64_t n, int64_t HV, int64_t dk, int64_t dv, int threads) {
    if (n < 1 || HV < 1 || dk < 1 || dv < 1 || threads < 1) return -2;
    return delta_threads(n, HV, dk, dv, threads);
}

/* Advance S [HV, dk, dv] by rows 0..n-1 from the start state S0 (S itself, or a snapshot only read); value
 * head h reads key head h / (HV / HK). alphas, betas [n, HV]; ks, qs [n, HK, dk]; xs [n, C] (head h's v at
 * columns v0 + h dv); with read_out, o [n, HV, dv] gets each row's q^T S after its write. All C-contiguous
 * float32; each passed as its data pointer, or as a numpy array object when data_off >= 0 (numpy_data.h). The heads
 * are independent jobs on up to `threads` threads of the GEMM pool (same bits for any count). Returns 0; -2 for
 * arguments that describe no such call; -3 if `path` cannot run here; -4 out of memory. */
int onebit_hi_delta_heads(char *S_, const char *S0_, const char *alphas_, const char *betas_, const char *ks_,
                          const char *qs_, const char *xs_, char *o_, int64_t n, int64_t HV, int64_t HK, int64_t dk,
                          int64_t dv, int64_t C, int64_t v0, int read_out, int path, int threads, int64_t data_off) {
    float *S = (float *)numpy_data(S_, data_off), *o = (float *)numpy_data(o_, data_off);
    const float *S0 = (const float *)numpy_data(S0_, data_off), *alphas = (const float *)numpy_data(alphas_, data_off),
                *betas = (const float *)numpy_data(betas_, data_off), *ks = (const float *)numpy_data(ks_, data_off),
                *qs = (const float *)numpy_data(qs_, data_off), *xs = (const float *)numpy_data(xs_, data_off);
    if (!S || !S0 || n < 0 || HV < 1 || HK < 1 || HV % HK || dk < 1 || dv < 1 || v0 < 0 || v0 + HV * dv > C ||
        threads < 1 || (n && (!alphas || !betas || !ks || !qs || !xs)) || (n && read_out && !o))
        return -2;
    if (!onebit_hi_delta_path_ok(path)) return -3;
    if (n == 0) {
        if (S != S0) memcpy(S, S0, (size_t)(HV * dk * dv) * sizeof(float));
        return 0;
    }
    const int64_t r = HV / HK;
    delta_job_t *jobs = (delta_job_t *)malloc((size_t)HV * sizeof(delta_job_t));
    float *mem = (float *)malloc((size_t)(HV * dv) * sizeof(float)); /* each head's row-0 reads */
    if (!jobs || !mem) {
        free(jobs);
        free(mem);
        return -4;
    }
    for (int64_t h = 0; h < HV; h++) {
        const int64_t g = h / r;
        delta_head_t J = {S + h * dk * dv, S0 + h * dk * dv, alphas + h, betas + h, ks + g * dk, qs + g * dk,
                          xs + v0 + h * dv, read_out ? o + h * dv : 0, n, dk, dv, HV, HK * dk, C, HV * dv, read_out, 0, 0};
        jobs[h].J = J;
        jobs[h].mem = mem + h * dv;
        jobs[h].count = 0;
    }
    /* A job runs a run of contiguous heads, ~4 jobs a thread: each thread's reads then stream through adjacent
     * states (the hardware prefetcher runs on across heads) instead of alternating 64 KB blocks with the other
     * thread's. Measured (cold states, 2 threads, interleaved): a 35B-A3B step's layer 140 -> 113 us, a 27B
     * step's 193 -> 170, a 27B verify of 8 rows 499 -> 446-465. The heads and their bits are the same. */
    const int T = delta_threads(n, HV, dk, dv, threads);
    const int64_t per = (HV + 4 * T - 1) / (4 * T);
    int nj = 0;
    for (int64_t h = 0; h < HV; h += per, nj++) jobs[h].count = (int)(h + per <= HV ? per : HV - h);
#ifdef ONEBIT_HI_EMULATE_AVX512
    void (*job)(void *) = job16;
#else
    void (*job)(void *) = path == 1 ? job16 : job8;
#endif
    onebit_hi_team(job, jobs, sizeof(delta_job_t) * (size_t)per, nj, T);
    free(jobs);
    free(mem);
    return 0;
}
