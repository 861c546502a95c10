"""A float32 ``exp`` that LLVM can vectorize, for the compiled (numba) paths.

Why: numba calls libm's scalar ``expf`` inside loops (no SIMD without Intel's SVML); the SiLU gates,
sigmoids and softmaxes of one verify row of the built-in target make ~4000 such calls. This one is
Cephes' ``expf`` (range reduction by ln 2 in two parts, degree-6 polynomial, exponent built from its
bits): max relative error 1.35 ulp against float64 ``exp`` on [-87, 88] (``tests/ops/test_exp_fast.py``).
Deterministic per element: the same input gives the same bits in a vector lane or a scalar tail, so a
row's result never depends on the other rows of a call. Callers must be compiled with
``error_model="numpy"`` (numba's default Python error model adds a branch per division, which stops
vectorization).
"""
from __future__ import annotations

import numpy as np

try:
    import numba as nb
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic
except ImportError:  # numba is the optional `fast` extra
    nb = None

LN_FLT_MAX = 88.72283172607422  # the largest float32 whose exp is finite in float32
FLUSH_BELOW = -87.0  # exp(-87) ~ 1.6e-38 is the smallest normal float32; below it this returns 0


def _expf(v):
    F = np.float32
    x = F(FLUSH_BELOW) if v < F(FLUSH_BELOW) else v
    x = F(LN_FLT_MAX) if x > F(LN_FLT_MAX) else x
    fn = np.floor(x * F(1.44269504088896341) + F(0.5))  # nearest integer to x / ln 2
    r = (x - fn * F(0.693359375)) - fn * F(-2.12194440e-4)  # x - fn ln 2, ln 2 split in two parts
    p = F(1.9875691500e-4)
    p = p * r + F(1.3981999507e-3)
    p = p * r + F(8.3334519073e-3)
    p = p * r + F(4.1665795894e-2)
    p = p * r + F(1.6666665459e-1)
    p = p * r + F(5.0000001201e-1)
    p = (p * (r * r) + r) + F(1.0)
    fi = np.int32(fn)
    top = fi > np.int32(127)  # 2^128 has no float32 exponent: scale by 2^127, then by 2
    fi = fi - np.int32(1) if top else fi
    y = p * _bits_to_f32((fi + np.int32(127)) << np.int32(23))  # p * 2^fn
    y = y * F(2.0) if top else y
    y = F(0.0) if v < F(FLUSH_BELOW) else y
    y = F(np.inf) if v > F(LN_FLT_MAX) else y
    return y if v == v else v  # NaN stays NaN


if nb is not None:

    @intrinsic
    def _bits_to_f32(typingctx, x):
        """The float32 whose bits are the int32 x (LLVM bitcast: vectorizes, unlike a view)."""
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(types.int32), codegen

    expf = nb.njit(inline="always", nogil=True, cache=True, error_model="numpy")(_expf)

    @nb.njit(nogil=True, cache=True, error_model="numpy")
    def expf_array(x, out):
        """out[i] = expf(x[i]). Shapes: x, out [n] float32 (for tests and callers outside numba)."""
        for i in range(x.shape[0]):
            out[i] = expf(x[i])
else:
    expf = expf_array = None
