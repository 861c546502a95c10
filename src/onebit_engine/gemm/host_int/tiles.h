/* The tile layout and the tile-function contract shared by kernel.c (driver, AVX2 path) and
 * vnni.c (AVX-512 VNNI path, also built against the scalar emulation for the tests).
 *
 * Layout (gemm/host_int/layout.py is the numpy twin): a weight [N, K] is stored as tiles of T output
 * channels (T = 8 for AVX2, 16 for VNNI), each a run of S steps of T * 4 bytes; byte 4 * j + i of step s
 * of tile t belongs to channel t * T + j and holds biased codes (code + BIAS, so every field is unsigned):
 *   int8:    code(k = 4s + i) + 128 (VNNI); |code| + 128 * (code < 0), sign and magnitude (AVX2)
 *   int4:    low nibble code(k = 8s + i) + 8, high nibble code(k = 8s + 4 + i) + 8
 *   ternary: bits 2f..2f+1 code(k = 16s + 4f + i) + 1, f = 0..3
 * Padding (k >= K, n >= N) holds code 0. One step is one vector load (32 or 64 bytes) for T channels.
 *
 * Activations of a block of R rows: groups of 4 codes, row-interleaved: group g (k = 4g..4g+3) of row r
 * at xs + (g * R + r) * 4, zero padded to S * CPB groups, so one 4-byte broadcast feeds T channels.
 */
#ifndef HOST_INT_TILES_H
#define HOST_INT_TILES_H
#include <stdint.h>

#define FMT_INT8 0
#define FMT_INT4 1
#define FMT_TERNARY 2
#define PATH_AVX2 0
#define PATH_VNNI 1
/* Bytes of weight stream prefetched ahead, per path. avx2: tuned on Zen 3. vnni: 8192 on Zen 5, where an
 * 8-row call runs ~6 cycles per 64-byte step and 2048 bytes ahead came ~50 ns before use, less than the
 * memory latency: 8-row / 1-row fell from 1.41-1.76 to 1.04-1.30 (cold 17408 x 5120, docs/host-int.md). */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 2048
#endif
#ifndef PREFETCH_AHEAD_VNNI
#define PREFETCH_AHEAD_VNNI 8192
#endif
/* From this many rows on, the vnni path prefetches into L2 (prefetcht1), below it into L1 (prefetcht0). A call of
 * many rows spends several cycles on each 64-byte step, and lines pulled into L1 that far ahead were evicted or
 * held fill buffers the demand loads needed: on Zen 4, cold weights, medians of 40 interleaved calls, 8 rows took
 * 0.93 -> 0.65 ms (int8 4096 x 4096, 1 thread) and 1.81 -> 1.68 ms (int4 17408 x 5120, 2 threads), while 1 row
 * was 0.57 -> 0.86 ms slower with it (int8: no gain below 6 rows; int4: from 4; ternary: no difference). */
#ifndef PREFETCH_L2_ROWS_VNNI
#define PREFETCH_L2_ROWS_VNNI 6
#endif
/* int4 from 2 rows: 2 threads, cold 17408 x 5120, medians of 80 interleaved calls, L1 -> L2: 3 rows 2.08 -> 1.63 ms,
 * 2 rows 1.92 -> 1.77, 4 and 5 rows unchanged (int8: no difference at 2-5 rows); inside a 27B verify in a fast-memory
 * minute a pass of 3 rows had cost 1.40 plain steps against 1.17 for 4 (docs/host-int.md). */
#ifndef PREFETCH_L2_ROWS_VNNI_INT4
#define PREFETCH_L2_ROWS_VNNI_INT4 2
#endif
/* Below this many rows the vnni path issues no software prefetch at all: a 1-row call runs ~1 cycle per step and the
 * hardware prefetcher alone streams better. Zen 4, 2 threads, cold 17408 x 5120 x 24, share of a read stream measured
 * beside each call: int4 0.78 -> 0.84 while the stream ran >= 44 GB/s, 0.94 -> 0.95 below 38; int8 0.87 -> 0.90 and
 * 0.96 -> 0.97; ternary 0.78 -> 0.81 and 0.93 -> 0.94. 2 and 3 rows: no difference beyond the noise (+-2%). */
#ifndef PREFETCH_MIN_ROWS_VNNI
#define PREFETCH_MIN_ROWS_VNNI 2
#endif

/* Add the products of steps [0, ns) of one tile (w: its first step) with the R rows of xs (from the
 * block's first group of this K range) into acc [R][T] int32 (modulo 2^32; read unless init). The
 * weight stream is prefetched ahead; past this run of len = ns * T * 4 bytes it goes on at `next`,
 * the run that the caller reads after this one. */
typedef void (*tile_fn)(int fmt, int R, const uint8_t *w, int64_t ns, const uint8_t *next, const int8_t *xs,
                        int32_t *acc, int init);

/* avx2.c: the AVX2 tile function (T = 8, R = 1..8). */
void onebit_hi_avx2_tile(int fmt, int R, const uint8_t *w, int64_t ns, const uint8_t *next, const int8_t *xs,
                         int32_t *acc, int init);

/* vnni.c: the VNNI tile function (T = 16, R = 1..16), and whether it is the emulation. */
void onebit_hi_vnni_tile(int fmt, int R, const uint8_t *w, int64_t ns, const uint8_t *next, const int8_t *xs,
                         int32_t *acc, int init);
int onebit_hi_vnni_emulated(void);

/* The prefetch address `ahead` bytes past offset `off` of a run of `len` bytes at w that continues at `next`. */
static inline const char *prefetch_addr_at(const uint8_t *w, int64_t off, int64_t len, const uint8_t *next, int64_t ahead) {
    int64_t a = off + ahead;
    /* formed as integers: the address may lie past the weights (a prefetch never faults) */
    return (const char *)(a < len ? (uintptr_t)w + (uintptr_t)a : (uintptr_t)next + (uintptr_t)(a - len));
}
#define prefetch_addr(w, off, len, next) prefetch_addr_at(w, off, len, next, PREFETCH_AHEAD)
#define prefetch_addr_vnni(w, off, len, next) prefetch_addr_at(w, off, len, next, PREFETCH_AHEAD_VNNI)
#endif
