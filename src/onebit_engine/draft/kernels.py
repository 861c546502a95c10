"""Compiled (numba) twins of the draft's non-GEMM operations; ``draft.ops`` pairs each with its numpy twin.

Every kernel computes a row with the same code whatever the number of rows, in a fixed summation order
(no fastmath, so LLVM may vectorise across independent elements but never reorders a sum): a row's
bits never depend on the other rows, the row count or the row set. Where a kernel only moves or
compares values (``conv_side``, ``top_candidates``) it is bitwise equal to its twin; where it sums
(norms, attention, selector scores) it differs from numpy's pairwise/BLAS sums by rounding only
(``tests/draft/test_ops_twins.py`` pins both).

Inner loops index views with the loop variable only: numba then knows the index is non-negative and
LLVM vectorises them (an index like ``p - lo`` carries a wraparound check that blocks it).
"""
from __future__ import annotations

import numpy as np

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None

F32 = np.float32


def _norm_rope_heads(y, col0, weight, cos, sin, eps, out):
    """Per-head RMSNorm then rotate-half RoPE of columns ``col0..`` of y.

    Shapes: y [T, >= col0 + n*hd]; weight [hd]; cos, sin [T, hd]; out [n, T, hd] (written, returned).
    Same op order as ``Draft._heads``: ``w * (x * (1 / sqrt(mean(x^2) + eps)))``, then
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


def _attend_block(q, kt, vc, s, kb, vb, causal, window, scale, out):
    """Block rows attend to [context; block] keys without concatenating them (dflash.md 2.4 mask).

    Shapes: q [Hq, B, hd]; kt [Hk, hd, >= s] context keys transposed (``DraftState.kt``); vc [Hk, >= s, hd];
    kb, vb [Hk, B, hd] block keys/values at positions s..s+B-1; out [B, Hq*hd] (written, returned).
    ``window`` <= 0 means no window. Per (row, head): scores, softmax with the max subtracted, the
    probabilities normalised, then the value sum (the twin's order of steps). Each row's sums run
    over its own visible keys in a fixed order, so its bits depend on nothing else.
    """
    hq, b, hd = q.shape
    hk = kb.shape[0]
    g = hq // hk
    kbt = np.empty((hk, hd, b), np.float32)  # block keys in the context's layout
    for h in range(hk):
        for j in range(b):
            for d in range(hd):
                kbt[h, d, j] = kb[h, j, d]
    sc = np.empty((2, s + b), np.float32)
    acc = np.empty((2, hd), np.float32)
    for j in range(b):
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
        for kh in range(hk):
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
    return out


def _softmax(row, scale):
    """In place ``softmax(row * scale)``: max subtracted, exp, normalised by the fixed-order sum."""
    for i in range(row.shape[0]):
        row[i] = row[i] * scale
    m = _max4(row)
    for i in range(row.shape[0]):
        row[i] = _exp_neg32(row[i] - m)
    tot = _sum4(row)
    for i in range(row.shape[0]):
        row[i] = row[i] / tot


def _attention_qkv(qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window, scale, out):
    """:func:`_attend_block` straight from the fused q/k/v projection: heads split, q/k normed and rotated
    (:func:`_norm_rope_heads`), then attention. Shapes: qkv [B, (Hq + 2 Hk) * hd]; the rest as there."""
    b, hd = qkv.shape[0], q_norm.shape[0]
    q = _norm_rope_heads(qkv, 0, q_norm, cos, sin, eps, np.empty((hq, b, hd), np.float32))
    kb = _norm_rope_heads(qkv, hq * hd, k_norm, cos, sin, eps, np.empty((hk, b, hd), np.float32))
    vb = np.empty((hk, b, hd), np.float32)
    for h in range(hk):
        for j in range(b):
            src = qkv[j, (hq + hk + h) * hd : (hq + hk + h + 1) * hd]
            for d in range(hd):
                vb[h, j, d] = src[d]
    return _attend_block(q, kt, vc, s, kb, vb, causal, window, scale, out)


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
_LOG2E = F32(1.44269504088896341)
_LN2_HI, _LN2_LO = F32(0.693359375), F32(-2.12194440e-4)
_E0, _E1, _E2, _E3, _E4, _E5 = (F32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_T0, _T1, _T2, _T3, _T4 = (F32(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                             1.33314422036e-1, -3.33332819422e-1))
_ZERO, _HALF, _ONE, _TWO = F32(0.0), F32(0.5), F32(1.0), F32(2.0)
_TANH_SMALL, _TANH_CLAMP = F32(0.625), F32(10.0)


def _pow2(n):
    """2^n for 0 <= n < 32 as float32, exactly, by its bits (numba's ``<<`` carries a check that
    blocks vectorisation)."""
    m = _ONE * (F32(2.0) if n & 1 else _ONE)
    m = m * (F32(4.0) if n & 2 else _ONE)
    m = m * (F32(16.0) if n & 4 else _ONE)
    m = m * (F32(256.0) if n & 8 else _ONE)
    return m * (F32(65536.0) if n & 16 else _ONE)


_EXP_FLOOR = F32(-87.0)  # exp(-87) ~ 1.6e-38 is still normal; below it the softmax term is taken as 0


def _pow2_neg(k):
    """2^-k for 0 <= k < 128 as float32, exactly (every partial product is a normal power of two)."""
    m = _ONE * (F32(0.5) if k & 1 else _ONE)
    m = m * (F32(0.25) if k & 2 else _ONE)
    m = m * (F32(2.0**-4) if k & 4 else _ONE)
    m = m * (F32(2.0**-8) if k & 8 else _ONE)
    m = m * (F32(2.0**-16) if k & 16 else _ONE)
    m = m * (F32(2.0**-32) if k & 32 else _ONE)
    return m * (F32(2.0**-64) if k & 64 else _ONE)


def _exp_neg32(x):
    """float32 exp for x <= 0 (a softmax's ``score - max``) by Cephes ``expf``'s method, from plain
    arithmetic so the softmax loop vectorises; 0 below -87 (a relative change < 1e-37 of a sum >= 1).
    Its twin is numpy's exp (``ATTEND_ATOL`` in the tests)."""
    xc = x if x > _EXP_FLOOR else _EXP_FLOOR
    nf = np.floor(_LOG2E * xc + _HALF)  # in [-125, 0]
    g = (xc - nf * _LN2_HI) - nf * _LN2_LO
    p = ((((_E0 * g + _E1) * g + _E2) * g + _E3) * g + _E4) * g + _E5
    e = (p * (g * g) + g + _ONE) * _pow2_neg(np.int32(-nf))
    return _ZERO if x < _EXP_FLOOR else e  # NaN stays NaN


def _tanh32(x):
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


def _tanh32_small(x):
    """``_tanh32`` for |x| < 0.625: its polynomial branch alone, the same steps (and -0.0, NaN kept)."""
    s = x * x
    y = ((((_T0 * s + _T1) * s + _T2) * s + _T3) * s + _T4) * s * x + x
    return y if np.abs(x) > _ZERO else x


def _softcap(z, mult, cap):
    """In place ``cap * tanh((z * mult) / cap)`` (the twin's steps: multiply, divide, tanh, multiply).

    Shapes: z [n, V] float32 (overwritten, returned). Chunks whose |z / cap| all stay below 0.625
    (most of a vocabulary) run the polynomial branch only; a value gets the same bits either way."""
    for t in range(z.shape[0]):
        row = z[t]
        for c0 in range(0, row.shape[0], _SOFTCAP_CHUNK):
            ch = row[c0 : c0 + _SOFTCAP_CHUNK]
            n_big = 0
            for i in range(ch.shape[0]):
                y = (ch[i] * mult) / cap
                ch[i] = y
                n_big += np.abs(y) >= _TANH_SMALL
            if n_big == 0:
                for i in range(ch.shape[0]):
                    ch[i] = _tanh32_small(ch[i]) * cap
            else:
                for i in range(ch.shape[0]):
                    ch[i] = _tanh32(ch[i]) * cap
    return z


def _rms_norm(x, weight, eps, out):
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


def _silu_mul(gu, inter, out):
    """``silu(gate) * up`` for the fused gate/up output. Shapes: gu [T, 2I]; out [T, I] (written, returned).
    sigmoid from ``exp(-|g|)`` (the kernel exp), so it never overflows."""
    for t in range(gu.shape[0]):
        g = gu[t, :inter]
        u = gu[t, inter:]
        dst = out[t]
        for i in range(inter):
            x = g[i]
            e = _exp_neg32(-np.abs(x))
            sig = _ONE / (_ONE + e) if x >= _ZERO else e / (_ONE + e)
            dst[i] = (x * sig) * u[i]
    return out


def _conv_side(y, dyn, base, group_size, out):
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


def _ranks_above(a, b):
    """Does value a rank above b, a having the higher id? Larger first, NaN last (a stable sort of
    ``-logits``): a NaN never does, anything else does over a NaN."""
    return a > b or (np.isnan(b) and not np.isnan(a))


_TOPK_CHUNK = 32


def _top_candidates(logits, k, cand, unary):
    """Top-k per row, best first, ties to the lower id: bitwise ``selector.top_candidates_slow``.

    Shapes: logits [n, V]; cand int64 [n, k], unary [n, k] (written). One pass per row keeps a sorted
    list of k; ids arrive in increasing order, so a value equal to one in the list ranks below it.
    A chunk of 64 ids is first counted against the k-th value (a vectorised loop) and skipped when
    none is larger: only the few chunks holding a new candidate are walked one id at a time.
    """
    n, v = logits.shape
    for t in range(n):
        row = logits[t]
        top_c = cand[t]
        top_u = unary[t]
        for i in range(k):  # the first k ids, insertion-sorted
            _insert(row[i], i, i, top_u, top_c)
        for c0 in range(k, v, _TOPK_CHUNK):
            ch = row[c0 : c0 + _TOPK_CHUNK]
            kth = top_u[k - 1]
            if not np.isnan(kth):  # a NaN never ranks above a number: count the numbers above kth
                above = 0
                for i in range(ch.shape[0]):
                    above += ch[i] > kth
                if above == 0:
                    continue
            for i in range(ch.shape[0]):
                if _ranks_above(ch[i], top_u[k - 1]):
                    _insert(ch[i], c0 + i, k - 1, top_u, top_c)


def _insert(x, i, pos, top_u, top_c):
    """Put (x, id i) at ``pos`` of the sorted list and move it up past everything it ranks above."""
    while pos > 0 and _ranks_above(x, top_u[pos - 1]):
        top_u[pos] = top_u[pos - 1]
        top_c[pos] = top_c[pos - 1]
        pos -= 1
    top_u[pos] = x
    top_c[pos] = i


def _pair_scores(prev_row, hp_row, succ, cand_row, out):
    """``sum_r prev_row[r] * hp_row[r] * succ[cand, r]`` for each candidate, a sequential float32 sum.

    Shapes: prev_row, hp_row [r]; succ [V, r]; cand_row int64 [k]; out [k] (written, returned).
    """
    r = hp_row.shape[0]
    for j in range(cand_row.shape[0]):
        srow = succ[cand_row[j]]
        acc = np.float32(0.0)
        for i in range(r):
            acc += (prev_row[i] * hp_row[i]) * srow[i]
        out[j] = acc
    return out


def _greedy_walk(unary, hp, pred, succ, cand, anchor, tokens):
    """The greedy selector walk (argmax, first index on ties like ``np.argmax``).

    Shapes: unary [n, k]; hp [n, r]; pred, succ [V, r]; cand int64 [n, k]; tokens int64 [n] (written).
    """
    n, k = cand.shape
    pair = np.empty(k, np.float32)
    prev = anchor
    for t in range(n):
        _pair_scores(pred[prev], hp[t], succ, cand[t], pair)
        best = 0
        best_score = unary[t, 0] + pair[0]
        for j in range(1, k):
            score = unary[t, j] + pair[j]
            if score > best_score:
                best, best_score = j, score
        prev = cand[t, best]
        tokens[t] = prev
    return tokens


if nb is not None:
    _jit = nb.njit(nogil=True, cache=True, error_model="numpy")  # IEEE division: no zero checks blocking vectorisation
    _inline = nb.njit(nogil=True, cache=True, error_model="numpy", inline="always")
    _pow2, _pow2_neg, _exp_neg32 = _inline(_pow2), _inline(_pow2_neg), _inline(_exp_neg32)
    _tanh32_small, _tanh32 = _inline(_tanh32_small), _inline(_tanh32)
    _ranks_above, _insert, _pair_scores = _inline(_ranks_above), _jit(_insert), _jit(_pair_scores)
    _scores, _weighted_sum, _max4, _sum4 = _inline(_scores), _inline(_weighted_sum), _inline(_max4), _inline(_sum4)
    _scores2, _weighted_sum2, _softmax = _inline(_scores2), _inline(_weighted_sum2), _inline(_softmax)
    exp_neg32, tanh32, pair_scores = _exp_neg32, _tanh32, _pair_scores
    norm_rope_heads = _norm_rope_heads = _jit(_norm_rope_heads)
    attend_block = _attend_block = _jit(_attend_block)
    attention_qkv = _jit(_attention_qkv)
    conv_side = _jit(_conv_side)
    softcap = _jit(_softcap)
    rms_norm = _jit(_rms_norm)
    silu_mul = _jit(_silu_mul)
    top_candidates_into = _jit(_top_candidates)
    greedy_walk_into = _jit(_greedy_walk)
else:
    exp_neg32 = tanh32 = pair_scores = norm_rope_heads = attend_block = attention_qkv = conv_side = softcap = rms_norm = None
    silu_mul = top_candidates_into = greedy_walk_into = None
