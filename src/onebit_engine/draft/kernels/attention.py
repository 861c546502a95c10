"""The block's attention over [context; block] keys, compiled: q/k heads (norm + RoPE), scores, softmax, values.

Keys are read in the state's transposed layout, so the score loop runs over contiguous positions;
query heads that share a KV head go two at a time (one pass over the keys and values for both,
each head with exactly its own arithmetic).
"""
from __future__ import annotations

import numpy as np

from ._numba import jit
from .mathf import exp_neg32

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "db590632416744e7"

F32 = np.float32
_ZERO = F32(0.0)


@jit
def norm_rope_heads(y, col0, weight, cos, sin, eps, out):
    """Per-head RMSNorm then rotate-half RoPE of columns ``col0..`` of y.

    Shapes: y [T, >= col0 + n*hd]; weight [hd]; cos, sin [T, hd]; out [n, T, hd] (written, returned).
    Same op order as ``ops.heads_numpy``: ``w * (x * (1 / sqrt(mean(x^2) + eps)))``, then
    ``x * cos + rotate_half(x) * sin``; the mean is a sequential float32 sum.
    """
    n, t_len, hd = out.shape
    half = hd // 2
    x = np.empty(hd, np.float32)
    one = np.float32(1.0)
    for t in range(t_len):
        c = cos[t]
        s = sin[t]
        for h in range(n):
            src = y[t, col0 + h * hd : col0 + (h + 1) * hd]
            acc = np.float32(0.0)
            for i in range(hd):
                acc += src[i] * src[i]
            inv = one / np.sqrt(acc / np.float32(hd) + np.float32(eps))
            for i in range(hd):
                x[i] = weight[i] * (src[i] * inv)
            dst = out[h, t]
            for i in range(half):
                dst[i] = x[i] * c[i] + (-x[i + half]) * s[i]
            for i in range(half, hd):
                dst[i] = x[i] * c[i] + x[i - half] * s[i]
    return out


@jit
def block_keys_t(kb):
    """The block's keys in the context's transposed layout. Shapes: kb [Hk, B, hd] -> [Hk, hd, B]."""
    hk, b, hd = kb.shape
    kbt = np.empty((hk, hd, b), np.float32)
    for h in range(hk):
        for j in range(b):
            for d in range(hd):
                kbt[h, d, j] = kb[h, j, d]
    return kbt


@jit
def attend_block(q, kt, vc, s, kb, vb, causal, window, scale, out):
    """Block rows attend to [context; block] keys without concatenating them (the mask of docs/draft.md).

    Shapes: q [Hq, B, hd]; kt [Hk, hd, >= s] context keys transposed (``DraftState.kt``); vc [Hk, >= s, hd];
    kb, vb [Hk, B, hd] block keys/values at positions s..s+B-1; out [B, Hq*hd] (written, returned).
    ``window`` <= 0 means no window. Each (row, KV head) is :func:`attend_pair`, in any order: the pool's
    jobs (``draft.pool``) run the same function on the same inputs, so they write the same bits.
    """
    hk, b, hd = kb.shape
    kbt = block_keys_t(kb)
    sc = np.empty((2, s + b), np.float32)
    acc = np.empty((2, hd), np.float32)
    for j in range(b):
        for kh in range(hk):
            attend_pair(q, kt, vc, s, kbt, vb, causal, window, scale, j, kh, sc, acc, out)
    return out


@jit
def attend_pair(q, kt, vc, s, kbt, vb, causal, window, scale, j, kh, sc, acc, out):
    """Row j's query heads that share KV head kh: out[j, their columns]. Per head: scores, softmax with the max
    subtracted, the probabilities normalised, then the value sum (the twin's order of steps), over the row's own
    visible keys in a fixed order, so its bits depend on nothing else. Heads go two at a time (one pass over
    their shared keys and values, each head with exactly its own arithmetic).

    Shapes: q [Hq, B, hd]; kt, vc as :func:`attend_block`; kbt [Hk, hd, B] (:func:`block_keys_t`); vb
    [Hk, B, hd]; sc [2, >= s + B], acc [2, hd] scratch; out [B, Hq*hd]."""
    hq, b, hd = q.shape
    g = hq // kbt.shape[0]
    qpos = s + j
    lo = 0
    hi = qpos + 1 if causal else s + b
    if window > 0:
        lo = max(lo, qpos - window + 1)
        if not causal:
            hi = min(hi, qpos + window)
    c_lo, c_hi = min(lo, s), min(hi, s)  # context part [c_lo, c_hi)
    b_lo, b_hi = max(lo, s) - s, max(hi, s) - s  # block part, block-relative
    nc, n = c_hi - c_lo, c_hi - c_lo + b_hi - b_lo
    r0, r1 = sc[0, :n], sc[1, :n]
    a0, a1 = acc[0], acc[1]
    for h in range(kh * g, (kh + 1) * g, 2):  # query heads in pairs: one pass over their shared K/V
        if h + 1 < (kh + 1) * g:
            _scores2(r0[:nc], r1[:nc], q[h, j], q[h + 1, j], kt[kh], c_lo)
            _scores2(r0[nc:], r1[nc:], q[h, j], q[h + 1, j], kbt[kh], b_lo)
            _softmax(r0, scale)
            _softmax(r1, scale)
            for d in range(hd):
                a0[d] = 0.0
                a1[d] = 0.0
            _weighted_sum2(a0, a1, r0[:nc], r1[:nc], vc[kh], c_lo)
            _weighted_sum2(a0, a1, r0[nc:], r1[nc:], vb[kh], b_lo)
            out[j, (h + 1) * hd : (h + 2) * hd] = a1
        else:  # the same arithmetic per head, alone
            _scores(r0[:nc], q[h, j], kt[kh], c_lo)
            _scores(r0[nc:], q[h, j], kbt[kh], b_lo)
            _softmax(r0, scale)
            for d in range(hd):
                a0[d] = 0.0
            _weighted_sum(a0, r0[:nc], vc[kh], c_lo)
            _weighted_sum(a0, r0[nc:], vb[kh], b_lo)
        out[j, h * hd : (h + 1) * hd] = a0


@jit
def _softmax(row, scale):
    """In place ``softmax(row * scale)``: max subtracted, exp, normalised by the fixed-order sum."""
    for i in range(row.shape[0]):
        row[i] = row[i] * scale
    m = _max4(row)
    for i in range(row.shape[0]):
        row[i] = exp_neg32(row[i] - m)
    tot = _sum4(row)
    for i in range(row.shape[0]):
        row[i] = row[i] / tot


@jit
def block_heads(qkv, hq, hk, q_norm, k_norm, cos, sin, eps):
    """The block's q, k, v heads from its fused projection, q and k normed and rotated (:func:`norm_rope_heads`).
    Shapes: qkv [B, (Hq + 2 Hk) * hd] -> q [Hq, B, hd], kb [Hk, B, hd], vb [Hk, B, hd]."""
    b, hd = qkv.shape[0], q_norm.shape[0]
    q = norm_rope_heads(qkv, 0, q_norm, cos, sin, eps, np.empty((hq, b, hd), np.float32))
    kb = norm_rope_heads(qkv, hq * hd, k_norm, cos, sin, eps, np.empty((hk, b, hd), np.float32))
    vb = np.empty((hk, b, hd), np.float32)
    for h in range(hk):
        for j in range(b):
            src = qkv[j, (hq + hk + h) * hd : (hq + hk + h + 1) * hd]
            for d in range(hd):
                vb[h, j, d] = src[d]
    return q, kb, vb


@jit
def attention_qkv(qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window, scale, out):
    """:func:`attend_block` straight from the fused q/k/v projection (:func:`block_heads`).
    Shapes: qkv [B, (Hq + 2 Hk) * hd]; the rest as there."""
    q, kb, vb = block_heads(qkv, hq, hk, q_norm, k_norm, cos, sin, eps)
    return attend_block(q, kt, vc, s, kb, vb, causal, window, scale, out)


@jit
def _max4(x):
    """max of x (NaN ignored) on four running maxima: the same value in any order, and no chain of
    dependent compares."""
    m0 = m1 = m2 = m3 = np.float32(-np.inf)
    i = 0
    while i + 4 <= x.shape[0]:
        m0 = x[i] if x[i] > m0 else m0
        m1 = x[i + 1] if x[i + 1] > m1 else m1
        m2 = x[i + 2] if x[i + 2] > m2 else m2
        m3 = x[i + 3] if x[i + 3] > m3 else m3
        i += 4
    while i < x.shape[0]:
        m0 = x[i] if x[i] > m0 else m0
        i += 1
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    return m2 if m2 > m0 else m0


@jit
def _sum4(x):
    """float32 sum of x as four running sums ``x[i::4]`` added ``(s0 + s1) + (s2 + s3)``, then the tail:
    a fixed order (it depends only on len(x)) with a quarter of the sequential chain."""
    s0 = s1 = s2 = s3 = _ZERO
    i = 0
    while i + 4 <= x.shape[0]:
        s0 += x[i]
        s1 += x[i + 1]
        s2 += x[i + 2]
        s3 += x[i + 3]
        i += 4
    tot = (s0 + s1) + (s2 + s3)
    while i < x.shape[0]:
        tot += x[i]
        i += 1
    return tot


@jit
def _scores(dst, qv, keys_t, k0):
    """``dst[i] = sum_d qv[d] * keys_t[d, k0 + i]``, d in groups of 4 (``((a + b) + (c + e))`` added to the
    running sum), the loop over keys vectorised. Shapes: dst [n]; qv [hd]; keys_t [hd, >= k0 + n]."""
    n, hd = dst.shape[0], qv.shape[0]
    for i in range(n):
        dst[i] = 0.0
    d = 0
    while d + 4 <= hd:
        q0, q1, q2, q3 = qv[d], qv[d + 1], qv[d + 2], qv[d + 3]
        r0, r1 = keys_t[d, k0 : k0 + n], keys_t[d + 1, k0 : k0 + n]
        r2, r3 = keys_t[d + 2, k0 : k0 + n], keys_t[d + 3, k0 : k0 + n]
        for i in range(n):
            dst[i] += (q0 * r0[i] + q1 * r1[i]) + (q2 * r2[i] + q3 * r3[i])
        d += 4
    while d < hd:
        qd, r = qv[d], keys_t[d, k0 : k0 + n]
        for i in range(n):
            dst[i] += qd * r[i]
        d += 1


@jit
def _scores2(dst, dst2, qv, qv2, keys_t, k0):
    """:func:`_scores` for two query vectors at once (each with exactly its arithmetic), loading the keys once."""
    n, hd = dst.shape[0], qv.shape[0]
    for i in range(n):
        dst[i] = 0.0
        dst2[i] = 0.0
    d = 0
    while d + 4 <= hd:
        q0, q1, q2, q3 = qv[d], qv[d + 1], qv[d + 2], qv[d + 3]
        p0, p1, p2, p3 = qv2[d], qv2[d + 1], qv2[d + 2], qv2[d + 3]
        r0, r1 = keys_t[d, k0 : k0 + n], keys_t[d + 1, k0 : k0 + n]
        r2, r3 = keys_t[d + 2, k0 : k0 + n], keys_t[d + 3, k0 : k0 + n]
        for i in range(n):
            x0, x1, x2, x3 = r0[i], r1[i], r2[i], r3[i]
            dst[i] += (q0 * x0 + q1 * x1) + (q2 * x2 + q3 * x3)
            dst2[i] += (p0 * x0 + p1 * x1) + (p2 * x2 + p3 * x3)
        d += 4
    while d < hd:
        qd, pd, r = qv[d], qv2[d], keys_t[d, k0 : k0 + n]
        for i in range(n):
            dst[i] += qd * r[i]
            dst2[i] += pd * r[i]
        d += 1


@jit
def _weighted_sum2(acc, acc2, w, w2, vals, k0):
    """:func:`_weighted_sum` for two weight rows at once (each with exactly its arithmetic), loading the
    values once."""
    n, hd = w.shape[0], acc.shape[0]
    i = 0
    while i + 4 <= n:
        w0, w1, w2_, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        u0, u1, u2, u3 = w2[i], w2[i + 1], w2[i + 2], w2[i + 3]
        v0, v1, v2, v3 = vals[k0 + i], vals[k0 + i + 1], vals[k0 + i + 2], vals[k0 + i + 3]
        for d in range(hd):
            acc[d] += (w0 * v0[d] + w1 * v1[d]) + (w2_ * v2[d] + w3 * v3[d])
            acc2[d] += (u0 * v0[d] + u1 * v1[d]) + (u2 * v2[d] + u3 * v3[d])
        i += 4
    while i < n:
        wi, ui, v = w[i], w2[i], vals[k0 + i]
        for d in range(hd):
            acc[d] += wi * v[d]
            acc2[d] += ui * v[d]
        i += 1


@jit
def _weighted_sum(acc, w, vals, k0):
    """``acc += sum_i w[i] * vals[k0 + i]``, keys in groups of 4 like :func:`_scores`, the loop over hd
    vectorised. Shapes: acc [hd]; w [n]; vals [>= k0 + n, hd]."""
    n, hd = w.shape[0], acc.shape[0]
    i = 0
    while i + 4 <= n:
        w0, w1, w2, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        v0, v1, v2, v3 = vals[k0 + i], vals[k0 + i + 1], vals[k0 + i + 2], vals[k0 + i + 3]
        for d in range(hd):
            acc[d] += (w0 * v0[d] + w1 * v1[d]) + (w2 * v2[d] + w3 * v3[d])
        i += 4
    while i < n:
        wi, v = w[i], vals[k0 + i]
        for d in range(hd):
            acc[d] += wi * v[d]
        i += 1


# Cephes ``expf`` / ``tanhf`` constants (float32, as in the C library).
