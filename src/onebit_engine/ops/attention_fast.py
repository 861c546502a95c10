"""The compiled twin of the target's gated attention between its two projections (numba), all rows of
a call in one call: q/k RMSNorm, partial RoPE, KV append, causal softmax attention, sigmoid gate.

Same math and order as ``target.GatedAttention`` on the numpy path (``ops.attention.attend_row``,
``ops.rope``, ``ops.norm``); sums run in float32 loops, so the two agree to rounding, not bitwise
(``tests/hybrid/test_target_fast.py``). Each row is computed by the same code from its own inputs and the
keys it may see, whatever the number of rows in the call, so a verify's rows are bitwise single steps.
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


def _norm_rope(x, w, eps, cos, sin, rot, out):
    """Zero-centred RMSNorm over hd, then rotate-half RoPE on the first ``rot`` dims. x, w, out [hd]."""
    hd = x.shape[0]
    one = np.float32(1.0)
    ss = np.float32(0.0)
    for i in range(hd):
        ss += x[i] * x[i]
    inv = one / np.sqrt(ss / np.float32(hd) + eps)
    for i in range(hd):
        out[i] = (x[i] * inv) * (one + w[i])
    half = rot // 2
    for i in range(half):
        a = out[i]
        b = out[i + half]
        out[i] = a * cos[i] + (-b) * sin[i]
        out[i + half] = b * cos[i + half] + a * sin[i + half]


def _angles(n, pos, freqs, cos, sin):
    """RoPE's cos and sin of rows 0..n-1 at positions pos..pos+n-1. freqs [rot / 2]; cos, sin [>= n, rot]."""
    half = freqs.shape[0]
    for t in range(n):
        for i in range(half):
            ang = np.float32(pos + t) * freqs[i]
            cos[t, i] = np.float32(np.cos(ang))
            sin[t, i] = np.float32(np.sin(ang))
            cos[t, i + half] = cos[t, i]
            sin[t, i + half] = sin[t, i]


def _append_rows(qkv, n, length, keys, values, k_norm, eps, cos, sin, H):
    """Each row's key (normed, rotated) and value into cache rows length..length+n-1. Shapes as in
    :func:`_attention_rows`; cos, sin [n, rot] (:func:`_angles`)."""
    HKV, hd, _ = keys.shape
    rot = cos.shape[1]
    kq = H * 2 * hd
    kv = HKV * hd
    for t in range(n):
        at = length + t
        for j in range(HKV):
            _norm_rope(qkv[t, kq + j * hd:kq + (j + 1) * hd], k_norm, eps, cos[t], sin[t], rot, keys[j, :, at])
            for i in range(hd):
                values[j, at, i] = qkv[t, kq + kv + j * hd + i]


def _attend(qkv, t, h, length, keys, values, q_norm, eps, cos, sin, H, scale, out, qh, acc, p):
    """Query head h of row t over cache rows 0..length+t (appended already), times its sigmoid gate, into
    out[t, h*hd:(h+1)*hd]. qh, acc [hd], p [>= length + t + 1]: scratch. A pair's bits depend on its own
    inputs and the keys it sees alone, so pairs can run in any order, on any thread."""
    HKV, hd, _ = keys.shape
    g = H // HKV
    rot = cos.shape[1]
    one = np.float32(1.0)
    m = length + t + 1  # keys 0..length+t are visible to this row
    j = h // g  # query head h reads KV head h // (H / HKV)
    _norm_rope(qkv[t, h * 2 * hd:h * 2 * hd + hd], q_norm, eps, cos[t], sin[t], rot, qh)
    # q.k for every visible key at once: positions innermost (contiguous, they vectorize), each
    # position's sum still over i in ascending order - the bits of a dot product per key
    for s in range(m):
        p[s] = np.float32(0.0)
    for i in range(hd):
        qi = qh[i]
        for s in range(m):
            p[s] += qi * keys[j, i, s]
    mx = np.float32(-np.inf)
    for s in range(m):
        d = p[s] * scale
        p[s] = d
        if d > mx:
            mx = d
    tot = np.float32(0.0)
    for s in range(m):
        e = np.float32(expf(p[s] - mx))
        p[s] = e
        tot += e
    for i in range(hd):
        acc[i] = np.float32(0.0)
    for s in range(m):
        ps = p[s] / tot
        for i in range(hd):
            acc[i] += ps * values[j, s, i]
    for i in range(hd):
        gate = qkv[t, h * 2 * hd + hd + i]
        out[t, h * hd + i] = acc[i] * (one / (one + expf(-gate)))


def _attention_rows(qkv, n, pos, length, keys, values, q_norm, k_norm, eps, freqs, H, scale, out):
    """Rows 0..n-1 of one call at positions pos..pos+n-1 (their RoPE angles); appends their keys and
    values at cache rows length..length+n-1 and attends each row over cache rows 0..its own.

    Shapes: qkv [R, H*2*hd + 2*HKV*hd] (per head [query | gate], then k, then v: the fused projection's
    output); keys [HKV, hd, capacity >= length + n] (a keys_last ``KVCache``: positions last), values
    [HKV, capacity, hd] (positions < length live);
    q_norm, k_norm [hd]; freqs [rot / 2]; out [R, H*hd] (rows >= n are zeroed).

    Every row's key and value go in first (:func:`_append_rows`), then each (row, head) pair attends
    (:func:`_attend`): a row reads only the keys up to its own, so the order of the two is the one-row-at-a-time
    order's bits, and the pairs can go to the pool (``ops.row_jobs``).
    """
    HKV, hd, _ = keys.shape
    rot = 2 * freqs.shape[0]
    cos = np.empty((max(n, 1), rot), np.float32)
    sin = np.empty((max(n, 1), rot), np.float32)
    _angles(n, pos, freqs, cos, sin)
    _append_rows(qkv, n, length, keys, values, k_norm, eps, cos, sin, H)
    qh = np.empty(hd, np.float32)
    acc = np.empty(hd, np.float32)
    p = np.empty(length + n, np.float32)
    for t in range(n):
        for h in range(H):
            _attend(qkv, t, h, length, keys, values, q_norm, eps, cos, sin, H, scale, out, qh, acc, p)
    for t in range(n, out.shape[0]):
        for c in range(out.shape[1]):
            out[t, c] = np.float32(0.0)


if nb is not None:
    _jit = nb.njit(cache=True, nogil=True, error_model="numpy")
    _norm_rope = _jit(_norm_rope)
    attention_angles = _angles = _jit(_angles)
    attention_append = _append_rows = _jit(_append_rows)
    attention_attend = _attend = _jit(_attend)
    attention_rows = _jit(_attention_rows)
else:
    attention_rows = attention_angles = attention_append = attention_attend = None
