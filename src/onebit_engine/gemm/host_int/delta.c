/* The gated delta rule of a delta-net layer for the n rows of one call, one value head per job, on the
 * host-int library's thread pool (the twin of ops/gated_delta_fast.py's _head_rows and _heads).
 *
 * Why here, in a GEMM library: a verify spends its time in GEMM calls and in this recurrence between them.
 * The pool's workers spin for a while after each GEMM call; the recurrence on numba's own threads fought
 * them for the 2 cores (docs/host-int.md), and on the calling thread alone it left a core idle. On the
 * same pool both cores work on it. And numba did not vectorize the sweep over a head's state (0.9 cycles
 * an element on Zen 3; the arrays may alias for all LLVM knows): here 8 value columns go at a time.
 *
 * Bits: every element sees the float32 operations of _head_rows in the same order, each rounded (no FMA:
 * -ffp-contract=off, separate mul and add intrinsics), and each sum over i runs in ascending i per column;
 * a head's result does not depend on which thread ran it. tests/ops/test_delta_native.py pins it bitwise.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

typedef void (*onebit_hi_job_fn)(void *);
int onebit_hi_run_jobs(onebit_hi_job_fn fn, void *jobs, int64_t job_size, int njobs, int threads); /* kernel.c */

typedef struct {
    float *S;                                /* [HV, dk, dv] */
    const float *alphas, *betas;             /* [n, HV] */
    const float *ks, *qs;                    /* [n, HK, dk] */
    const float *xs;                         /* [n, C]: head h's v at columns v0 + h dv */
    float *o;                                /* [n, HV, dv] (read_out) */
    int64_t n, HV, HK, dk, dv, C, v0, h;
    int read_out;
} delta_job_t;

#define LD(p) _mm256_loadu_ps(p)
#define ST(p, v) _mm256_storeu_ps(p, v)
#define MUL _mm256_mul_ps
#define ADD _mm256_add_ps
#define SUB _mm256_sub_ps
#define SET1 _mm256_set1_ps

/* Columns [j0, j0 + 8 NB) of one head; column1 below is the scalar tail. All of a head's rows run over
 * these columns before the next ones: a column of S, mem and the read-out depends on no other column. The
 * sums over i (read-out, next row's read) are chains of dependent adds; NB vectors side by side keep NB
 * chains in flight (one vector alone waited on the add latency: slower than numba's scalar loop). */
static inline __attribute__((always_inline)) void columns(const delta_job_t *J, int64_t j0, const int NB) {
    const int64_t n = J->n, HV = J->HV, dk = J->dk, dv = J->dv, h = J->h, g = h / (HV / J->HK);
    float *S = J->S + h * dk * dv + j0;
    const float *k0 = J->ks + g * dk;
    __m256 mem[4], ot[4], nxt[4];
    const __m256 a = SET1(J->alphas[h]);
    for (int u = 0; u < NB; u++) mem[u] = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; i++) { /* row 0: 1. decay, 2. read */
        const __m256 ki = SET1(k0[i]);
        for (int u = 0; u < NB; u++) {
            __m256 s = MUL(LD(S + i * dv + 8 * u), a);
            ST(S + i * dv + 8 * u, s);
            mem[u] = ADD(mem[u], MUL(ki, s));
        }
    }
    for (int64_t t = 0; t < n; t++) {
        const float *v = J->xs + t * J->C + J->v0 + h * dv + j0;
        const float *kt = J->ks + (t * J->HK + g) * dk, *qt = J->qs + (t * J->HK + g) * dk;
        const __m256 b = SET1(J->betas[t * HV + h]);
        for (int u = 0; u < NB; u++) {
            mem[u] = MUL(SUB(LD(v + 8 * u), mem[u]), b); /* 3. delta of row t */
            ot[u] = _mm256_setzero_ps();
            nxt[u] = _mm256_setzero_ps();
        }
        if (t + 1 == n) { /* the last row: 4. write, 5. read-out */
            for (int64_t i = 0; i < dk; i++) {
                const __m256 ki = SET1(kt[i]), qi = SET1(qt[i]);
                for (int u = 0; u < NB; u++) {
                    __m256 s = ADD(LD(S + i * dv + 8 * u), MUL(ki, mem[u]));
                    ST(S + i * dv + 8 * u, s);
                    if (J->read_out) ot[u] = ADD(ot[u], MUL(qi, s));
                }
            }
        } else {
            const float *k2 = J->ks + ((t + 1) * J->HK + g) * dk;
            const __m256 a2 = SET1(J->alphas[(t + 1) * HV + h]);
            for (int64_t i = 0; i < dk; i++) {
                const __m256 ki = SET1(kt[i]), qi = SET1(qt[i]), k2i = SET1(k2[i]);
                for (int u = 0; u < NB; u++) {
                    __m256 s = ADD(LD(S + i * dv + 8 * u), MUL(ki, mem[u])); /* 4. write (row t) */
                    if (J->read_out) ot[u] = ADD(ot[u], MUL(qi, s));         /* 5. read-out (row t) */
                    __m256 s2 = MUL(s, a2);                                  /* 1. decay (row t + 1) */
                    ST(S + i * dv + 8 * u, s2);
                    nxt[u] = ADD(nxt[u], MUL(k2i, s2)); /* 2. read (row t + 1) */
                }
            }
            for (int u = 0; u < NB; u++) mem[u] = nxt[u];
        }
        if (J->read_out)
            for (int u = 0; u < NB; u++) ST(J->o + (t * HV + h) * dv + j0 + 8 * u, ot[u]);
    }
}

static void column1(const delta_job_t *J, int64_t j) {
    const int64_t n = J->n, HV = J->HV, dk = J->dk, dv = J->dv, h = J->h, g = h / (HV / J->HK);
    float *S = J->S + h * dk * dv + j;
    const float *k0 = J->ks + g * dk;
    float mem = 0.0f, a = J->alphas[h];
    for (int64_t i = 0; i < dk; i++) {
        float s = S[i * dv] * a;
        S[i * dv] = s;
        mem = mem + k0[i] * s;
    }
    for (int64_t t = 0; t < n; t++) {
        const float *kt = J->ks + (t * J->HK + g) * dk, *qt = J->qs + (t * J->HK + g) * dk;
        mem = (J->xs[t * J->C + J->v0 + h * dv + j] - mem) * J->betas[t * HV + h];
        float ot = 0.0f;
        if (t + 1 == n) {
            for (int64_t i = 0; i < dk; i++) {
                float s = S[i * dv] + kt[i] * mem;
                S[i * dv] = s;
                ot = ot + qt[i] * s;
            }
        } else {
            const float *k2 = J->ks + ((t + 1) * J->HK + g) * dk;
            float a2 = J->alphas[(t + 1) * HV + h], nxt = 0.0f;
            for (int64_t i = 0; i < dk; i++) {
                float s = S[i * dv] + kt[i] * mem;
                ot = ot + qt[i] * s;
                float s2 = s * a2;
                S[i * dv] = s2;
                nxt = nxt + k2[i] * s2;
            }
            mem = nxt;
        }
        if (J->read_out) J->o[(t * HV + h) * dv + j] = ot;
    }
}

static void head_job(void *arg) {
    const delta_job_t *J = (const delta_job_t *)arg;
    int64_t j = 0;
    for (; j + 32 <= J->dv; j += 32) columns(J, j, 4);
    for (; j + 8 <= J->dv; j += 8) columns(J, j, 1);
    for (; j < J->dv; j++) column1(J, j);
}

/* Advance S by rows 0..n-1 (each value head h reads key head h / (HV / HK)); with read_out, o gets each
 * row's q^T S after its write. Returns 0, or -2 for arguments that do not describe such a call. */
int onebit_hi_delta_heads(float *S, const float *alphas, const float *betas, const float *ks, const float *qs,
                          const float *xs, float *o, int64_t n, int64_t HV, int64_t HK, int64_t dk, int64_t dv,
                          int64_t C, int64_t v0, int read_out, int threads) {
    if (!S || n < 0 || HV < 1 || HK < 1 || HV % HK || dk < 1 || dv < 1 || v0 < 0 || v0 + HV * dv > C || threads < 1 ||
        HV > (1 << 20) || (read_out && !o))
        return -2;
    if (n == 0) return 0;
    delta_job_t *jobs = (delta_job_t *)malloc((size_t)HV * sizeof(delta_job_t));
    if (!jobs) return -3;
    for (int64_t h = 0; h < HV; h++)
        jobs[h] = (delta_job_t){S, alphas, betas, ks, qs, xs, o, n, HV, HK, dk, dv, C, v0, h, read_out};
    /* a head of one row at dk = dv = 128 is a few us, of 8 rows ~10 us: worth a second thread from 2 heads on */
    int rc = onebit_hi_run_jobs(head_job, jobs, sizeof(delta_job_t), (int)HV, threads > HV ? (int)HV : threads);
    free(jobs);
    return rc;
}
