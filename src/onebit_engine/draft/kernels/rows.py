"""Row-wise kernels of a draft layer: RMSNorm, SwiGLU's silu(gate) * up, one side of the grouped dynamic conv."""
from __future__ import annotations

import numpy as np

from ._numba import jit
from .mathf import exp_neg32

F32 = np.float32
_ZERO, _ONE = F32(0.0), F32(1.0)


@jit
def rms_norm(x, weight, eps, out):
    """``weight * (x * (1 / sqrt(mean(x^2) + eps)))`` per row (``ops.norm.rms_norm``'s steps; the mean
    is a sequential float32 sum). Shapes: x [T, H]; weight [H]; out [T, H] (written, returned)."""
    h = x.shape[1]
    for t in range(x.shape[0]):
        src = x[t]
        dst = out[t]
        acc = _ZERO
        for i in range(h):
            acc += src[i] * src[i]
        inv = _ONE / np.sqrt(acc / F32(h) + eps)
        for i in range(h):
            dst[i] = weight[i] * (src[i] * inv)
    return out


@jit
def silu_mul(gu, inter, out):
    """``silu(gate) * up`` for the fused gate/up output. Shapes: gu [T, 2I]; out [T, I] (written, returned).
    sigmoid from ``exp(-|g|)`` (the kernel exp), so it never overflows."""
    for t in range(gu.shape[0]):
        g = gu[t, :inter]
        u = gu[t, inter:]
        dst = out[t]
        for i in range(inter):
            x = g[i]
            e = exp_neg32(-np.abs(x))
            sig = _ONE / (_ONE + e) if x >= _ZERO else e / (_ONE + e)
            dst[i] = (x * sig) * u[i]
    return out


@jit
def conv_side(y, dyn, base, group_size, out):
    """One side of the grouped dynamic conv, bitwise equal to ``conv.grouped_dynamic_conv``.

    Shapes: y [T, H]; dyn [T, K, G]; base [K, H]; out [T, H] (written, returned). The same float32
    steps per element: ``acc = acc + base * y[t-o]`` then ``acc = acc + dyn * y[t-o]``, tap by tap.
    """
    t_len, h = y.shape
    k = base.shape[0]
    wrow = np.empty(h, np.float32)  # the row's dynamic tap per channel (its group's value)
    for t in range(t_len):
        dst = out[t]
        for c in range(h):
            dst[c] = 0.0
        for o in range(min(k, t + 1)):
            src = y[t - o]
            bo = base[o]
            for grp in range(h // group_size):  # no division per channel
                w = dyn[t, o, grp]
                wg = wrow[grp * group_size : (grp + 1) * group_size]
                for c in range(group_size):
                    wg[c] = w
            for c in range(h):  # the twin's two steps, in its order
                dst[c] = (dst[c] + bo[c] * src[c]) + wrow[c] * src[c]
    return out
