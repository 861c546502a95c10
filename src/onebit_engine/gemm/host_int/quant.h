/* Contract steps 1-2 (docs/CONTRACTS.md) for one activation row, AVX2; included by kernel.c.
 * Twin (bitwise, tested): onebit_engine.quant.activations.quantize_rows: float32 division, round half
 * to even, clip to +-127; sa = amax / 127, or 1.0 for an all-zero row. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

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

