/* host-int AVX2 tile kernel (path "avx2"): the exact products of one 8-channel tile (tiles.h).
 *
 * No VNNI: an exact int8 x int8 product on AVX2 is vpmaddubsw (u8 x s8 -> int16 pair sums) then vpmaddwd
 * with ones into int32. One 32-byte load holds 4 k (int8), 8 k (int4) or 16 k (ternary) of 8 channels;
 * a row's 4 activation codes are broadcast to the 8 channels, so each accumulator holds 8 channels and
 * no horizontal sums are needed (the old per-channel layout spent a shuffle reduction per channel and
 * row, a large share of the small layers with K = 192).
 *  - int8: codes are stored as sign and magnitude (byte = |w| + 128 * (w < 0)), so |w| = byte & 0x7F and
 *    m = (w < 0 ? 0xFF : 0) = (byte as s8 < 0) take one op each (+128 needed three for the two: 4-8%
 *    of an 8-row call: the 8-row mix is bound by vector ALU ops). 2+ rows: the u8 operand is |w|, the s8
 *    one x ^ m, i.e. x or -x - 1: |w| * (x ^ m) = w * x - |w| where w < 0; pair sums stay <= 2 * 127 * 128
 *    < 32767, and the caller adds sum(|w| over w < 0) per channel, precomputed at pack. (xor, not vpsignb:
 *    vpsignb takes one of the two multiply pipes on this CPU, vpxor does not.) 1 row: vpsignb(x, byte),
 *    exact, no correction: the multiply pipes are idle there, and it is one op fewer.
 *  - int4 / ternary: the stored fields are already code + 8 / code + 1 (u8); vpmaddubsw cannot saturate
 *    (pairs <= 2 * 15 * 127 and 2 * 2 * 127), groups of 4 (int4) / 16 (ternary) steps are summed in int16
 *    (<= 30480, 32512) before widening; the caller subtracts BIAS * sum(xq[r]) per row.
 */
#include <immintrin.h>
#include <string.h>

#include "tiles.h"

#define VB 32 /* bytes per step: 8 channels x 4 bytes */

static inline __attribute__((always_inline)) __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __attribute__((always_inline)) void prefetch(const uint8_t *w, int64_t s, int64_t len, const uint8_t *next) {
    _mm_prefetch(prefetch_addr(w, s * VB, len, next), _MM_HINT_T0);
}

/* One int8 step s for R rows (see the header): 1 row takes the sign form, sign(x, byte) = x * sign(w),
 * exact with no correction (5 vector ops per step instead of 6; vpsignb's multiply pipe is free at 1 row),
 * 2+ rows the xor form, which gives w * x - |w| where w < 0. */
#define INT8_STEP(s)                                                                                     \
    do {                                                                                                 \
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + (s) * VB)), aw = _mm256_and_si256(v, low7); \
        const int8_t *x = xs + (s) * R * 4;                                                              \
        if (R == 1) {                                                                                    \
            a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(x), v)), ones)); \
        } else {                                                                                         \
            __m256i m = _mm256_cmpgt_epi8(zero, v);                                                      \
            for (int r = 0; r < R; r++)                                                                  \
                a[r] = _mm256_add_epi32(a[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_xor_si256(bcast4(x + 4 * r), m)), ones)); \
        }                                                                                                \
    } while (0)

/* U steps per iteration (4 for 1-2 rows, 2 for more: registers), one prefetch per 64-byte line and no
 * per-step branch: fewer instructions per byte let a 1-row call keep more of the stream in flight. */
static inline __attribute__((always_inline)) void tile_int8(const int R, const uint8_t *w, int64_t ns,
                                                            const uint8_t *next, const int8_t *xs, int32_t *acc,
                                                            int init) {
    const int U = R <= 2 ? 4 : 2;
    __m256i a[8];
    for (int r = 0; r < R; r++) a[r] = init ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(acc + 8 * r));
    const __m256i low7 = _mm256_set1_epi8(0x7F), ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
    int64_t s = 0;
    for (; s + U <= ns; s += U) {
        for (int u = 0; u < U; u += 2) prefetch(w, s + u, ns * VB, next);
        for (int u = 0; u < U; u++) INT8_STEP(s + u);
    }
    for (; s < ns; s++) {
        if (!(s & 1)) prefetch(w, s, ns * VB, next);
        INT8_STEP(s);
    }
    for (int r = 0; r < R; r++) _mm256_storeu_si256((__m256i *)(acc + 8 * r), a[r]);
}

/* int4 / ternary: int16 sums a16 of G steps, widened into acc (in memory: 8 rows of int16 and int32
 * accumulators would be all 16 ymm registers) after each group. */
static inline __attribute__((always_inline)) void tile_packed(const int fmt, const int R, const uint8_t *w, int64_t ns,
                                                              const uint8_t *next, const int8_t *xs, int32_t *acc,
                                                              int init) {
    const int G = fmt == FMT_INT4 ? 4 : 16, F = fmt == FMT_INT4 ? 2 : 4; /* steps per group, fields per byte */
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    if (init) memset(acc, 0, (size_t)R * 8 * sizeof(int32_t));
    for (int64_t g = 0; g < ns; g += G) {
        int64_t ge = g + G < ns ? g + G : ns;
        __m256i a16[8];
        for (int r = 0; r < R; r++) a16[r] = _mm256_setzero_si256();
        for (int64_t s = g; s < ge; s++) {
            if (!(s & 1)) prefetch(w, s, ns * VB, next); /* once per 64-byte line */
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + s * VB));
            const int8_t *x = xs + F * s * R * 4;
            for (int f = 0; f < F; f++) {
                __m256i c = fmt == FMT_INT4 ? _mm256_and_si256(f ? _mm256_srli_epi16(v, 4) : v, m4)
                                            : _mm256_and_si256(_mm256_srli_epi16(v, 2 * f), m2);
                for (int r = 0; r < R; r++)
                    a16[r] = _mm256_add_epi16(a16[r], _mm256_maddubs_epi16(c, bcast4(x + 4 * (f * R + r))));
            }
        }
        for (int r = 0; r < R; r++) {
            __m256i *p = (__m256i *)(acc + 8 * r);
            _mm256_storeu_si256(p, _mm256_add_epi32(_mm256_loadu_si256(p), _mm256_madd_epi16(a16[r], ones)));
        }
    }
}

#define CASES(CALL)                                                                                \
    switch (R) {                                                                                   \
    case 1: CALL(1); return;                                                                       \
    case 2: CALL(2); return;                                                                       \
    case 3: CALL(3); return;                                                                       \
    case 4: CALL(4); return;                                                                       \
    case 5: CALL(5); return;                                                                       \
    case 6: CALL(6); return;                                                                       \
    case 7: CALL(7); return;                                                                       \
    default: CALL(8); return;                                                                      \
    }
#define I8(R) tile_int8(R, w, ns, next, xs, acc, init)
#define I4(R) tile_packed(FMT_INT4, R, w, ns, next, xs, acc, init)
#define T2(R) tile_packed(FMT_TERNARY, R, w, ns, next, xs, acc, init)

void onebit_hi_avx2_tile(int fmt, int R, const uint8_t *w, int64_t ns, const uint8_t *next, const int8_t *xs,
                         int32_t *acc, int init) {
    if (fmt == FMT_INT8) CASES(I8)
    if (fmt == FMT_INT4) CASES(I4)
    CASES(T2)
}
