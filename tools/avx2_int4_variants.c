/* The host-int avx2 path's 8-row int4 tile against three reorganisations of it (docs/host-int.md, "Zen 3").
 *
 *   python -m ziglang cc -O2 -mavx2 tools/avx2_int4_variants.c -o /tmp/int4v && /tmp/int4v
 *
 * An 8-row int4 verify is bound by this tile on a core without VNNI. Per 8 k of 8 channels and 8 rows the real
 * tile (avx2.c, included below) does 16 vpmaddubsw, 16 vpaddw and 16 4-byte broadcasts of the activations. The
 * variants cut the broadcasts: `b128` loads 16 bytes (4 rows) once and shuffles the weights instead (vpshufd: 2
 * channels x 4 rows a product); `b64` loads 8 bytes (2 rows) and unpacks the weights (4 channels x 2 rows);
 * `two_tiles` lets each broadcast feed two tiles (16 channels, 4 rows a pass, two passes). Each is checked
 * bitwise against the real tile first, then all four are timed in rotating order: weights in L2 (8 tiles of
 * K = 5120) and streamed from memory (17408 x 5120, 44 MB), 1 thread; minimum and median ns per tile. */
#include "../src/onebit_engine/gemm/host_int/avx2.c"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROWS 8

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef void (*variant_fn)(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc);

static void real(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc) {
    onebit_hi_avx2_tile(FMT_INT4, ROWS, w, ns, w, xs, acc, 1);
}

/* int16 sums of 4 steps (8 products a lane: <= 30480, as in avx2.c) added into S as int32 */
static inline void widen(__m256i *a16, int32_t *S) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < 8; r++) {
        __m256i *p = (__m256i *)(S + 8 * r);
        _mm256_storeu_si256(p, _mm256_add_epi32(_mm256_loadu_si256(p), _mm256_madd_epi16(a16[r], ones)));
        a16[r] = _mm256_setzero_si256();
    }
}

static inline __m256i field(__m256i v, int f) {
    return _mm256_and_si256(f ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
}

/* Wider activation loads: `bytes` 16 (b128) or 8 (b64) of the step's row codes at a time.
 * b128: S[2j + h] dword d is channel j + 4 (d >= 4), row 4h + d % 4 (weights vpshufd'd: 2 channels x 4 rows).
 * b64:  S[2p + q] dword d is channel 2q + (d % 4) / 2 + 4 (d >= 4), row 2p + d % 2 (unpacked: 4 channels x 2 rows). */
static inline __attribute__((always_inline)) void wide(const int bytes, const uint8_t *w, int64_t ns, const int8_t *xs,
                                                       int32_t *acc) {
    int32_t S[64] = {0};
    __m256i a[8] = {0};
    for (int64_t s = 0; s < ns; s++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + s * 32));
        for (int f = 0; f < 2; f++) {
            const int8_t *x = xs + (2 * s + f) * ROWS * 4;
            __m256i c = field(v, f);
            if (bytes == 16) {
                __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x)),
                        hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(x + 16))),
                        cj[4] = {_mm256_shuffle_epi32(c, 0x00), _mm256_shuffle_epi32(c, 0x55), _mm256_shuffle_epi32(c, 0xAA),
                                 _mm256_shuffle_epi32(c, 0xFF)};
                for (int j = 0; j < 4; j++) {
                    a[2 * j] = _mm256_add_epi16(a[2 * j], _mm256_maddubs_epi16(cj[j], lo));
                    a[2 * j + 1] = _mm256_add_epi16(a[2 * j + 1], _mm256_maddubs_epi16(cj[j], hi));
                }
            } else {
                __m256i lo = _mm256_unpacklo_epi32(c, c), hi = _mm256_unpackhi_epi32(c, c);
                for (int p = 0; p < 4; p++) {
                    int64_t q;
                    memcpy(&q, x + 8 * p, 8);
                    __m256i xp = _mm256_set1_epi64x(q);
                    a[2 * p] = _mm256_add_epi16(a[2 * p], _mm256_maddubs_epi16(lo, xp));
                    a[2 * p + 1] = _mm256_add_epi16(a[2 * p + 1], _mm256_maddubs_epi16(hi, xp));
                }
            }
        }
        if (s % 4 == 3 || s == ns - 1) widen(a, S);
    }
    for (int i = 0; i < 64; i++) {
        int g = i / 16, h = (i / 8) % 2, d = i % 8, hi = 4 * (d >= 4);
        acc[bytes == 16 ? (4 * h + d % 4) * 8 + g + hi : (2 * g + d % 2) * 8 + 2 * h + (d % 4) / 2 + hi] = S[i];
    }
}

static void b128(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc) { wide(16, w, ns, xs, acc); }
static void b64(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc) { wide(8, w, ns, xs, acc); }

/* Two tiles (w, then w + ns * 32): acc [2 tiles][8 rows][8 channels]. S[64 pass + 8 (4t + r)]: tile t, row 4 pass + r */
static void two_tiles(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc) {
    int32_t S[128] = {0};
    const uint8_t *w1 = w + ns * 32;
    for (int pass = 0; pass < 2; pass++) {
        __m256i a[8] = {0};
        for (int64_t s = 0; s < ns; s++) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(w + s * 32)), v1 = _mm256_loadu_si256((const __m256i *)(w1 + s * 32));
            for (int f = 0; f < 2; f++) {
                __m256i c0 = field(v0, f), c1 = field(v1, f);
                for (int r = 0; r < 4; r++) {
                    __m256i b = bcast4(xs + ((2 * s + f) * ROWS + 4 * pass + r) * 4);
                    a[r] = _mm256_add_epi16(a[r], _mm256_maddubs_epi16(c0, b));
                    a[4 + r] = _mm256_add_epi16(a[4 + r], _mm256_maddubs_epi16(c1, b));
                }
            }
            if (s % 4 == 3 || s == ns - 1) widen(a, S + 64 * pass);
        }
    }
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 8; c++) acc[t * 64 + (4 * pass + r) * 8 + c] = S[64 * pass + 8 * (4 * t + r) + c];
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    const int64_t K = 5120, ns = K / 8, big = 2176; /* 17408 channels */
    const char *name[4] = {"real", "b128", "b64", "two_tiles"};
    variant_fn fn[4] = {real, b128, b64, two_tiles};
    uint8_t *w = aligned_alloc(64, (size_t)(ns * 32 * big));
    int8_t *xs = aligned_alloc(64, (size_t)(K * ROWS + 64));
    srand(1);
    for (int64_t i = 0; i < ns * 32 * big; i++) w[i] = (uint8_t)rand();
    for (int64_t i = 0; i < K * ROWS; i++) xs[i] = (int8_t)(rand() % 255 - 127);
    int32_t want[128], got[128];
    real(w, ns, xs, want);
    real(w + ns * 32, ns, xs, want + 64);
    for (int v = 1; v < 4; v++) {
        memset(got, 0, sizeof got);
        fn[v](w, ns, xs, got);
        if (v != 3) fn[v](w + ns * 32, ns, xs, got + 64);
        if (memcmp(got, want, sizeof want)) {
            printf("{\"error\": \"%s differs from the real tile\"}\n", name[v]);
            return 1;
        }
    }
    for (int mode = 0; mode < 2; mode++) {
        int64_t tiles = mode ? big : 8, reps = mode ? 15 : 301;
        double t[4][301];
        for (int i = 0; i < reps; i++)
            for (int k = 0; k < 4; k++) {
                int v = (i + k) % 4;
                double t0 = now();
                for (int64_t j = 0; j < tiles; j += v == 3 ? 2 : 1) fn[v](w + j * ns * 32, ns, xs, got);
                t[v][i] = (now() - t0) / tiles * 1e9;
            }
        for (int v = 0; v < 4; v++) {
            qsort(t[v], (size_t)reps, sizeof(double), cmp);
            printf("{\"weights\": \"%s\", \"variant\": \"%s\", \"ns_per_tile_min\": %.0f, \"ns_per_tile_median\": %.0f, "
                   "\"gmac_s_median\": %.1f}\n", mode ? "streamed" : "L2", name[v], t[v][0], t[v][reps / 2],
                   8.0 * K * ROWS / t[v][reps / 2]);
        }
    }
    return 0;
}
