/* Re-tile a block of a quantized weight from the file format into a native path's tile layout.
 *
 * Twin (bitwise, tested): onebit_engine.gemm.host_int.layout.tile_codes (with quant.formats.unpack_codes
 * and layout.negative_sums), the readable numpy version. This one exists for speed at load time: a 27B
 * model is 14 GB of int4 codes, and the numpy twin moves about 0.2 GB/s.
 *
 * File format (quant/formats.py), row n of `data` holding ceil(K / codes per byte) bytes:
 *   int8    the int8 code; int4 two's-complement nibbles, code 2b in the low nibble of byte b;
 *   ternary 2-bit fields, code 4b + f at bits 2f of byte b: 0 = 0, 1 = +1, 2 = -1.
 * Tile layout (tiles.h): [ceil(N / T)][S][T][4] bytes, byte (t, s, j, i) of channel t * T + j holding
 *   int8    code(4s + i) + 128 (VNNI), |code| + 128 * (code < 0) (AVX2, sign and magnitude)
 *   int4    low nibble code(8s + i) + 8, high nibble code(8s + 4 + i) + 8
 *   ternary bits 2f: code(16s + 4f + i) + 1
 * and code 0 wherever k >= K or the channel is past the block's rows.
 */
#include <stdint.h>
#include <string.h>

#include "tiles.h"

static inline int code_at(const uint8_t *row, int64_t k, int64_t K, int fmt) {
    if (k >= K) return 0;
    if (fmt == FMT_INT8) return (int8_t)row[k];
    if (fmt == FMT_INT4) {
        int nib = (row[k >> 1] >> (4 * (k & 1))) & 15;
        return nib >= 8 ? nib - 16 : nib;
    }
    int c = (row[k >> 2] >> (2 * (k & 3))) & 3;
    return c == 1 ? 1 : (c == 2 ? -1 : 0);
}

/* One 4-byte field group (t, s, j): the channel's codes of step s, biased, into out[0..3]. */
static inline void group(const uint8_t *row, int64_t s, int64_t K, int fmt, int path, uint8_t *out) {
    for (int i = 0; i < 4; i++) {
        if (fmt == FMT_INT8) {
            int c = code_at(row, 4 * s + i, K, fmt);
            out[i] = (uint8_t)(path == PATH_AVX2 ? (c < 0 ? 128 - c : c) : c + 128);
        } else if (fmt == FMT_INT4) {
            out[i] = (uint8_t)((code_at(row, 8 * s + i, K, fmt) + 8) | ((code_at(row, 8 * s + 4 + i, K, fmt) + 8) << 4));
        } else {
            int b = 0;
            for (int f = 0; f < 4; f++) b |= (code_at(row, 16 * s + 4 * f + i, K, fmt) + 1) << (2 * f);
            out[i] = (uint8_t)b;
        }
    }
}

/* Whole steps without a bounds check per code: the same bytes as group(), a few operations per group. */
static inline void group_fast(const uint8_t *row, int64_t s, int fmt, int path, uint8_t *out) {
    if (fmt == FMT_INT8) {
        for (int i = 0; i < 4; i++) {
            int c = (int8_t)row[4 * s + i];
            out[i] = (uint8_t)(path == PATH_AVX2 ? (c < 0 ? 128 - c : c) : c + 128);
        }
    } else if (fmt == FMT_INT4) { /* bytes 4s..4s+3 hold codes 8s..8s+7; +8 on a two's-complement nibble flips bit 3 */
        const uint8_t *b = row + 4 * s;
        for (int i = 0; i < 4; i++) {
            int lo = (b[i >> 1] >> (4 * (i & 1))) & 15, hi = (b[2 + (i >> 1)] >> (4 * (i & 1))) & 15;
            out[i] = (uint8_t)((lo ^ 8) | ((hi ^ 8) << 4));
        }
    } else { /* bytes 4s..4s+3 hold codes 16s..16s+15: code 16s + 4f + i is field i of byte 4s + f */
        static const uint8_t bias[4] = {1, 2, 0, 1}; /* file code -> code + 1 (3 is never stored) */
        const uint8_t *b = row + 4 * s;
        for (int i = 0; i < 4; i++) {
            int v = 0;
            for (int f = 0; f < 4; f++) v |= bias[(b[f] >> (2 * i)) & 3] << (2 * f);
            out[i] = (uint8_t)v;
        }
    }
}

/* Rows [0, rows) of `data` (row stride `stride` bytes, K codes each) -> tiles of path `path` (T channels),
 * starting at tile 0 of `tiles` (ceil(rows / T) tiles of `steps` steps), and for AVX2 int8 ccorr[row] =
 * sum of |code| over the negative codes (ccorr may be NULL). Returns 0, or -2 on a bad argument. */
int onebit_hi_tile_block(const uint8_t *data, int64_t rows, int64_t stride, int64_t K, int fmt, int path, int64_t steps,
                         uint8_t *tiles, int32_t *ccorr) {
    if (fmt < 0 || fmt > 2 || path < 0 || path > 1 || rows < 0 || K < 0 || steps < 0) return -2;
    const int64_t T = path == PATH_AVX2 ? 8 : 16, per = fmt == FMT_INT8 ? 1 : (fmt == FMT_INT4 ? 2 : 4);
    const int64_t full = K / (4 * per); /* steps whose every code lies below K */
    uint8_t pad[4];
    group(data, 0, 0, fmt, path, pad); /* K = 0: code 0 everywhere */
    for (int64_t t = 0; t < (rows + T - 1) / T; t++) {
        for (int64_t j = 0; j < T; j++) {
            int64_t n = t * T + j;
            uint8_t *out = tiles + (t * steps * T + j) * 4;
            if (n >= rows) {
                for (int64_t s = 0; s < steps; s++) memcpy(out + s * T * 4, pad, 4);
                continue;
            }
            const uint8_t *row = data + n * stride;
            int64_t s = 0;
            for (; s < full && s < steps; s++) group_fast(row, s, fmt, path, out + s * T * 4);
            for (; s < steps; s++) group(row, s, K, fmt, path, out + s * T * 4);
            if (ccorr) {
                int32_t neg = 0;
                for (int64_t k = 0; k < K; k++) {
                    int c = code_at(row, k, K, fmt);
                    if (c < 0) neg -= c;
                }
                ccorr[n] = neg;
            }
        }
    }
    return 0;
}
