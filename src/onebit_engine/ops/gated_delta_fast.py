"""The compiled twin of the delta-net mixer (numba): conv + SiLU + l2norm + gated delta rule per token,
and, for the target's compiled path, the whole mixer between its two projections for all rows of a call.

Same math and the same order of the recurrence steps as :func:`ops.gated_delta.gdn_token`; sums run in
float32 loops, so it agrees with the numpy twin to rounding (``tests/ops/test_gdn_fast.py`` pins the
two within ``GDN_TWIN_RTOL``), not bitwise. Every row of every call - a plain step, a verify, a commit's
replay - goes through the one function :func:`_token`, so the target's exact claims hold on this path:
a row's bits depend only on that row's inputs and the state, never on how many rows the call had.
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

F32 = np.float32


def _conv(conv, mixed, w, x):
    """The causal conv of one token, any kernel size, in place: x [C] = the conv output (before the SiLU);
    conv [C, K-1] is advanced by the token. mixed [C]; w [C, K]. Per channel the operations of the numpy
    twin in its order: the current column first, then the taps oldest first."""
    C, km1 = conv.shape
    K = w.shape[1]
    for c in range(C):
        x[c] = w[c, K - 1] * mixed[c]
    for j in range(km1):
        for c in range(C):
            x[c] = x[c] + w[c, j] * conv[c, j]
    for c in range(C):
        for j in range(km1 - 1):
            conv[c, j] = conv[c, j + 1]
        if km1 > 0:
            conv[c, km1 - 1] = mixed[c]


def _conv4(conv, mixed, w, x):
    """:func:`_conv` for kernel size 4 (every published Qwen3.5 / Qwen3-Next shape): one pass over the
    channels with the three taps in registers, the same operations in the same order - the same bits
    (tests/ops/test_gdn_fast.py), ~3x faster than the general loops, whose strided taps do not vectorize.
    Compiled, C-contiguous arrays (the engine's own) take :func:`_conv4_flat` instead (numba picks by layout)."""
    for c in range(conv.shape[0]):
        c0 = conv[c, 0]
        c1 = conv[c, 1]
        c2 = conv[c, 2]
        m = mixed[c]
        v = w[c, 3] * m
        v = v + w[c, 0] * c0
        v = v + w[c, 1] * c1
        v = v + w[c, 2] * c2
        x[c] = v
        conv[c, 0] = c1
        conv[c, 1] = c2
        conv[c, 2] = m


def _conv4_flat(conv, mixed, w, x):
    """:func:`_conv4` on C-contiguous conv and w, indexed flat: the same operations in the same order. A
    constant stride lets LLVM vectorize the interleaved taps, which the 2-d indexing (its stride read at run
    time) did not: 8.7 -> 2.9 us a row at C = 6144 (Zen 4, warm)."""
    C = conv.shape[0]
    cf = conv.reshape(C * 3)
    wf = w.reshape(C * 4)
    for c in range(C):
        c0 = cf[3 * c]
        c1 = cf[3 * c + 1]
        c2 = cf[3 * c + 2]
        m = mixed[c]
        v = wf[4 * c + 3] * m
        v = v + wf[4 * c] * c0
        v = v + wf[4 * c + 1] * c1
        v = v + wf[4 * c + 2] * c2
        x[c] = v
        cf[3 * c] = c1
        cf[3 * c + 1] = c2
        cf[3 * c + 2] = m


def _prep(conv, mixed, w, n_k_heads, dk, x, q, k):
    """A token's conv (+ SiLU) and l2-normed, scaled q and k, in place. Shapes: conv [C, K-1] is advanced;
    mixed [C]; w [C, K]; x [C] (the conv output: q | k | v channels), q, k [n_k_heads, dk] are written."""
    if w.shape[1] == 4:
        _conv4(conv, mixed, w, x)
    else:
        _conv(conv, mixed, w, x)
    _silu_qk(x, n_k_heads, dk, q, k)


def _silu_qk(x, n_k_heads, dk, q, k):
    """:func:`_prep` after the conv: the SiLU of x [C] in place, then q, k [n_k_heads, dk] l2-normed (q scaled)."""
    C = x.shape[0]
    key_dim = n_k_heads * dk
    one = np.float32(1.0)
    for c in range(C):  # channels innermost: they vectorize
        a = x[c]
        x[c] = a * (one / (one + expf(-a)))  # silu
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


def _head(Sh, a, b, kg, qg, v, mem, oh, read_out):
    """The delta rule on one value head, in place: Sh [dk, dv] (decayed by a, the rank-1 write of the
    b-scaled error), and with ``read_out`` oh [dv] = q^T S after the write. kg, qg [dk]; v [dv]."""
    dk, dv = Sh.shape
    for j in range(dv):
        mem[j] = np.float32(0.0)
    for i in range(dk):
        ki = kg[i]
        for j in range(dv):
            s = Sh[i, j] * a  # 1. decay
            Sh[i, j] = s
            mem[j] += ki * s  # 2. read with the key
    for j in range(dv):
        mem[j] = (v[j] - mem[j]) * b  # 3. delta
    if read_out:
        for j in range(dv):
            oh[j] = np.float32(0.0)
        for i in range(dk):
            ki = kg[i]
            qi = qg[i]
            for j in range(dv):
                s = Sh[i, j] + ki * mem[j]  # 4. rank-1 write
                Sh[i, j] = s
                oh[j] += qi * s  # 5. read-out after the write
    else:  # a commit's replay needs the state only: step 4 alone, the same bits of S
        for i in range(dk):
            ki = kg[i]
            for j in range(dv):
                Sh[i, j] = Sh[i, j] + ki * mem[j]


def _head_rows(Sh, alphas, betas, ks, qs, vs, o, read_out, Src):
    """The delta rule on one value head for rows 0..n-1 in turn: Sh [dk, dv] is written, starting from the
    state Src [dk, dv] (Sh itself for an update in place; a verify's snapshot, only read, otherwise); alphas,
    betas [n]; ks, qs [n, dk]; vs [n, dv]; with ``read_out`` o [n, dv] is written.

    Reading the start from Src in row 0's decay is the copy ``Sh[:] = Src`` folded into the first sweep: the
    same values go through the same operations (a copy is exact), one pass over the state fewer - and the
    state streams from memory at a verify's start (the weights read since pushed it out of the cache).

    Row t's write and read-out (steps 4-5) and row t + 1's decay and read (steps 1-2) touch each element of
    S once, in one sweep: the same operations on the same values in the same order as running
    :func:`_head` row after row (each element of mem still sums over i in ascending order), so the same
    bits, with one pass over the head's state per row instead of two."""
    n = alphas.shape[0]
    dk, dv = Sh.shape
    mem = np.zeros(dv, np.float32)
    nxt = np.empty(dv, np.float32)
    if n == 0:
        if Src.ctypes.data != Sh.ctypes.data:
            Sh[:] = Src
        return
    a = alphas[0]
    for i in range(dk):  # row 0: 1. decay, 2. read
        ki = ks[0, i]
        for j in range(dv):
            s = Src[i, j] * a
            Sh[i, j] = s
            mem[j] += ki * s
    for t in range(n):
        b = betas[t]
        for j in range(dv):
            mem[j] = (vs[t, j] - mem[j]) * b  # 3. delta of row t
        ot = o[t]
        for j in range(dv):
            ot[j] = np.float32(0.0)
        if t + 1 == n:  # the last row: 4. write, 5. read-out
            for i in range(dk):
                ki = ks[t, i]
                qi = qs[t, i]
                if read_out:
                    for j in range(dv):
                        s = Sh[i, j] + ki * mem[j]
                        Sh[i, j] = s
                        ot[j] += qi * s
                else:
                    for j in range(dv):
                        Sh[i, j] = Sh[i, j] + ki * mem[j]
            return
        a2 = alphas[t + 1]
        for j in range(dv):
            nxt[j] = np.float32(0.0)
        for i in range(dk):
            ki = ks[t, i]
            qi = qs[t, i]
            k2 = ks[t + 1, i]
            if read_out:
                for j in range(dv):
                    s = Sh[i, j] + ki * mem[j]  # 4. write (row t)
                    ot[j] += qi * s  # 5. read-out (row t)
                    s2 = s * a2  # 1. decay (row t + 1)
                    Sh[i, j] = s2
                    nxt[j] += k2 * s2  # 2. read (row t + 1)
            else:
                for j in range(dv):
                    s2 = (Sh[i, j] + ki * mem[j]) * a2
                    Sh[i, j] = s2
                    nxt[j] += k2 * s2
        for j in range(dv):
            mem[j] = nxt[j]


def _heads(S, alphas, betas, ks, qs, xs, o, r, v0, read_out, S0):
    """:func:`_head_rows` on every value head (head h reads key head h // r): S [HV, dk, dv] is written from
    the start state S0 (S itself, or a snapshot); alphas, betas
    [n, HV]; ks, qs [n, HK, dk]; xs [n, C] (v of head h at v0 + h dv); o [n, HV, dv]. Heads are
    independent. They run on this thread: numba's own threads (prange) fought the host-int kernel's pool for the
    2 cores, whose workers wait spinning between GEMM calls - a 27B plain step took 355 ms with them, 274 ms
    without (and a verify of 8 rows 547 against 440 ms), interleaved on Zen 5."""
    HV, _, dv = S.shape
    n = alphas.shape[0]
    for h in range(HV):
        g = h // r
        oh = np.empty((n, dv), np.float32)
        _head_rows(S[h], alphas[:, h].copy(), betas[:, h].copy(), ks[:, g].copy(), qs[:, g].copy(),
                   xs[:, v0 + h * dv : v0 + (h + 1) * dv].copy(), oh, read_out, S0[h])
        if read_out:
            o[:, h] = oh


def _token(conv, S, mixed, alpha, beta, w, n_k_heads, dk, dv, x, q, k, mem, o):
    """One token, in place. Shapes: conv [C, K-1] and S [HV, dk, dv] are updated; mixed [C]; alpha,
    beta [HV]; w [C, K]; o [HV, dv] is written; x [C], q, k [n_k_heads, dk], mem [dv] are scratch."""
    HV = S.shape[0]
    r = HV // n_k_heads
    v0 = 2 * n_k_heads * dk
    _prep(conv, mixed, w, n_k_heads, dk, x, q, k)
    for h in range(HV):
        g = h // r  # value head h reads key head h // r
        _head(S[h], alpha[h], beta[h], k[g], q[g], x[v0 + h * dv : v0 + (h + 1) * dv], mem, o[h], True)


def _token_copy(conv_state, S, mixed, alpha, beta, w, n_k_heads, dk, dv):
    """:func:`ops.gated_delta.gdn_token`'s signature: returns (o [HV, dv], new conv, new S)."""
    conv = conv_state.copy()
    S2 = S.copy()
    o = np.empty((S.shape[0], dv), np.float32)
    x = np.empty(conv.shape[0], np.float32)
    q = np.empty((n_k_heads, dk), np.float32)
    k = np.empty((n_k_heads, dk), np.float32)
    mem = np.empty(dv, np.float32)
    _token(conv, S2, mixed, alpha, beta, w, n_k_heads, dk, dv, x, q, k, mem, o)
    return o, conv, S2


def _gates(proj, t, b0, neg_A, dt_bias, alpha, beta):
    """Row t's gates from its in_proj columns b | a (from column b0): beta = sigmoid(b), alpha =
    exp(-A * softplus(a + dt_bias)). alpha, beta [HV] are written."""
    HV = alpha.shape[0]
    one = np.float32(1.0)
    for h in range(HV):
        b = proj[t, b0 + h]
        beta[h] = one / (one + expf(-b))
        a = proj[t, b0 + HV + h] + dt_bias[h]
        sp = a if a > np.float32(20.0) else np.float32(np.log1p(expf(a)))  # torch softplus, threshold 20
        alpha[h] = expf(neg_A[h] * sp)


def _conv4_taps(t0, t1, t2, mixed, w, x):
    """:func:`_conv4`'s output for one token from its three taps given as arrays [C] (oldest first): the same
    operations in the same order, no state to advance (:func:`_mixer_prep_row`). w [C, 4] C-contiguous, read
    flat (a constant stride: it vectorizes, see :func:`_conv4_flat`)."""
    C = x.shape[0]
    wf = w.reshape(C * 4)
    for c in range(C):
        v = wf[4 * c + 3] * mixed[c]
        v = v + wf[4 * c] * t0[c]
        v = v + wf[4 * c + 1] * t1[c]
        v = v + wf[4 * c + 2] * t2[c]
        x[c] = v


def _conv4_head(conv0):
    """The inputs before a call as rows: conv0 [C, 3] -> head [3, C] (head[3 + s] is row s < 0)."""
    C = conv0.shape[0]
    head = np.empty((3, C), np.float32)
    for c in range(C):
        for j in range(3):
            head[j, c] = conv0[c, j]
    return head


def _tap(proj, head, s):
    """The conv input at row s of a call: proj's row s, or (s < 0) head[3 + s] (:func:`_conv4_head`)."""
    return proj[s, :head.shape[1]] if s >= 0 else head[3 + s]


def _conv_row(src, t, head, w, n_k_heads, dk, xs, qs, ks):
    """Row t's conv (kernel size 4) + SiLU + q/k norms on its own: its taps read from src's earlier rows or from
    head (the state before the call as rows, :func:`_conv4_head`) instead of a state advanced row by row, so
    rows can run on different threads; the same operations on the same values as :func:`_prep` - the same bits.
    src [>= t + 1, >= C]: the conv inputs (a mixer's proj, a replay's mixed); w [C, 4] C-contiguous."""
    C = head.shape[1]
    _conv4_taps(_tap(src, head, t - 3), _tap(src, head, t - 2), _tap(src, head, t - 1), src[t, :C], w, xs[t])
    _silu_qk(xs[t], n_k_heads, dk, qs[t], ks[t])


def _mixer_prep_row(proj, t, head, w, neg_A, dt_bias, n_k_heads, dk, dv, xs, qs, ks, alphas, betas, rec_mixed,
                    rec_alpha, rec_beta):
    """Row t of :func:`_mixer_prep` on its own (:func:`_conv_row`); the caller advances the conv state
    (:func:`_conv4_advance`)."""
    C = head.shape[1]
    HV = alphas.shape[1]
    _gates(proj, t, C + HV * dv, neg_A, dt_bias, alphas[t], betas[t])
    _conv_row(proj, t, head, w, n_k_heads, dk, xs, qs, ks)
    if rec_mixed.shape[0]:
        for c in range(C):
            rec_mixed[t, c] = proj[t, c]
        for h in range(HV):
            rec_alpha[t, h] = alphas[t, h]
            rec_beta[t, h] = betas[t, h]


def _conv4_advance(conv, proj, n):
    """The kernel-size-4 conv state after rows 0..n-1 of proj (or a replay's mixed), in place: its columns the
    last three inputs."""
    C = conv.shape[0]
    for j in range(3):
        s = n - 3 + j
        for c in range(C):
            conv[c, j] = proj[s, c] if s >= 0 else conv[c, 3 + s]


def _mixer_prep(proj, n, conv, w, neg_A, dt_bias, n_k_heads, dk, dv, HV, rec_mixed, rec_alpha, rec_beta, ck_conv):
    """The part of :func:`_mixer_rows` before the delta rule: each row's gates and its conv (row by row: the
    conv window is sequential), advancing conv. Shapes as there. -> xs [n, C] (conv output), qs, ks
    [n, n_k_heads, dk], alphas, betas [n, HV]."""
    C = conv.shape[0]
    zd = HV * dv
    xs = np.empty((n, C), np.float32)
    qs = np.empty((n, n_k_heads, dk), np.float32)
    ks = np.empty((n, n_k_heads, dk), np.float32)
    alphas = np.empty((n, HV), np.float32)
    betas = np.empty((n, HV), np.float32)
    for t in range(n):
        _gates(proj, t, C + zd, neg_A, dt_bias, alphas[t], betas[t])
        _prep(conv, proj[t, :C], w, n_k_heads, dk, xs[t], qs[t], ks[t])
        if rec_mixed.shape[0]:
            rec_mixed[t] = proj[t, :C]
            rec_alpha[t] = alphas[t]
            rec_beta[t] = betas[t]
        if ck_conv.shape[0]:
            ck_conv[t] = conv
    return xs, qs, ks, alphas, betas


def _mixer_finish(proj, n, o, norm_w, eps, C, out):
    """The part of :func:`_mixer_rows` after the delta rule: the gated RMSNorm of each row's read-out
    o [n, HV, dv] into out [R, HV*dv] (rows >= n zeroed); C: the conv channels (z starts at column C)."""
    HV, dv = o.shape[1], o.shape[2]
    one = np.float32(1.0)
    for t in range(n):
        for h in range(HV):  # gated RMSNorm: norm over dv, plain weight, then the SiLU gate
            ss = np.float32(0.0)
            for j in range(dv):
                ss += o[t, h, j] * o[t, h, j]
            inv = one / np.sqrt(ss / np.float32(dv) + eps)
            for j in range(dv):
                zz = proj[t, C + h * dv + j]
                out[t, h * dv + j] = (norm_w[j] * (o[t, h, j] * inv)) * (zz * (one / (one + expf(-zz))))
    for t in range(n, out.shape[0]):
        for c in range(out.shape[1]):
            out[t, c] = np.float32(0.0)


def _mixer_rows(proj, n, conv, S, S0, w, neg_A, dt_bias, norm_w, eps, n_k_heads, dk, dv, rec_mixed, rec_alpha,
                rec_beta, ck_conv, ck_S, out):
    """The mixer between in_proj and out_proj for rows 0..n-1 of one call; the state advances by n.

    Shapes: proj [R, C + HV*dv + 2*HV] (in_proj output: mixed | z | b | a); conv, S as in :func:`_token`;
    S0 [HV, dk, dv]: the recurrent state the rows start from - S itself, or a verify's snapshot (only read;
    S's old contents are then unused, see :func:`_head_rows`);
    neg_A, dt_bias [HV]; norm_w [dv]; out [R, HV*dv] (rows >= n are zeroed). rec_* [n, C] / [n, HV]
    receive each row's recurrence inputs, and ck_conv [n, C, K-1], ck_S [n, HV, dk, dv] the state after
    each row (pass arrays with a zero first dimension to skip either).

    Rows first go through the conv one by one (its window is sequential, :func:`_mixer_prep`); then the
    delta rule runs head by head, every row of a head in turn, so a head's S (64 KB at dk = dv = 128) stays
    in the core's cache for all rows instead of the whole state (3 MB a 27B layer) streaming through it once
    per row; then the gated norm (:func:`_mixer_finish`). Each row and head sees the operations of
    :func:`_token` in the same order: the same bits.
    """
    C = conv.shape[0]
    HV = S.shape[0]
    r = HV // n_k_heads
    v0 = 2 * n_k_heads * dk
    xs, qs, ks, alphas, betas = _mixer_prep(proj, n, conv, w, neg_A, dt_bias, n_k_heads, dk, dv, HV, rec_mixed,
                                            rec_alpha, rec_beta, ck_conv)
    mem = np.empty(dv, np.float32)
    o = np.empty((n, HV, dv), np.float32)
    if ck_S.shape[0]:  # the state after every row is wanted: row by row
        if S0.ctypes.data != S.ctypes.data:
            S[:] = S0
        for h in range(HV):
            g = h // r  # value head h reads key head h // r
            for t in range(n):
                _head(S[h], alphas[t, h], betas[t, h], ks[t, g], qs[t, g], xs[t, v0 + h * dv : v0 + (h + 1) * dv], mem,
                      o[t, h], True)
                ck_S[t, h] = S[h]
    else:
        _heads(S, alphas, betas, ks, qs, xs, o, r, v0, True, S0)
    _mixer_finish(proj, n, o, norm_w, eps, C, out)


def _replay_prep(conv, mixed, w, n_k_heads, dk):
    """A replay's conv row by row (advancing conv): mixed [n, C] -> xs [n, C], qs, ks [n, n_k_heads, dk]."""
    n = mixed.shape[0]
    xs = np.empty((n, conv.shape[0]), np.float32)
    qs = np.empty((n, n_k_heads, dk), np.float32)
    ks = np.empty((n, n_k_heads, dk), np.float32)
    for t in range(n):
        _prep(conv, mixed[t], w, n_k_heads, dk, xs[t], qs[t], ks[t])
    return xs, qs, ks


def _replay(conv, S, mixed, alpha, beta, w, n_k_heads, dk, dv):
    """Rows 0..len(mixed)-1 of recorded inputs, in place (a commit's replay): the conv row by row, then the
    delta rule head by head, rows in order, without the read-out (only the state is wanted)."""
    HV = S.shape[0]
    r = HV // n_k_heads
    v0 = 2 * n_k_heads * dk
    xs, qs, ks = _replay_prep(conv, mixed, w, n_k_heads, dk)
    _heads(S, alpha, beta, ks, qs, xs, np.empty((0, HV, dv), np.float32), r, v0, False, S)


if nb is not None:
    _jit = nb.njit(cache=True, nogil=True, error_model="numpy")
    _conv = _jit(_conv)
    _conv4_flat = _jit(_conv4_flat)
    _conv4_2d = _jit(_conv4)

    def _conv4_by_layout(conv, mixed, w, x):  # resolved while compiling, from the arrays' layouts
        _conv4_2d(conv, mixed, w, x)

    @nb.extending.overload(_conv4_by_layout, jit_options={"error_model": "numpy", "nogil": True})
    def _conv4_overload(conv, mixed, w, x):
        if conv.layout == "C" and w.layout == "C":
            return lambda conv, mixed, w, x: _conv4_flat(conv, mixed, w, x)
        return lambda conv, mixed, w, x: _conv4_2d(conv, mixed, w, x)

    def _conv4(conv, mixed, w, x):
        _conv4_by_layout(conv, mixed, w, x)

    _conv4 = _jit(_conv4)
    _silu_qk = _jit(_silu_qk)
    _prep = _jit(_prep)
    _gates = _jit(_gates)
    _conv4_taps = _jit(_conv4_taps)
    _tap = _jit(_tap)
    _conv_row = _jit(_conv_row)
    gdn_conv4_head = _conv4_head = _jit(_conv4_head)
    gdn_mixer_prep_row = _mixer_prep_row = _jit(_mixer_prep_row)
    gdn_conv4_advance = _conv4_advance = _jit(_conv4_advance)
    _head = _jit(_head)
    _head_rows = _jit(_head_rows)
    _heads = _jit(_heads)
    _token = _jit(_token)
    gdn_token_fast = _jit(_token_copy)
    gdn_mixer_prep = _mixer_prep = _jit(_mixer_prep)
    gdn_mixer_finish = _mixer_finish = _jit(_mixer_finish)
    gdn_mixer_rows = _jit(_mixer_rows)
    gdn_replay_prep = _replay_prep = _jit(_replay_prep)
    gdn_replay_fast = _jit(_replay)
else:
    gdn_token_fast = gdn_mixer_rows = gdn_replay_fast = gdn_mixer_prep = gdn_mixer_finish = gdn_replay_prep = None
    gdn_mixer_prep_row = gdn_conv4_advance = gdn_conv4_head = None

