"""The target's layers: the Gated DeltaNet mixer (with the replay a commit runs), gated attention, the
dense MLP (the sparse block is ``moe_mlp.MoeMLP``) and the pre-norm decoder layer. Exact math:
``hybrid-target.md`` section 3.

Every layer is called as ``layer(x, n, state, pos, index, recorder)``: x [R, D] holds a row set whose
first n rows are real; ``recorder`` is None outside a verify.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ops.attention import attend_row
from ..ops.attention_fast import attention_rows
from ..ops.gated_delta import gdn_token
from ..ops.gated_delta_fast import gdn_mixer_rows, gdn_replay_fast
from ..ops.kv_cache import KVCache
from ..ops.norm import gated_rms_norm, rms_norm_zc, sigmoid, silu, softplus
from ..ops.norm_fast import rms_norm_rows, silu_mul
from ..ops.rope import apply_rope, cos_sin, inv_freq
from .config import TargetConfig
from .moe_mlp import MoeMLP
from .state import GDNLayerState

F32 = np.float32


def _bounds(widths: Sequence[int]) -> tuple[int, ...]:
    """Column bounds of a fused projection's parts: widths [a, b, c] -> (0, a, a+b, a+b+c)."""
    return tuple(int(v) for v in np.cumsum([0, *widths]))


def _cut(y: np.ndarray, bounds: tuple[int, ...]) -> list[np.ndarray]:
    """The parts of y [R, total] as column views (np.split's result, without its ~25 us per call)."""
    return [y[:, lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])] + [y[:, bounds[-1]:]]


class Recorder:
    """Collects, during a verify, what commit needs (per GDN layer: the rows' recurrence inputs and, on
    the checkpoint path, the state after every row), in blocks of rows as the row sets go by."""

    def __init__(self, per_row: bool):
        self.per_row = per_row
        self.mixed: dict[int, list] = {}
        self.alpha: dict[int, list] = {}
        self.beta: dict[int, list] = {}
        self.states: dict[int, list] = {}

    def add_rows(self, layer: int, mixed, alpha, beta, states) -> None:
        """mixed [n, C], alpha and beta [n, HV] (owned arrays); states: n GDNLayerStates or None."""
        self.mixed.setdefault(layer, []).append(mixed)
        self.alpha.setdefault(layer, []).append(alpha)
        self.beta.setdefault(layer, []).append(beta)
        if self.per_row:
            self.states.setdefault(layer, []).extend(states)

    def rows(self, d: dict, layer: int) -> np.ndarray:
        return np.concatenate(d[layer]) if d.get(layer) else np.zeros((0,), F32)


class GatedDeltaNet:
    """Linear-attention mixer. Shapes: h [R, D] -> [R, D] (R = row set, first n rows real).

    ``compiled``: the rows between the two projections run in one numba call (``gdn_mixer_rows``);
    otherwise the numpy reference runs them one token at a time (``gdn_token``). Either way every row,
    of a step, a verify or a commit's replay, goes through the same per-token code."""

    def __init__(self, cfg: TargetConfig, w: dict, p: str, lin, fused, compiled: bool):
        self.cfg = cfg
        self.compiled = compiled
        # qkv, z, b, a read the same input: one call, split at these column offsets
        self.in_proj = fused([p + "in_proj_qkv.weight", p + "in_proj_z.weight", p + "in_proj_b.weight", p + "in_proj_a.weight"])
        hv = cfg.linear_num_value_heads
        self.splits = _bounds([cfg.conv_dim, cfg.value_dim, hv])
        self.out_proj = lin(p + "out_proj.weight")
        self.conv_weight = np.ascontiguousarray(w[p + "conv1d.weight"][:, 0, :], dtype=F32)  # [C, K]
        self.neg_A = -np.exp(w[p + "A_log"].astype(F32))  # [HV]
        self.dt_bias = np.ascontiguousarray(w[p + "dt_bias"], dtype=F32)
        self.norm_weight = np.ascontiguousarray(w[p + "norm.weight"], dtype=F32)
        self.eps = F32(cfg.rms_norm_eps)

    def new_state(self) -> GDNLayerState:
        c = self.cfg
        return GDNLayerState(
            np.zeros((c.conv_dim, c.linear_conv_kernel_dim - 1), F32),
            np.zeros((c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim), F32),
        )

    def __call__(self, h, n, st: GDNLayerState, pos: int, layer: int, recorder: Recorder | None):
        proj = self.in_proj(h)  # [R, C + HV*dv + 2*HV]: mixed | z | b | a
        y = self._rows_compiled(proj, n, st, layer, recorder) if self.compiled else self._rows_numpy(proj, n, st, layer, recorder)
        return self.out_proj(y)

    def replay(self, snapshot: GDNLayerState, mixed: np.ndarray, alpha: np.ndarray, beta: np.ndarray, *,
               in_place: bool = False) -> GDNLayerState:
        """The state ``len(mixed)`` steps leave after ``snapshot``, from a verify's recorded inputs
        (mixed [a, C], alpha and beta [a, HV]): the same per-token code the forward ran, no GEMM.
        ``in_place``: advance ``snapshot`` itself (a commit that has no further use for it) instead of a copy."""
        c = self.cfg
        st = snapshot if in_place else snapshot.copy()
        if self.compiled:
            gdn_replay_fast(st.conv, st.recurrent, mixed, alpha, beta, self.conv_weight,
                            c.linear_num_key_heads, c.linear_key_head_dim, c.linear_value_head_dim)
            return st
        for t in range(len(mixed)):
            _, st.conv, st.recurrent = gdn_token(st.conv, st.recurrent, mixed[t], alpha[t], beta[t], self.conv_weight,
                                           c.linear_num_key_heads, c.linear_key_head_dim, c.linear_value_head_dim)
        return st

    def _rows_numpy(self, proj, n, st, layer, recorder):
        c = self.cfg
        R = proj.shape[0]
        mixed, z, b, a = _cut(proj, self.splits)  # [R, C], [R, HV*dv], [R, HV] x 2
        z = z.reshape(R, c.linear_num_value_heads, c.linear_value_head_dim)
        beta = sigmoid(b)  # [R, HV]
        alpha = np.exp(self.neg_A * softplus(a + self.dt_bias))  # [R, HV], in (0, 1]
        o = np.zeros((R, c.linear_num_value_heads, c.linear_value_head_dim), F32)
        states = []
        for t in range(n):
            o[t], st.conv, st.recurrent = gdn_token(
                st.conv, st.recurrent, mixed[t], alpha[t], beta[t], self.conv_weight,
                c.linear_num_key_heads, c.linear_key_head_dim, c.linear_value_head_dim,
            )
            if recorder is not None and recorder.per_row:
                states.append(st.copy())
        if recorder is not None:
            recorder.add_rows(layer, mixed[:n].copy(), alpha[:n].copy(), beta[:n].copy(), states)
        y = gated_rms_norm(o, z, self.norm_weight, c.rms_norm_eps).reshape(R, c.value_dim)
        y[n:] = 0.0
        return y

    def _rows_compiled(self, proj, n, st, layer, recorder):
        c = self.cfg
        hv, C = c.linear_num_value_heads, c.conv_dim
        st.conv, st.recurrent = _owned(st.conv), _owned(st.recurrent)  # updated in place below
        out = np.empty((proj.shape[0], c.value_dim), F32)
        m = n if recorder is not None else 0
        mixed, alpha, beta = np.empty((m, C), F32), np.empty((m, hv), F32), np.empty((m, hv), F32)
        k = n if recorder is not None and recorder.per_row else 0
        ck_conv, ck_rec = np.empty((k, *st.conv.shape), F32), np.empty((k, *st.recurrent.shape), F32)
        gdn_mixer_rows(proj, n, st.conv, st.recurrent, self.conv_weight, self.neg_A, self.dt_bias, self.norm_weight,
                       self.eps, c.linear_num_key_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                       mixed, alpha, beta, ck_conv, ck_rec, out)
        if recorder is not None:
            recorder.add_rows(layer, mixed, alpha, beta, [GDNLayerState(ck_conv[t], ck_rec[t]) for t in range(k)])
        return out


class GatedAttention:
    """Full attention with q/k norms, partial RoPE and a sigmoid output gate. h [R, D] -> [R, D].

    ``compiled``: every row of a call in one numba call (``attention_rows``); otherwise numpy, a row at
    a time (``attend_row``)."""

    def __init__(self, cfg: TargetConfig, w: dict, p: str, lin, fused, compiled: bool):
        self.cfg = cfg
        self.compiled = compiled
        self.qkv_proj = fused([p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"])
        kv = cfg.num_key_value_heads * cfg.head_dim
        self.splits = _bounds([2 * cfg.num_attention_heads * cfg.head_dim, kv])
        self.o_proj = lin(p + "o_proj.weight")
        self.q_norm = np.ascontiguousarray(w[p + "q_norm.weight"], dtype=F32)
        self.k_norm = np.ascontiguousarray(w[p + "k_norm.weight"], dtype=F32)
        self.freqs = inv_freq(cfg.rot_dim, cfg.rope_theta)
        self.scale = float(cfg.head_dim) ** -0.5
        self.eps = F32(cfg.rms_norm_eps)

    def new_state(self) -> KVCache:
        return KVCache(self.cfg.num_key_value_heads, self.cfg.head_dim)

    def __call__(self, h, n, st: KVCache, pos: int, layer: int, recorder):
        qkv = self.qkv_proj(h)  # [R, H*2*hd + 2*HKV*hd]: per head [query | gate], then k, v
        y = self._rows_compiled(qkv, n, st, pos) if self.compiled else self._rows_numpy(qkv, n, st, pos)
        return self.o_proj(y)

    def _rows_numpy(self, qkv, n, st, pos):
        c = self.cfg
        R, H, HKV, hd = qkv.shape[0], c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qg, k, v = _cut(qkv, self.splits)
        qg = qg.reshape(R, H, 2 * hd)  # per head [query | gate]
        q, gate = qg[..., :hd], qg[..., hd:].reshape(R, H * hd)
        q = rms_norm_zc(q, self.q_norm, c.rms_norm_eps)
        k = rms_norm_zc(k.reshape(R, HKV, hd), self.k_norm, c.rms_norm_eps)
        v = v.reshape(R, HKV, hd)
        out = np.zeros((R, H, hd), F32)
        for t in range(n):
            cos, sin = cos_sin(pos + t, self.freqs)
            st.append(apply_rope(k[t], cos, sin), v[t])
            keys, values = st.prefix(st.length)
            out[t] = attend_row(apply_rope(q[t], cos, sin), keys, values, self.scale)
        y = out.reshape(R, H * hd) * sigmoid(gate)
        y[n:] = 0.0
        return y

    def _rows_compiled(self, qkv, n, st, pos):
        c = self.cfg
        st.reserve(st.length + n)
        out = np.empty((qkv.shape[0], c.num_attention_heads * c.head_dim), F32)
        attention_rows(qkv, n, pos, st.length, st.keys, st.values, self.q_norm, self.k_norm, self.eps, self.freqs,
                       c.num_attention_heads, F32(self.scale), out)
        st.length += n
        return out


class DenseMLP:
    def __init__(self, p: str, lin, fused, compiled: bool):
        self.gate_up = fused([p + "gate_proj.weight", p + "up_proj.weight"])
        self.down = lin(p + "down_proj.weight")
        self.compiled = compiled

    def __call__(self, h, n: int = 0):  # n (the real rows) matters to the sparse block only
        y = self.gate_up(h)  # [R, 2 * I]
        if self.compiled:
            g = np.empty((y.shape[0], y.shape[1] // 2), F32)
            silu_mul(y, g)
            return self.down(g)
        gate, up = _cut(y, (0, y.shape[1] // 2))
        return self.down(silu(gate) * up)


class DecoderLayer:
    """Pre-norm block with two residuals: x + mixer(norm(x)), then + mlp(norm(.))."""

    def __init__(self, cfg: TargetConfig, w: dict, i: int, lin, fused, compiled: bool, row_set: int, row_invariant: bool):
        p = f"model.layers.{i}."
        self.kind = cfg.layer_types[i]
        mixer = GatedDeltaNet if self.kind == "linear_attention" else GatedAttention
        sub = "linear_attn." if self.kind == "linear_attention" else "self_attn."
        self.mixer = mixer(cfg, w, p + sub, lin, fused, compiled)
        if cfg.is_sparse(i):
            self.mlp = MoeMLP(cfg.moe, p + "mlp.", lin, lambda q: DenseMLP(q, lin, fused, compiled), row_set, row_invariant)
        else:
            self.mlp = DenseMLP(p + "mlp.", lin, fused, compiled)
        self.in_norm = np.ascontiguousarray(w[p + "input_layernorm.weight"], dtype=F32)
        self.post_norm = np.ascontiguousarray(w[p + "post_attention_layernorm.weight"], dtype=F32)
        self.eps = cfg.rms_norm_eps
        self.norm = compiled_norm if compiled else rms_norm_zc

    def __call__(self, x, n, st, pos, layer, recorder):
        x = x + self.mixer(self.norm(x, self.in_norm, self.eps), n, st, pos, layer, recorder)
        return x + self.mlp(self.norm(x, self.post_norm, self.eps), n)


def compiled_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    out = np.empty_like(x)
    rms_norm_rows(x, weight, F32(eps), True, out)
    return out


def _owned(a: np.ndarray) -> np.ndarray:
    """``a`` itself when the compiled path may update it in place (its own C-contiguous float32 memory),
    else a copy: an in-place update must never reach an array someone else holds a view of."""
    if a.dtype == F32 and a.flags.c_contiguous and a.flags.owndata and a.flags.writeable:
        return a
    return np.array(a, dtype=F32, order="C")
