"""Compiled twins (numba) of ``ops.norm``: both RMSNorm flavours and the SwiGLU gate, for the target's
and the draft's compiled paths.

Each call handles every row of a row set; a row's bits depend only on that row (same loop for every
row). Sums run in float32 loops, so they agree with ``ops.norm`` to rounding, not bitwise.
"""
from __future__ import annotations

import numpy as np

from .exp_fast import expf

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None


def _rms_norm_rows(x, w, eps, centred, out):
    """RMSNorm of every row: zero-centred ``x / rms(x) * (1 + w)`` (the target) when ``centred``, else
    plain ``w * (x / rms(x))`` (Qwen3 / the DFlash draft). Shapes: x, out [R, D]; w [D]."""
    R, D = x.shape
    one = np.float32(1.0)
    for r in range(R):
        ss = np.float32(0.0)
        for i in range(D):
            ss += x[r, i] * x[r, i]
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
    rms_norm_rows = nb.njit(cache=True, nogil=True, error_model="numpy")(_rms_norm_rows)
    silu_mul = nb.njit(cache=True, nogil=True, error_model="numpy")(_silu_mul)
else:
    rms_norm_rows = silu_mul = None
