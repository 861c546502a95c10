/* host-int AVX-512 VNNI tile kernel (path "avx512vnni"): the exact products of one 16-channel tile.
 *
 * Built twice by native.py: into the main library with the AVX2 baseline flags, these functions alone
 * compiled for AVX-512 (target attribute; the library runs them only where cpuid and xgetbv say so),
 * and with -DONEBIT_HI_EMULATE_AVX512 against avx512_emul.h into a test-only library, so the
 * same source is checked bitwise on CPUs without AVX-512.
 *
 * One 64-byte load of the tile (tiles.h) holds 4 k (int8), 8 k (int4) or 16 k (ternary) of 16
 * channels as biased unsigned codes; `vpdpbusd` multiplies them with 4 signed activation codes of a row
 * broadcast to all 16 channels ({1to16}) and adds the 4 products into the row's int32 accumulator, with
 * no intermediate int16 (no saturation possible). The caller subtracts BIAS * sum(xq[r]) per row; sums
 * may wrap modulo 2^32 on the way, the final value fits int32, so the result is exact.
 * Up to 8 rows keep two accumulator chains per row (vpdpbusd has a latency of several cycles, a lone
 * chain would set the pace of a 1-row call); 9-16 rows one chain (32 zmm registers in all).
 */
#include <string.h>

#include "tiles.h"

#ifdef ONEBIT_HI_EMULATE_AVX512
#include "avx512_emul.h"
#define TARGET_VNNI
int onebit_hi_vnni_emulated(void) { return 1; }
#else
#include <immintrin.h>
#define TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
int onebit_hi_vnni_emulated(void) { return 0; }
#endif

#define VB 64 /* bytes per step: 16 channels x 4 bytes */

static inline __attribute__((always_inline)) TARGET_VNNI __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline __attribute__((always_inline)) TARGET_VNNI void tile(int fmt, const int R, const uint8_t *w, int64_t ns,
                                                                   const uint8_t *next, const int8_t *xs,
                                                                   int32_t *acc, int init) {
    const int two = R <= 8;
    __m512i a[16], b[16];
    for (int r = 0; r < R; r++) {
        a[r] = init ? _mm512_setzero_si512() : _mm512_loadu_si512(acc + 16 * r);
        b[r] = _mm512_setzero_si512();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    const int64_t len = ns * VB;
    for (int64_t s = 0; s < ns; s++) {
        if (R >= (fmt == FMT_INT4 ? PREFETCH_L2_ROWS_VNNI_INT4 : PREFETCH_L2_ROWS_VNNI)) /* constants: no branch */
            __builtin_prefetch(prefetch_addr_vnni(w, s * VB, len, next), 0, 2);
        else if (R >= PREFETCH_MIN_ROWS_VNNI)
            __builtin_prefetch(prefetch_addr_vnni(w, s * VB, len, next), 0, 3);
        __m512i v = _mm512_loadu_si512(w + s * VB);
        if (fmt == FMT_INT8) { /* group s; two chains: even steps into a, odd into b */
            const int8_t *x = xs + s * R * 4;
            if (two && (s & 1))
                for (int r = 0; r < R; r++) b[r] = _mm512_dpbusd_epi32(b[r], v, bcast4(x + 4 * r));
            else
                for (int r = 0; r < R; r++) a[r] = _mm512_dpbusd_epi32(a[r], v, bcast4(x + 4 * r));
        } else if (fmt == FMT_INT4) { /* groups 2s (low nibbles) and 2s + 1 (high nibbles) */
            const int8_t *x = xs + 2 * s * R * 4;
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            for (int r = 0; r < R; r++) a[r] = _mm512_dpbusd_epi32(a[r], lo, bcast4(x + 4 * r));
            if (two)
                for (int r = 0; r < R; r++) b[r] = _mm512_dpbusd_epi32(b[r], hi, bcast4(x + 4 * (R + r)));
            else
                for (int r = 0; r < R; r++) a[r] = _mm512_dpbusd_epi32(a[r], hi, bcast4(x + 4 * (R + r)));
        } else { /* ternary: groups 4s + f, field f at bits 2f */
            const int8_t *x = xs + 4 * s * R * 4;
            for (int f = 0; f < 4; f++) {
                __m512i c = _mm512_and_si512(_mm512_srli_epi16(v, 2 * f), m2);
                if (two && (f & 1))
                    for (int r = 0; r < R; r++) b[r] = _mm512_dpbusd_epi32(b[r], c, bcast4(x + 4 * (f * R + r)));
                else
                    for (int r = 0; r < R; r++) a[r] = _mm512_dpbusd_epi32(a[r], c, bcast4(x + 4 * (f * R + r)));
            }
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_si512(acc + 16 * r, two ? _mm512_add_epi32(a[r], b[r]) : a[r]);
}

#define CASE(FMT, R) \
    case R: tile(FMT, R, w, ns, next, xs, acc, init); return;
#define ROWS(FMT)                                                                                       \
    switch (R) {                                                                                        \
        CASE(FMT, 1) CASE(FMT, 2) CASE(FMT, 3) CASE(FMT, 4) CASE(FMT, 5) CASE(FMT, 6) CASE(FMT, 7)      \
        CASE(FMT, 8) CASE(FMT, 9) CASE(FMT, 10) CASE(FMT, 11) CASE(FMT, 12) CASE(FMT, 13) CASE(FMT, 14) \
        CASE(FMT, 15) default: tile(FMT, 16, w, ns, next, xs, acc, init); return;                       \
    }

TARGET_VNNI void onebit_hi_vnni_tile(int fmt, int R, const uint8_t *w, int64_t ns, const uint8_t *next,
                                     const int8_t *xs, int32_t *acc, int init) {
    if (fmt == FMT_INT8) ROWS(FMT_INT8)
    if (fmt == FMT_INT4) ROWS(FMT_INT4)
    ROWS(FMT_TERNARY)
}
