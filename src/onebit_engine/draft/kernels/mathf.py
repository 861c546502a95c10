"""float32 tanh (and the shared exp) from plain arithmetic (Cephes ``expf`` / ``tanhf``'s methods and constants).

numba lowers ``np.exp`` / ``np.tanh`` to a libm call per element, which keeps a loop scalar; these
are multiplies, adds, compares and selects only, so the loops calling them vectorise. Their twins are
numpy's exp and tanh (both within ~1.3 ulp of float64; ``tests/draft/test_ops_twins.py``).
"""
from __future__ import annotations

import numpy as np

from ...ops.exp_fast import expf
from ._numba import jit

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "891c79f8dbc1008c"

F32 = np.float32

# Cephes ``expf`` / ``tanhf`` constants (float32, as in the C library).
_LOG2E = F32(1.44269504088896341)
_LN2_HI, _LN2_LO = F32(0.693359375), F32(-2.12194440e-4)
_E0, _E1, _E2, _E3, _E4, _E5 = (F32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_T0, _T1, _T2, _T3, _T4 = (F32(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                             1.33314422036e-1, -3.33332819422e-1))
_ZERO, _HALF, _ONE, _TWO = F32(0.0), F32(0.5), F32(1.0), F32(2.0)
_TANH_SMALL, _TANH_CLAMP = F32(0.625), F32(10.0)


@jit
def _pow2(n):
    """2^n for 0 <= n < 32 as float32, exactly, by its bits (numba's ``<<`` carries a check that
    blocks vectorisation)."""
    m = _ONE * (F32(2.0) if n & 1 else _ONE)
    m = m * (F32(4.0) if n & 2 else _ONE)
    m = m * (F32(16.0) if n & 4 else _ONE)
    m = m * (F32(256.0) if n & 8 else _ONE)
    return m * (F32(65536.0) if n & 16 else _ONE)


# exp for the softmax and the SiLU: the one vectorizable float32 exp of the compiled paths (Cephes expf,
# ops/exp_fast.py); for x <= 0 it is this module's polynomial and constants, 0 below -87.
exp_neg32 = expf


@jit
def tanh32(x):
    """float32 tanh by Cephes ``tanhf``'s method: an odd polynomial below |x| = 0.625, else
    ``1 - 2 / (exp(2|x|) + 1)`` with Cephes ``expf``'s polynomial; |x| is clamped at 10, past which
    tanh rounds to 1. Plain arithmetic only (no libm call), so the loop calling it vectorises; numpy's
    tanh is the twin (``SOFTCAP_ATOL`` in the tests)."""
    a = np.abs(x)
    if a > _TANH_CLAMP:
        a = _TANH_CLAMP
    e = a + a  # exp(e) = 2^n * exp(g), |g| <= ln2 / 2; e >= 0, so truncation is floor
    n = np.int32(_LOG2E * e + _HALF)
    nf = F32(n)
    g = (e - nf * _LN2_HI) - nf * _LN2_LO
    p = ((((_E0 * g + _E1) * g + _E2) * g + _E3) * g + _E4) * g + _E5
    ex = (p * (g * g) + g + _ONE) * _pow2(n)
    big = _ONE - _TWO / (ex + _ONE)
    small = _tanh32_small(x)
    y = small if a < _TANH_SMALL else (big if x > _ZERO else -big)
    return y if a > _ZERO else x  # keeps -0.0 and NaN as they are


_SOFTCAP_CHUNK = 256


@jit
def _tanh32_small(x):
    """``tanh32`` for |x| < 0.625: its polynomial branch alone, the same steps (and -0.0, NaN kept)."""
    s = x * x
    y = ((((_T0 * s + _T1) * s + _T2) * s + _T3) * s + _T4) * s * x + x
    return y if np.abs(x) > _ZERO else x


@jit
def softcap(z, mult, cap):
    """In place ``cap * tanh((z * mult) / cap)`` (the twin's steps: multiply, divide, tanh, multiply).

    Shapes: z [n, V] float32 (overwritten, returned). Where every |z / cap| of a row (else of a chunk
    of it) stays below 0.625, as it does for most of a vocabulary, only the polynomial branch runs;
    a value gets the same bits either way."""
    for t in range(z.shape[0]):
        row = z[t]
        n_big = 0
        for i in range(row.shape[0]):
            y = (row[i] * mult) / cap
            row[i] = y
            n_big += np.abs(y) >= _TANH_SMALL
        if n_big == 0:
            _tanh_small_times(row, cap)
            continue
        for c0 in range(0, row.shape[0], _SOFTCAP_CHUNK):
            ch = row[c0 : c0 + _SOFTCAP_CHUNK]
            n_big = 0
            for i in range(ch.shape[0]):
                n_big += np.abs(ch[i]) >= _TANH_SMALL
            if n_big == 0:
                _tanh_small_times(ch, cap)
            else:
                for i in range(ch.shape[0]):
                    ch[i] = tanh32(ch[i]) * cap
    return z


@jit
def _tanh_small_times(x, cap):
    """In place ``_tanh32_small(x) * cap`` (every |x| < 0.625)."""
    for i in range(x.shape[0]):
        x[i] = _tanh32_small(x[i]) * cap
