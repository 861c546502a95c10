"""The draft's non-GEMM operations in two interchangeable tables, chosen once at load time (``ops=``,
resolved by ``ops/op_sets.py``, the same name and rule as the target's ``hybrid/ops.py``).

``NUMPY_OPS`` is the readable reference: each function below is the obviously-correct twin.
``NUMBA_OPS`` runs the compiled twins of the ``draft/kernels/`` package (same math, same layouts).
Both tables see the same GEMMs (``gemm.Linear``, fused where the input is shared) and return the same
shapes; ``tests/draft/test_ops_twins.py`` pins them together.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..ops import norm_fast
from ..ops.attention import attend_row
from ..ops.norm import rms_norm, silu
from ..ops.op_sets import resolve_ops_name
from ..ops.row_jobs import RowJobs
from ..ops.rope import rotate_half
from . import kernels
from .conv import grouped_dynamic_conv
from .pool import pooled_attention
from .selector import greedy_walk, pair_scores, top_candidates

F32 = np.float32


@dataclass(frozen=True)
class DraftOps:
    """One op set; every member takes and returns float32 arrays (shapes in each twin's docstring)."""

    name: str
    rms_norm: Callable[..., np.ndarray]
    heads: Callable[..., np.ndarray]
    attend: Callable[..., np.ndarray]
    attention: Callable[..., np.ndarray]
    conv_side: Callable[..., np.ndarray]
    silu_mul: Callable[..., np.ndarray]
    softcap: Callable[..., np.ndarray]
    top_candidates: Callable[..., tuple[np.ndarray, np.ndarray]]
    pair_scores: Callable[..., np.ndarray]
    greedy_walk: Callable[..., np.ndarray]


# -- the numpy twins ------------------------------------------------------------------------------
def heads_numpy(y: np.ndarray, col0: int, n: int, weight: np.ndarray, cos: np.ndarray, sin: np.ndarray, eps: float) -> np.ndarray:
    """Split columns ``col0 .. col0 + n*hd`` of y to heads, per-head RMSNorm, then rotate-half RoPE.

    Shapes: y [T, C]; weight [hd]; cos, sin [T, hd] -> [n, T, hd]."""
    hd = weight.shape[0]
    x = rms_norm(y[:, col0 : col0 + n * hd].reshape(y.shape[0], n, hd), weight, eps)  # [T, n, hd]
    x = x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]
    return np.ascontiguousarray(x.transpose(1, 0, 2))


def visible_range(qpos: int, end: int, causal: bool, window: int | None) -> tuple[int, int]:
    """Keys [lo, hi) a query at absolute position ``qpos`` sees, with keys 0..end-1 present (the mask
    rule of docs/draft.md)."""
    lo, hi = 0, (qpos + 1 if causal else end)
    if window is not None:
        lo = max(lo, qpos - window + 1)
        if not causal:
            hi = min(hi, qpos + window)
    return lo, hi


def attend_numpy(
    q: np.ndarray, kt: np.ndarray, vc: np.ndarray, s: int, kb: np.ndarray, vb: np.ndarray,
    causal: bool, window: int | None, scale: float,
) -> np.ndarray:
    """Block rows attend to [context; block] keys, each row on its own visible slice.

    Shapes: q [Hq, B, hd]; kt [Hk, hd, >= s] (``DraftState.kt``), vc [Hk, >= s, hd]: context rows [0, s);
    kb, vb [Hk, B, hd] at positions s..s+B-1 -> [B, Hq*hd]."""
    hq, b, hd = q.shape
    keys = np.concatenate([kt[:, :, :s].transpose(0, 2, 1), kb], axis=1)  # [Hk, s + B, hd], index = position
    values = np.concatenate([vc[:, :s], vb], axis=1)
    out = np.empty((b, hq * hd), F32)
    for j in range(b):
        lo, hi = visible_range(s + j, s + b, causal, window)
        out[j] = attend_row(q[:, j], keys[:, lo:hi], values[:, lo:hi], scale).reshape(-1)
    return out


def attention_numpy(
    qkv: np.ndarray, hq: int, hk: int, q_norm: np.ndarray, k_norm: np.ndarray, cos: np.ndarray, sin: np.ndarray,
    eps: float, kt: np.ndarray, vc: np.ndarray, s: int, causal: bool, window: int | None, threads: int = 1,
) -> np.ndarray:
    """The block's attention from its fused q/k/v projection: :func:`heads_numpy` for q and k, then
    :func:`attend_numpy` (scale hd^-0.5). Shapes: qkv [B, (Hq + 2 Hk) * hd] -> [B, Hq * hd]. ``threads``: the
    cores the compiled table may use (this twin runs on one)."""
    b, hd = qkv.shape[0], q_norm.shape[0]
    q = heads_numpy(qkv, 0, hq, q_norm, cos, sin, eps)  # [Hq, B, hd]
    kb = heads_numpy(qkv, hq * hd, hk, k_norm, cos, sin, eps)  # [Hk, B, hd]
    vb = np.ascontiguousarray(qkv[:, (hq + hk) * hd :].reshape(b, hk, hd).transpose(1, 0, 2))  # [Hk, B, hd]
    return attend_numpy(q, kt, vc, s, kb, vb, causal, window, hd**-0.5)


def silu_mul_numpy(gu: np.ndarray, inter: int) -> np.ndarray:
    """SwiGLU's ``silu(gate) * up`` of the fused gate/up output. Shapes: gu [T, 2I] -> [T, I]."""
    return silu(gu[:, :inter]) * gu[:, inter:]


def softcap_numpy(z: np.ndarray, mult: float, cap: float | None) -> np.ndarray:
    """In place ``z * mult``, then ``cap * tanh(z / cap)`` when cap is set. Shapes: z [n, V] (overwritten, returned)."""
    if mult != 1.0:  # x * 1.0 == x: skipping it changes no bit
        np.multiply(z, F32(mult), out=z)
    if cap is not None:
        np.divide(z, F32(cap), out=z)
        np.tanh(z, out=z)
        np.multiply(z, F32(cap), out=z)
    return z


NUMPY_OPS = DraftOps(
    "numpy", rms_norm, heads_numpy, attend_numpy, attention_numpy, grouped_dynamic_conv, silu_mul_numpy, softcap_numpy, top_candidates,
    pair_scores, greedy_walk,
)


# -- the compiled set: thin wrappers that allocate the outputs --------------------------------------
def rms_norm_numba(x, weight, eps):
    out = np.empty(x.shape, F32)
    norm_fast.rms_norm_rows(np.ascontiguousarray(x), weight, F32(eps), False, out)
    return out


def silu_mul_numba(gu, inter):
    out = np.empty((gu.shape[0], inter), F32)
    norm_fast.silu_mul(gu, out)
    return out


def heads_numba(y, col0, n, weight, cos, sin, eps):
    out = np.empty((n, y.shape[0], weight.shape[0]), F32)
    return kernels.norm_rope_heads(np.ascontiguousarray(y), col0, weight, cos, sin, F32(eps), out)


def attend_numba(q, kt, vc, s, kb, vb, causal, window, scale):
    out = np.empty((q.shape[1], q.shape[0] * q.shape[2]), F32)
    return kernels.attend_block(q, kt, vc, s, kb, vb, causal, 0 if window is None else window, F32(scale), out)


def _attention_on(rows, qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window, threads=1):
    """The compiled attention, its pairs on ``rows``' pool (``draft.pool``) or, with None, on this thread."""
    hd = q_norm.shape[0]
    out = np.empty((qkv.shape[0], hq * hd), F32)
    return pooled_attention(rows, qkv, hq, hk, q_norm, k_norm, cos, sin, F32(eps), kt, vc, s, causal,
                            0 if window is None else window, F32(hd**-0.5), out, threads)


def attention_numba(qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window, threads=1):
    return _attention_on(None, qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window, 1)


def conv_side_numba(y, dyn, base, group_size):
    return kernels.conv_side(y, dyn, base, group_size, np.empty(y.shape, F32))


def softcap_numba(z, mult, cap):
    if cap is None:
        return softcap_numpy(z, mult, cap)
    return kernels.softcap(z, F32(mult), F32(cap))


def top_candidates_numba(logits, k):
    k = min(k, logits.shape[1])
    cand, unary = np.empty((logits.shape[0], k), np.int64), np.empty((logits.shape[0], k), F32)
    kernels.top_candidates_into(np.ascontiguousarray(logits), k, cand, unary)
    return cand, unary


def pair_scores_numba(prev_row, hp_row, succ, cand_row):
    return kernels.pair_scores(prev_row, hp_row, succ, cand_row, np.empty(cand_row.shape[0], F32))


def greedy_walk_numba(unary, hp, pred, succ, cand, anchor):
    return kernels.greedy_walk_into(unary, np.ascontiguousarray(hp), pred, succ, cand, int(anchor), np.empty(cand.shape[0], np.int64))


NUMBA_OPS = DraftOps(
    "numba", rms_norm_numba, heads_numba, attend_numba, attention_numba, conv_side_numba, silu_mul_numba, softcap_numba,
    top_candidates_numba, pair_scores_numba, greedy_walk_numba,
)


def pooled_ops(rows: RowJobs) -> DraftOps:
    """``NUMBA_OPS`` with the block's attention on ``rows``' pool (``draft.pool``): its (row, KV head) pairs as
    jobs when ``threads`` > 1 and the work pays for them - the bits of ``NUMBA_OPS`` (tests/draft/test_pool.py)."""

    return replace(NUMBA_OPS, attention=functools.partial(_attention_on, rows))


@functools.cache
def compiled_ops() -> DraftOps:
    """The compiled table this machine runs: :func:`pooled_ops` on the host-int library's pool where the library
    loads, else ``NUMBA_OPS`` (one thread). Resolved once."""
    from ..gemm.host_int import native

    try:
        lib = native.load("main")
    except native.NativeUnavailable:  # the GEMM backend reports why the library is missing
        return NUMBA_OPS
    return pooled_ops(RowJobs(lib.team, lib.data_off))


def resolve_ops(name: "str | DraftOps") -> DraftOps:
    """``"numpy"``, ``"numba"`` or ``"auto"`` (numba when installed: :func:`compiled_ops`) -> the op table; a table
    passes through."""
    if isinstance(name, DraftOps):
        return name
    return compiled_ops() if resolve_ops_name(name, "draft") == "numba" else NUMPY_OPS


__all__ = ["DraftOps", "NUMPY_OPS", "NUMBA_OPS", "compiled_ops", "pooled_ops", "resolve_ops"]
