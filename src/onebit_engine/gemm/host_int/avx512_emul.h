/* Scalar emulation of exactly the AVX-512 intrinsics vnni.c and delta.c use, following the pseudo-code of
 * Intel's Intrinsics Guide, so the VNNI kernel's very source can be tested bitwise on a CPU without
 * AVX-512 (built as a separate, test-only library by native.py; never chosen by dispatch).
 * Included instead of <immintrin.h>; nothing else of AVX-512 may be used by the kernel (it would not
 * compile here). Wrapping arithmetic is done in uint32 (no signed-overflow UB). */
#ifndef HOST_INT_AVX512_EMUL_H
#define HOST_INT_AVX512_EMUL_H
#include <stdint.h>
#include <string.h>

typedef union {
    int8_t i8[64];
    uint8_t u8[64];
    uint16_t u16[32];
    int32_t i32[16];
    uint32_t u32[16];
} __m512i;

static inline __m512i _mm512_setzero_si512(void) {
    __m512i d;
    memset(&d, 0, sizeof d);
    return d;
}

/* unaligned load and store of a vector type T, as bytes */
#define EMUL_LOAD_STORE(T, load, store)                                                  \
    static inline T load(void const *mem_addr) {                                         \
        T d;                                                                             \
        memcpy(&d, mem_addr, sizeof d);                                                  \
        return d;                                                                        \
    }                                                                                    \
    static inline void store(void *mem_addr, T a) { memcpy(mem_addr, &a, sizeof a); }

EMUL_LOAD_STORE(__m512i, _mm512_loadu_si512, _mm512_storeu_si512)

static inline __m512i _mm512_set1_epi32(int a) {
    __m512i d;
    for (int j = 0; j < 16; j++) d.i32[j] = a;
    return d;
}

static inline __m512i _mm512_set1_epi8(char a) {
    __m512i d;
    for (int j = 0; j < 64; j++) d.i8[j] = (int8_t)a;
    return d;
}

static inline __m512i _mm512_and_si512(__m512i a, __m512i b) {
    __m512i d;
    for (int j = 0; j < 16; j++) d.u32[j] = a.u32[j] & b.u32[j];
    return d;
}

/* dst.word[j] := imm8 > 15 ? 0 : ZeroExtend16(a.word[j] >> imm8) */
static inline __m512i _mm512_srli_epi16(__m512i a, unsigned int imm8) {
    __m512i d;
    for (int j = 0; j < 32; j++) d.u16[j] = imm8 > 15 ? 0 : (uint16_t)(a.u16[j] >> imm8);
    return d;
}

static inline __m512i _mm512_add_epi32(__m512i a, __m512i b) {
    __m512i d;
    for (int j = 0; j < 16; j++) d.u32[j] = a.u32[j] + b.u32[j];
    return d;
}

/* tmpi := ZeroExtend16(a.byte[4j+i]) * SignExtend16(b.byte[4j+i]); dst.dword[j] := src.dword[j] + tmp1 + ... + tmp4
 * (no saturation: the sum wraps modulo 2^32) */
static inline __m512i _mm512_dpbusd_epi32(__m512i src, __m512i a, __m512i b) {
    __m512i d;
    for (int j = 0; j < 16; j++) {
        uint32_t s = src.u32[j];
        for (int i = 0; i < 4; i++) s += (uint32_t)((int32_t)a.u8[4 * j + i] * (int32_t)b.i8[4 * j + i]);
        d.u32[j] = s;
    }
    return d;
}

/* float32 lanes (delta.c): each lane one IEEE float32 operation, as the vector instruction does it
 * (-ffp-contract=off keeps a multiply and the add after it two roundings). */
typedef struct {
    float f[16];
} __m512;

EMUL_LOAD_STORE(__m512, _mm512_loadu_ps, _mm512_storeu_ps)

static inline __m512 _mm512_set1_ps(float a) {
    __m512 d;
    for (int j = 0; j < 16; j++) d.f[j] = a;
    return d;
}

static inline __m512 _mm512_setzero_ps(void) { return _mm512_set1_ps(0.0f); }

#define EMUL_PS_LANEWISE(name, op)                          \
    static inline __m512 name(__m512 a, __m512 b) {         \
        __m512 d;                                           \
        for (int j = 0; j < 16; j++) d.f[j] = a.f[j] op b.f[j]; \
        return d;                                           \
    }
EMUL_PS_LANEWISE(_mm512_add_ps, +)
EMUL_PS_LANEWISE(_mm512_sub_ps, -)
EMUL_PS_LANEWISE(_mm512_mul_ps, *)
#undef EMUL_PS_LANEWISE
#endif
