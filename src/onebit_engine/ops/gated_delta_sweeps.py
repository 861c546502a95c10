"""The delta rule's sweeps over one value head's state, for the compiled mixer (numba).

A sweep walks the rows i of S [dk, dv] once, the columns j innermost (they vectorize). Each sweep takes
four rows i at a time and keeps its per-column sums (mem, ot, nxt) in registers across them, then stores
them once: a four-times shorter chain of loads and stores through those sums, which bound the one-row
loop (on Zen 4, 8 rows of a 128 x 128 head in cache: 25.9 -> 16.5 us; 1 row: 4.2 -> 3.5 us; in a real 27B
verify the state streams from memory and the whole verify moved within noise, 0.99). Every element still
sees the same operations in the same order - each sum over i in ascending order - so the bits are those
of :func:`ops.gated_delta_fast._head` run row after row (tests/ops/test_gdn_sweeps.py).

Steps (ops/gated_delta.py names them): 1. decay S by a, 2. read mem = k^T S, 3. delta (outside the
sweeps), 4. rank-1 write S += k (x) mem, 5. read-out o = q^T S. One token is a sweep for 1-2 and one for
4-5; consecutive tokens fuse token t's 4-5 with token t + 1's 1-2 into one sweep.
"""
from __future__ import annotations

import numpy as np

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None


def _decay_read(Sh, a, k, mem):
    """Steps 1-2 in place: S *= a; mem += k_i S[i] over i ascending (mem holds the start value).
    Sh [dk, dv], k [dk]."""
    dk, dv = Sh.shape
    i = 0
    while i + 4 <= dk:
        k0, k1, k2, k3 = k[i], k[i + 1], k[i + 2], k[i + 3]
        r0, r1, r2, r3 = Sh[i], Sh[i + 1], Sh[i + 2], Sh[i + 3]
        for j in range(dv):
            m = mem[j]
            s = r0[j] * a
            r0[j] = s
            m += k0 * s
            s = r1[j] * a
            r1[j] = s
            m += k1 * s
            s = r2[j] * a
            r2[j] = s
            m += k2 * s
            s = r3[j] * a
            r3[j] = s
            m += k3 * s
            mem[j] = m
        i += 4
    while i < dk:
        ki, r = k[i], Sh[i]
        for j in range(dv):
            s = r[j] * a
            r[j] = s
            mem[j] += ki * s
        i += 1


def _decay_read_from(Sin, Sh, a, k, mem):
    """:func:`_decay_read` reading Sin and writing Sh (another array: a verify's first call reads its
    snapshot). Not for Sin = Sh: the vectorizer's runtime overlap check then falls back to scalar code
    (a 128 x 128 head, 1 row: 8.4 against 3.6 us) - that case goes to :func:`_decay_read`."""
    dk, dv = Sh.shape
    i = 0
    while i + 4 <= dk:
        k0, k1, k2, k3 = k[i], k[i + 1], k[i + 2], k[i + 3]
        i0, i1, i2, i3 = Sin[i], Sin[i + 1], Sin[i + 2], Sin[i + 3]
        r0, r1, r2, r3 = Sh[i], Sh[i + 1], Sh[i + 2], Sh[i + 3]
        for j in range(dv):
            m = mem[j]
            s = i0[j] * a
            r0[j] = s
            m += k0 * s
            s = i1[j] * a
            r1[j] = s
            m += k1 * s
            s = i2[j] * a
            r2[j] = s
            m += k2 * s
            s = i3[j] * a
            r3[j] = s
            m += k3 * s
            mem[j] = m
        i += 4
    while i < dk:
        ki, q, r = k[i], Sin[i], Sh[i]
        for j in range(dv):
            s = q[j] * a
            r[j] = s
            mem[j] += ki * s
        i += 1


def _write_out(Sh, k, mem, q, ot):
    """Steps 4-5: S[i] += k_i mem; ot += q_i S[i] after the write (ot holds the start value)."""
    dk, dv = Sh.shape
    i = 0
    while i + 4 <= dk:
        k0, k1, k2, k3 = k[i], k[i + 1], k[i + 2], k[i + 3]
        q0, q1, q2, q3 = q[i], q[i + 1], q[i + 2], q[i + 3]
        r0, r1, r2, r3 = Sh[i], Sh[i + 1], Sh[i + 2], Sh[i + 3]
        for j in range(dv):
            m = mem[j]
            acc = ot[j]
            s = r0[j] + k0 * m
            r0[j] = s
            acc += q0 * s
            s = r1[j] + k1 * m
            r1[j] = s
            acc += q1 * s
            s = r2[j] + k2 * m
            r2[j] = s
            acc += q2 * s
            s = r3[j] + k3 * m
            r3[j] = s
            acc += q3 * s
            ot[j] = acc
        i += 4
    while i < dk:
        ki, qi, r = k[i], q[i], Sh[i]
        for j in range(dv):
            s = r[j] + ki * mem[j]
            r[j] = s
            ot[j] += qi * s
        i += 1


def _write(Sh, k, mem):
    """Step 4 alone (a replay's last token: only the state is wanted)."""
    dk, dv = Sh.shape
    for i in range(dk):
        ki, r = k[i], Sh[i]
        for j in range(dv):
            r[j] = r[j] + ki * mem[j]


def _write_out_next(Sh, k, mem, q, ot, a2, k2, nxt):
    """Token t's steps 4-5 and token t + 1's 1-2 in one sweep: S[i] = (S[i] + k_i mem) * a2, ot += q_i
    (the written row), nxt += k2_i S[i] (ot, nxt hold their start values)."""
    dk, dv = Sh.shape
    i = 0
    while i + 4 <= dk:
        k0, k1, k2_, k3 = k[i], k[i + 1], k[i + 2], k[i + 3]
        q0, q1, q2, q3 = q[i], q[i + 1], q[i + 2], q[i + 3]
        n0, n1, n2, n3 = k2[i], k2[i + 1], k2[i + 2], k2[i + 3]
        r0, r1, r2, r3 = Sh[i], Sh[i + 1], Sh[i + 2], Sh[i + 3]
        for j in range(dv):
            m = mem[j]
            acc = ot[j]
            x = nxt[j]
            s = r0[j] + k0 * m
            acc += q0 * s
            s = s * a2
            r0[j] = s
            x += n0 * s
            s = r1[j] + k1 * m
            acc += q1 * s
            s = s * a2
            r1[j] = s
            x += n1 * s
            s = r2[j] + k2_ * m
            acc += q2 * s
            s = s * a2
            r2[j] = s
            x += n2 * s
            s = r3[j] + k3 * m
            acc += q3 * s
            s = s * a2
            r3[j] = s
            x += n3 * s
            ot[j] = acc
            nxt[j] = x
        i += 4
    while i < dk:
        ki, qi, ni, r = k[i], q[i], k2[i], Sh[i]
        for j in range(dv):
            s = r[j] + ki * mem[j]
            ot[j] += qi * s
            s = s * a2
            r[j] = s
            nxt[j] += ni * s
        i += 1


def _write_next(Sh, k, mem, a2, k2, nxt):
    """Token t's step 4 and token t + 1's 1-2 in one sweep, without the read-out (a replay)."""
    dk, dv = Sh.shape
    i = 0
    while i + 4 <= dk:
        k0, k1, k2_, k3 = k[i], k[i + 1], k[i + 2], k[i + 3]
        n0, n1, n2, n3 = k2[i], k2[i + 1], k2[i + 2], k2[i + 3]
        r0, r1, r2, r3 = Sh[i], Sh[i + 1], Sh[i + 2], Sh[i + 3]
        for j in range(dv):
            m = mem[j]
            x = nxt[j]
            s = (r0[j] + k0 * m) * a2
            r0[j] = s
            x += n0 * s
            s = (r1[j] + k1 * m) * a2
            r1[j] = s
            x += n1 * s
            s = (r2[j] + k2_ * m) * a2
            r2[j] = s
            x += n2 * s
            s = (r3[j] + k3 * m) * a2
            r3[j] = s
            x += n3 * s
            nxt[j] = x
        i += 4
    while i < dk:
        ki, ni, r = k[i], k2[i], Sh[i]
        for j in range(dv):
            s = (r[j] + ki * mem[j]) * a2
            r[j] = s
            nxt[j] += ni * s
        i += 1


def head_rows(Sin, Sh, alphas, betas, ks, qs, vs, o, read_out):
    """The delta rule on one value head for rows 0..n-1 in turn: Sh [dk, dv] becomes the state n rows
    leave after Sin [dk, dv] (pass the same array to update in place; Sin is only read); alphas, betas
    [n]; ks, qs [n, dk]; vs [n, dv]; with ``read_out`` o [n, dv] is written. One sweep per row (plus one
    for row 0's decay and read), each row's write fused with the next row's decay and read."""
    n = alphas.shape[0]
    dv = Sh.shape[1]
    in_place = Sin.ctypes.data == Sh.ctypes.data
    if n == 0:
        if not in_place:
            for i in range(Sh.shape[0]):
                for j in range(dv):
                    Sh[i, j] = Sin[i, j]
        return
    mem = np.zeros(dv, np.float32)
    nxt = np.empty(dv, np.float32)
    if in_place:
        _decay_read(Sh, alphas[0], ks[0], mem)
    else:
        _decay_read_from(Sin, Sh, alphas[0], ks[0], mem)
    for t in range(n):
        b = betas[t]
        for j in range(dv):
            mem[j] = (vs[t, j] - mem[j]) * b  # 3. delta of row t
        ot = o[t]
        if read_out:
            for j in range(dv):
                ot[j] = np.float32(0.0)
        if t + 1 == n:
            if read_out:
                _write_out(Sh, ks[t], mem, qs[t], ot)
            else:
                _write(Sh, ks[t], mem)
            return
        for j in range(dv):
            nxt[j] = np.float32(0.0)
        if read_out:
            _write_out_next(Sh, ks[t], mem, qs[t], ot, alphas[t + 1], ks[t + 1], nxt)
        else:
            _write_next(Sh, ks[t], mem, alphas[t + 1], ks[t + 1], nxt)
        for j in range(dv):
            mem[j] = nxt[j]


if nb is not None:
    _jit = nb.njit(cache=True, nogil=True, error_model="numpy")
    _decay_read = _jit(_decay_read)
    _decay_read_from = _jit(_decay_read_from)
    _write_out = _jit(_write_out)
    _write = _jit(_write)
    _write_out_next = _jit(_write_out_next)
    _write_next = _jit(_write_next)
    head_rows = _jit(head_rows)
