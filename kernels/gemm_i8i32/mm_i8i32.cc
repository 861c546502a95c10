// mm_i8i32.cc - the per-core int8 x int8 -> int32 matmul of the onebit NPU GEMM (AIE2 / AIE2P).
//
// Must match: onebit_engine.gemm.npu.emulator.run_launch (and, through it, the host-int backend:
// acc = xq @ Wq.T exactly in int32). Modelled on mlir-aie aie_kernels/aie2/mm.cc (matmul_vectorized,
// 2x2 expansion). Built by kernels/build.py with Peano (llvm-aie); NOT compiled or run in this repo's CI.
//
// Layout: the DMAs deliver A [m][k], B [k][n] and C [m][n] re-tiled into contiguous r*s, s*t and r*t
// blocks (blocks row-major, elements row-major inside a block), as whole_array_i8i32.py programs them.
// Numerics: acc32 accumulation; the C tile is loaded, one k-chunk is accumulated, and it is stored back
// with to_vector<int32>() at shift 0 - for an int32 output that is the exact dot product (it would wrap
// mod 2^32, never saturate; |sum| <= K * 127 * 128 < 2^31 for the compiled K, checked by the manifest).

#include <stdint.h>
#include <aie_api/aie.hpp>

#ifndef DIM_M
#define DIM_M 16
#endif
#ifndef DIM_K
#define DIM_K 64
#endif
#ifndef DIM_N
#define DIM_N 64
#endif

#if defined(__AIE_ARCH__) && __AIE_ARCH__ == 21   // AIE2P (npu2: Strix, Strix Halo, Krackan)
constexpr unsigned R = 8, S = 8, T = 8;
#else                                              // AIE2 (npu1: Phoenix, Hawk Point)
constexpr unsigned R = 4, S = 8, T = 8;
#endif

template <unsigned rowA, unsigned colA, unsigned colB>
static inline void matmul_i8_i32_2x2(const int8_t *__restrict pA, const int8_t *__restrict pB,
                                     int32_t *__restrict pC) {
  using MMUL = aie::mmul<R, S, T, int8_t, int8_t, acc32>;
  for (unsigned z = 0; z < rowA; z += 2)
    chess_loop_range(2, ) {
      int32_t *__restrict pC1 = pC + (z * colB) * MMUL::size_C;
      int32_t *__restrict pC2 = pC + ((z + 1) * colB) * MMUL::size_C;
      for (unsigned j = 0; j < colB; j += 2)
        chess_prepare_for_pipelining chess_loop_range(2, ) {
          const int8_t *__restrict pA1 = pA + (z * colA) * MMUL::size_A;
          const int8_t *__restrict pA2 = pA + ((z + 1) * colA) * MMUL::size_A;
          const int8_t *__restrict pB1 = pB + j * MMUL::size_B;
          const int8_t *__restrict pB2 = pB + (j + 1) * MMUL::size_B;
          // Accumulate into C: the core is called once per k-chunk of the launch.
          MMUL C00(aie::load_v<MMUL::size_C>(pC1));
          MMUL C01(aie::load_v<MMUL::size_C>(pC1 + MMUL::size_C));
          MMUL C10(aie::load_v<MMUL::size_C>(pC2));
          MMUL C11(aie::load_v<MMUL::size_C>(pC2 + MMUL::size_C));
          for (unsigned i = 0; i < colA; ++i)
            chess_prepare_for_pipelining chess_loop_range(2, ) {
              aie::vector<int8_t, MMUL::size_A> A0 = aie::load_v<MMUL::size_A>(pA1); pA1 += MMUL::size_A;
              aie::vector<int8_t, MMUL::size_A> A1 = aie::load_v<MMUL::size_A>(pA2); pA2 += MMUL::size_A;
              aie::vector<int8_t, MMUL::size_B> B0 = aie::load_v<MMUL::size_B>(pB1); pB1 += MMUL::size_B * colB;
              aie::vector<int8_t, MMUL::size_B> B1 = aie::load_v<MMUL::size_B>(pB2); pB2 += MMUL::size_B * colB;
              C00.mac(A0, B0);
              C01.mac(A0, B1);
              C10.mac(A1, B0);
              C11.mac(A1, B1);
            }
          aie::store_v(pC1, C00.template to_vector<int32_t>()); pC1 += MMUL::size_C;   // shift 0
          aie::store_v(pC1, C01.template to_vector<int32_t>()); pC1 += MMUL::size_C;
          aie::store_v(pC2, C10.template to_vector<int32_t>()); pC2 += MMUL::size_C;
          aie::store_v(pC2, C11.template to_vector<int32_t>()); pC2 += MMUL::size_C;
        }
    }
}

static_assert(DIM_M % (2 * R) == 0, "m must be a multiple of 2r (2x2 expansion)");
static_assert(DIM_K % S == 0, "k must be a multiple of s");
static_assert(DIM_N % (2 * T) == 0, "n must be a multiple of 2t (2x2 expansion)");

extern "C" {

void zero_i32(int32_t *__restrict c) {
  const aie::vector<int32_t, 16> z = aie::zeros<int32_t, 16>();
  for (unsigned i = 0; i < DIM_M * DIM_N; i += 16) aie::store_v(c + i, z);
}

void matmul_i8_i32(const int8_t *__restrict a, const int8_t *__restrict b, int32_t *__restrict c) {
  matmul_i8_i32_2x2<DIM_M / R, DIM_K / S, DIM_N / T>(a, b, c);
}

}  // extern "C"
