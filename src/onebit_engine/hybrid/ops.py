"""The target's non-GEMM operations in two interchangeable tables, chosen once when the target is built
(``ops=``, resolved by ``ops/op_sets.py``): ``NUMPY_OPS``, the readable reference twins below, and
``NUMBA_OPS``, thin wrappers over the compiled twins of ``ops/*_fast.py`` (same math, same per-row order).

Each op is what a layer runs between its projections, for the R rows of one row set of which the first
n are real (rows >= n come back zero): the delta-net mixer (and a commit's replay of it), gated attention,
the zero-centred RMSNorm and the SwiGLU gate. Both tables take the same arguments and return the same
shapes. ``tests/hybrid/test_target_ops_twins.py`` pins each op of the two tables together (to a named
tolerance: float32 loops against numpy's reductions), and the exact claims of the target are tested on
both tables. Math: docs/model-math.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import StateError
from ..ops.attention import attend_row
from ..ops.attention_fast import attention_rows
from ..ops.gated_delta import gdn_token
from ..ops.gated_delta_fast import (gdn_mixer_prep, gdn_mixer_rows, gdn_replay_fast,
                                    gdn_replay_prep)
from ..ops.kv_cache import KVCache
from ..ops.moe import combine_numpy, route_rows_numpy
from ..ops.moe_fast import combine as combine_fast, route_rows as route_rows_fast
from ..ops.norm import gated_rms_norm, rms_norm_zc, sigmoid, silu, softplus
from ..ops.norm_fast import rms_norm_rows, silu_mul
from ..ops.row_jobs import RowJobs
from ..ops.op_sets import resolve_ops_name
from ..ops.rope import apply_rope, cos_sin
from .delta_native import NativeDelta, native_delta
from .state import GDNLayerState, RecordedRows

F32 = np.float32


def bounds(widths: Sequence[int]) -> tuple[int, ...]:
    """Column bounds of a fused projection's parts: widths [a, b, c] -> (0, a, a+b, a+b+c)."""
    return tuple(int(v) for v in np.cumsum([0, *widths]))


def cut(y: np.ndarray, b: tuple[int, ...]) -> list[np.ndarray]:
    """The parts of y [R, total] as column views (np.split's result, without its ~25 us per call)."""
    return [y[:, lo:hi] for lo, hi in zip(b[:-1], b[1:])] + [y[:, b[-1]:]]


@dataclass(frozen=True)
class GDNParams:
    """What the delta-net ops read of one layer. conv_weight [C, K]; neg_A = -exp(A_log), dt_bias [HV];
    norm_weight [dv] (float32); splits: the in_proj output's column bounds, [mixed (C) | z (HV*dv) | b | a]."""

    conv_weight: np.ndarray
    neg_A: np.ndarray
    dt_bias: np.ndarray
    norm_weight: np.ndarray
    eps: np.float32
    n_k_heads: int
    n_v_heads: int
    dk: int
    dv: int
    splits: tuple[int, ...]


@dataclass(frozen=True)
class AttentionParams:
    """What gated attention reads of one layer. q_norm, k_norm [hd] (zero-centred); freqs [rot / 2];
    scale hd^-0.5; splits: the fused q/k/v output's column bounds, [per head query | gate (2*H*hd) | k | v]."""

    q_norm: np.ndarray
    k_norm: np.ndarray
    freqs: np.ndarray
    scale: float
    eps: np.float32
    n_heads: int
    n_kv_heads: int
    head_dim: int
    splits: tuple[int, ...]


@dataclass(frozen=True)
class TargetOps:
    """One op table. ``gdn_rows`` and ``attention_rows`` advance the layer state they are given by n rows."""

    name: str
    # norm and silu_mul also take ``threads=`` (as the delta-net ops, below): only the delta.c table uses more
    # than one, each row a job (``ops.row_jobs``), so the bits do not depend on it
    norm: Callable[..., np.ndarray]  # x [R, D], w [D], eps -> [R, D]
    silu_mul: Callable[..., np.ndarray]  # [gate | up] [R, 2I] -> silu(gate) * up [R, I]
    # proj [R, C + HV*dv + 2*HV], n, state, params, rows to record (a verify) or None, and the state to
    # start from when it is not ``state`` (a verify's first call: its snapshot, only read; ``state`` is then a
    # buffer to write, its old contents unused) or None -> [R, HV*dv]. Both delta-net ops also take ``threads=``:
    # the most threads the heads may use (the GEMM backend's; only the delta.c table uses more than one, and the
    # heads are independent, so the bits do not depend on it)
    gdn_rows: Callable[..., np.ndarray]
    # state (advanced in place), mixed [a, C], alpha, beta [a, HV], params -> None
    gdn_replay: Callable[..., None]
    # qkv [R, 2*H*hd + 2*HKV*hd], n, cache, position of row 0, params -> [R, H*hd]; also takes ``threads=`` (the
    # delta.c table's (row, head) pairs go to the pool; a pair's bits do not depend on it)
    attention_rows: Callable[..., np.ndarray]
    # a sparse block's combine, in place: out [R, D] += weights[row, rank] * y [P, D] pair by pair
    # (rows, ranks [P]: ``ops.moe.route_plan``'s order) -> None
    moe_combine: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]
    # a sparse block's routing of its first n rows: router logits [R, E], n, top_k, renormalise -> weights
    # float32 [n, top_k] and ``ops.moe.route_plan``'s ids, offsets, rows, ranks
    moe_route: Callable[[np.ndarray, int, int, bool], tuple]
    delta: str = ""  # where the compiled table's delta rule runs: "numba", or delta.c ("native-avx512", ...)


# -- the numpy twins ------------------------------------------------------------------------------
def norm_numpy(x: np.ndarray, weight: np.ndarray, eps: float, threads: int = 1) -> np.ndarray:
    return rms_norm_zc(x, weight, eps)


def silu_mul_numpy(y: np.ndarray, threads: int = 1) -> np.ndarray:
    gate, up = cut(y, (0, y.shape[1] // 2))
    return silu(gate) * up


def gdn_rows_numpy(proj, n, st: GDNLayerState, p: GDNParams, rec: RecordedRows | None,
                   src: GDNLayerState | None = None, threads: int = 1) -> np.ndarray:
    """Gates, then :func:`ops.gated_delta.gdn_token` a token at a time, then the gated norm."""
    if src is not None:  # gdn_token returns new arrays and never writes its inputs: start from src's
        st.conv, st.recurrent = src.conv, src.recurrent
    R = proj.shape[0]
    mixed, z, b, a = cut(proj, p.splits)  # [R, C], [R, HV*dv], [R, HV] x 2
    z = z.reshape(R, p.n_v_heads, p.dv)
    beta = sigmoid(b)  # [R, HV]
    alpha = np.exp(p.neg_A * softplus(a + p.dt_bias))  # [R, HV], in (0, 1]
    o = np.zeros((R, p.n_v_heads, p.dv), F32)
    for t in range(n):
        o[t], st.conv, st.recurrent = gdn_token(st.conv, st.recurrent, mixed[t], alpha[t], beta[t], p.conv_weight,
                                                p.n_k_heads, p.dk, p.dv)
        if rec is not None and len(rec.conv):
            rec.conv[t], rec.recurrent[t] = st.conv, st.recurrent
    if rec is not None:
        rec.mixed[:], rec.alpha[:], rec.beta[:] = mixed[:n], alpha[:n], beta[:n]
    y = gated_rms_norm(o, z, p.norm_weight, p.eps).reshape(R, p.n_v_heads * p.dv)
    y[n:] = 0.0
    return y


def gdn_replay_numpy(st: GDNLayerState, mixed, alpha, beta, p: GDNParams, threads: int = 1) -> None:
    for t in range(len(mixed)):
        _, st.conv, st.recurrent = gdn_token(st.conv, st.recurrent, mixed[t], alpha[t], beta[t], p.conv_weight,
                                             p.n_k_heads, p.dk, p.dv)


def attention_rows_numpy(qkv, n, kv: KVCache, pos: int, p: AttentionParams, threads: int = 1) -> np.ndarray:
    """q/k norms, partial RoPE at each row's position, KV append, then :func:`ops.attention.attend_row`
    over the row's own key prefix, times the sigmoid gate; a row at a time."""
    R, H, HKV, hd = qkv.shape[0], p.n_heads, p.n_kv_heads, p.head_dim
    qg, k, v = cut(qkv, p.splits)
    qg = qg.reshape(R, H, 2 * hd)  # per head [query | gate]
    q, gate = qg[..., :hd], qg[..., hd:].reshape(R, H * hd)
    q = rms_norm_zc(q, p.q_norm, p.eps)
    k = rms_norm_zc(k.reshape(R, HKV, hd), p.k_norm, p.eps)
    v = v.reshape(R, HKV, hd)
    out = np.zeros((R, H, hd), F32)
    for t in range(n):
        cos, sin = cos_sin(pos + t, p.freqs)
        kv.append(apply_rope(k[t], cos, sin), v[t])
        keys, values = kv.prefix(kv.length)
        out[t] = attend_row(apply_rope(q[t], cos, sin), keys, values, p.scale)
    y = out.reshape(R, H * hd) * sigmoid(gate)
    y[n:] = 0.0
    return y


NUMPY_OPS = TargetOps("numpy", norm_numpy, silu_mul_numpy, gdn_rows_numpy, gdn_replay_numpy, attention_rows_numpy,
                      combine_numpy, route_rows_numpy, "numpy")


# -- the compiled table: thin wrappers that allocate the outputs ------------------------------------
def norm_numba(x: np.ndarray, weight: np.ndarray, eps: float, threads: int = 1) -> np.ndarray:
    out = np.empty_like(x)
    rms_norm_rows(x, weight, F32(eps), True, out)
    return out


def silu_mul_numba(y: np.ndarray, threads: int = 1) -> np.ndarray:
    out = np.empty((y.shape[0], y.shape[1] // 2), F32)
    silu_mul(y, out)
    return out


def _mixer_start(st: GDNLayerState, src: GDNLayerState | None) -> np.ndarray:
    """Make st's arrays its own (they are updated in place) and return the recurrent state the rows start from:
    st's, or on a verify's first call the snapshot's, which the first row's sweep reads as it writes st's (the
    conv window is small, C x (K-1): copied)."""
    st.conv, st.recurrent = _owned(st.conv), _owned(st.recurrent)
    if src is None:
        return st.recurrent
    np.copyto(st.conv, src.conv)
    return np.ascontiguousarray(src.recurrent, dtype=F32)


def gdn_rows_numba(proj, n, st: GDNLayerState, p: GDNParams, rec: RecordedRows | None,
                   src: GDNLayerState | None = None, threads: int = 1) -> np.ndarray:
    start = _mixer_start(st, src)
    rec = rec if rec is not None else RecordedRows.none(st)
    out = np.empty((proj.shape[0], p.n_v_heads * p.dv), F32)
    gdn_mixer_rows(proj, n, st.conv, st.recurrent, start, p.conv_weight, p.neg_A, p.dt_bias, p.norm_weight, p.eps,
                   p.n_k_heads, p.dk, p.dv, rec.mixed, rec.alpha, rec.beta, rec.conv, rec.recurrent, out)
    return out


def gdn_replay_numba(st: GDNLayerState, mixed, alpha, beta, p: GDNParams, threads: int = 1) -> None:
    gdn_replay_fast(st.conv, st.recurrent, mixed, alpha, beta, p.conv_weight, p.n_k_heads, p.dk, p.dv)


def attention_rows_numba(qkv, n, kv: KVCache, pos: int, p: AttentionParams, threads: int = 1,
                         rows: "RowJobs | None" = None) -> np.ndarray:
    """The compiled attention; with ``rows`` (the delta.c table's pool) its (row, head) pairs on up to
    ``threads`` threads - the same bits."""
    if not kv.keys_last:  # the compiled loop indexes keys [H, hd, capacity]; another layout would write out of bounds
        raise StateError(f"the compiled attention needs a keys_last KVCache (keys [H, hd, capacity]), got keys "
                         f"{kv.keys.shape}; make the cache with GatedAttention.new_state() or KVCache(..., keys_last=True)")
    kv.reserve(kv.length + n)
    out = np.empty((qkv.shape[0], p.n_heads * p.head_dim), F32)
    if rows is not None and threads > 1:
        rows.attention(qkv, n, pos, kv.length, kv.keys, kv.values, p.q_norm, p.k_norm, p.eps, p.freqs, p.n_heads,
                       p.scale, out, threads)
    else:
        attention_rows(qkv, n, pos, kv.length, kv.keys, kv.values, p.q_norm, p.k_norm, p.eps, p.freqs, p.n_heads,
                       F32(p.scale), out)
    kv.length += n
    return out


def _owned(a: np.ndarray) -> np.ndarray:
    """``a`` itself when the compiled path may update it in place (its own C-contiguous float32 memory),
    else a copy: an in-place update must never reach an array someone else holds a view of."""
    if a.dtype == F32 and a.flags.c_contiguous and a.flags.owndata and a.flags.writeable:
        return a
    return np.array(a, dtype=F32, order="C")


NUMBA_OPS = TargetOps("numba", norm_numba, silu_mul_numba, gdn_rows_numba, gdn_replay_numba, attention_rows_numba,
                      combine_fast, route_rows_fast, "numba")  # the compiled functions themselves: nothing to wrap


# -- the compiled table with the delta rule's heads in delta.c (hybrid/delta_native.py) -------------
def native_delta_ops(nd: NativeDelta) -> TargetOps:
    """``NUMBA_OPS`` with the mixer's and the replay's heads on ``nd``: numba before and after them (the gates,
    the conv, the gated norm), delta.c between - the bits of ``NUMBA_OPS`` (tests/ops/test_delta_native.py).
    The row-independent ops run a job a row, and attention a job a (row, head) pair, on the same library's pool
    (``ops.row_jobs``) when ``threads`` > 1 and the work pays for the threads - the same bits again."""
    rows = RowJobs(nd.lib.team, nd.lib.data_off)

    def norm(x: np.ndarray, weight: np.ndarray, eps: float, threads: int = 1) -> np.ndarray:
        return rows.norm(x, weight, eps, True, threads)

    def silu_mul(y: np.ndarray, threads: int = 1) -> np.ndarray:
        return rows.silu_mul(y, threads)

    def gdn_rows(proj, n, st: GDNLayerState, p: GDNParams, rec: RecordedRows | None,
                 src: GDNLayerState | None = None, threads: int = 1) -> np.ndarray:
        if rec is not None and rec.recurrent.shape[0]:  # the checkpoint path keeps every row's state: numba's loop
            return gdn_rows_numba(proj, n, st, p, rec, src)
        start = _mixer_start(st, src)
        rec = rec if rec is not None else RecordedRows.none(st)
        HV, dv = p.n_v_heads, p.dv
        args = (proj, n, st.conv, p.conv_weight, p.neg_A, p.dt_bias, p.n_k_heads, p.dk, dv, HV, rec.mixed, rec.alpha,
                rec.beta)
        pre = None if rec.conv.shape[0] else rows.mixer_prep(*args, threads)  # per-row conv states: the row loop
        xs, qs, ks, alphas, betas = pre if pre is not None else gdn_mixer_prep(*args, rec.conv)
        o = np.empty((n, HV, dv), F32)
        nd.lib.delta_heads(st.recurrent, start, alphas, betas, ks, qs, xs, o, 2 * p.n_k_heads * p.dk, nd.path, threads)
        out = np.empty((proj.shape[0], HV * dv), F32)
        rows.mixer_finish(proj, n, o, p.norm_weight, p.eps, st.conv.shape[0], out, threads)
        return out

    def attention(qkv, n, kv: KVCache, pos: int, p: AttentionParams, threads: int = 1) -> np.ndarray:
        return attention_rows_numba(qkv, n, kv, pos, p, threads, rows)

    def gdn_replay(st: GDNLayerState, mixed, alpha, beta, p: GDNParams, threads: int = 1) -> None:
        st.conv, st.recurrent = _owned(st.conv), _owned(st.recurrent)
        xs, qs, ks = gdn_replay_prep(st.conv, np.ascontiguousarray(mixed, dtype=F32), p.conv_weight, p.n_k_heads, p.dk)
        nd.lib.delta_heads(st.recurrent, st.recurrent, np.ascontiguousarray(alpha, dtype=F32),
                           np.ascontiguousarray(beta, dtype=F32), ks, qs, xs, None, 2 * p.n_k_heads * p.dk, nd.path,
                           threads)

    return TargetOps("numba", norm, silu_mul, gdn_rows, gdn_replay, attention, combine_fast,
                     route_rows_fast, nd.name)


_COMPILED: "list[TargetOps]" = []


def compiled_ops() -> TargetOps:
    """The compiled table this machine runs: the delta rule in delta.c where its library loads and the CPU has
    AVX2 (``native_delta``), else numba's. Resolved once."""
    if not _COMPILED:
        nd = native_delta()
        _COMPILED.append(native_delta_ops(nd) if nd is not None else NUMBA_OPS)
    return _COMPILED[0]


def resolve_ops(name: "str | TargetOps") -> TargetOps:
    """``"numpy"``, ``"numba"`` or ``"auto"`` (numba when installed: :func:`compiled_ops`) -> the table; a table
    passes through."""
    if isinstance(name, TargetOps):
        return name
    return compiled_ops() if resolve_ops_name(name, "target") == "numba" else NUMPY_OPS
