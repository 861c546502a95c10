"""Compiled twins (numba) of ``ops.norm``: both RMSNorm flavours and the SwiGLU gate, for the target's
and the draft's compiled paths.

Each call handles every row of a row set; a row's bits depend only on that row (same loop for every
row). Sums run in float32 loops, so they agree with ``ops.norm`` to rounding, not bitwise.

The RMSNorm's sum of squares runs in ``LANES`` running sums (element i into sum i % LANES, then the sums
halved pairwise, then the tail in order): a fixed order, so the bits depend on the row and its length alone,
on any CPU and vector width. One running sum made every add wait for the one before it (~4 cycles each):
4.2 us a 5120-wide row, 33 of the 39 us of a 27B verify's 8-row norm; 64 sums take 0.4 us (Zen 4).
"""
from __future__ import annotations

import numpy as np

from .exp_fast import expf

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "cfdbf45a8c12f42c"


LANES = 64  # four AVX-512 registers of running sums; AVX2 keeps eight


def _sum_squares(x, r):
    """sum over i of x[r, i]^2 in float32, in LANES running sums (the module says why and in what order)."""
    D = x.shape[1]
    acc = np.zeros(LANES, np.float32)
    m = D - D % LANES
    for i in range(0, m, LANES):
        for lane in range(LANES):
            v = x[r, i + lane]
            acc[lane] += v * v
    w = LANES
    while w > 1:
        w //= 2
        for lane in range(w):
            acc[lane] += acc[lane + w]
    s = acc[0]
    for i in range(m, D):
        s += x[r, i] * x[r, i]
    return s


def _rms_norm_rows(x, w, eps, centred, out):
    """RMSNorm of every row: zero-centred ``x / rms(x) * (1 + w)`` (the target) when ``centred``, else
    plain ``w * (x / rms(x))`` (Qwen3 / the DFlash draft). Shapes: x, out [R, D]; w [D]."""
    R, D = x.shape
    one = np.float32(1.0)
    for r in range(R):
        ss = _sum_squares(x, r)
        inv = one / np.sqrt(ss / np.float32(D) + eps)
        for i in range(D):
            out[r, i] = (x[r, i] * inv) * ((one + w[i]) if centred else w[i])


def _silu_mul(y, out):
    """SwiGLU's gate: ``silu(gate) * up`` for y = [gate | up]. Shapes: y [R, 2I]; out [R, I]."""
    R, I = out.shape
    one = np.float32(1.0)
    for r in range(R):
        for i in range(I):
            g = y[r, i]
            out[r, i] = (g * (one / (one + expf(-g)))) * y[r, I + i]


if nb is not None:
    _sum_squares = nb.njit(cache=True, nogil=True, error_model="numpy")(_sum_squares)
    rms_norm_rows = nb.njit(cache=True, nogil=True, error_model="numpy")(_rms_norm_rows)
    silu_mul = nb.njit(cache=True, nogil=True, error_model="numpy")(_silu_mul)
else:
    rms_norm_rows = silu_mul = None
