"""The compiled twin of :func:`ops.gated_delta.gdn_token` (numba): one token of conv + SiLU + l2norm +
gated delta rule in one call instead of ~35 numpy calls.

Same math, same order of the recurrence steps; sums run in float32 loops, so it agrees with the numpy
twin to rounding (``tests/unit/test_gdn_fast.py`` pins the two within ``GDN_TWIN_RTOL``), not bitwise.
A target uses one of the two for every row - step, verify and commit replay alike - so its own exact
claims hold with either.
"""
from __future__ import annotations

import numpy as np

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None

F32 = np.float32


def _kernel(conv_state, S, mixed, alpha, beta, w, n_k_heads, dk, dv):
    C, km1 = conv_state.shape
    K = w.shape[1]
    HV = S.shape[0]
    r = HV // n_k_heads
    key_dim = n_k_heads * dk
    x = np.empty(C, np.float32)
    new_conv = np.empty_like(conv_state)
    one = np.float32(1.0)
    for c in range(C):
        acc = w[c, K - 1] * mixed[c]
        for j in range(km1):
            acc = acc + w[c, j] * conv_state[c, j]
        x[c] = acc * (one / (one + np.exp(-acc)))  # silu
        for j in range(km1 - 1):
            new_conv[c, j] = conv_state[c, j + 1]
        if km1 > 0:
            new_conv[c, km1 - 1] = mixed[c]
    q = np.empty((n_k_heads, dk), np.float32)
    k = np.empty((n_k_heads, dk), np.float32)
    scale = np.float32(1.0 / np.sqrt(dk))
    for g in range(n_k_heads):
        sq = np.float32(0.0)
        sk = np.float32(0.0)
        for i in range(dk):
            a = x[g * dk + i]
            b = x[key_dim + g * dk + i]
            sq += a * a
            sk += b * b
        iq = one / np.sqrt(sq + np.float32(1e-6))
        ik = one / np.sqrt(sk + np.float32(1e-6))
        for i in range(dk):
            q[g, i] = (x[g * dk + i] * iq) * scale
            k[g, i] = x[key_dim + g * dk + i] * ik
    o = np.empty((HV, dv), np.float32)
    newS = np.empty_like(S)
    mem = np.empty(dv, np.float32)
    for h in range(HV):
        g = h // r  # value head h reads key head h // r
        a = alpha[h]
        for j in range(dv):
            mem[j] = np.float32(0.0)
        for i in range(dk):
            ki = k[g, i]
            for j in range(dv):
                s = S[h, i, j] * a  # 1. decay
                newS[h, i, j] = s
                mem[j] += ki * s  # 2. read with the key
        for j in range(dv):
            mem[j] = (x[2 * key_dim + h * dv + j] - mem[j]) * beta[h]  # 3. delta
        for j in range(dv):
            o[h, j] = np.float32(0.0)
        for i in range(dk):
            ki = k[g, i]
            qi = q[g, i]
            for j in range(dv):
                s = newS[h, i, j] + ki * mem[j]  # 4. rank-1 write
                newS[h, i, j] = s
                o[h, j] += qi * s  # 5. read-out after the write
    return o, new_conv, newS


gdn_token_fast = nb.njit(cache=True, nogil=True)(_kernel) if nb is not None else None
