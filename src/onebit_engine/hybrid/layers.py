"""The target's layers: the Gated DeltaNet mixer (with the replay a commit runs), gated attention, the
dense MLP (the sparse block is ``moe_mlp.MoeMLP``) and the pre-norm decoder layer. Each holds its
weights and runs its projections through ``gemm.Linear``; everything between the projections goes
through the target's op table (``ops.py``: the numpy twins or their compiled versions, chosen once).
Exact math: docs/model-math.md.

Every layer is called as ``layer(x, n, state)``: x [R, D] holds a row set whose first n rows are real;
``state`` is the whole ``TargetState``: a layer reads its own entry (``state.layers[index]``), the
position of row 0 (``state.pos``) and, during a verify, the record it writes its rows into
(``state.pending``; None outside a verify).
"""
from __future__ import annotations

import numpy as np

from ..gemm.base import backend_threads
from ..ops.kv_cache import KVCache
from ..ops.rope import inv_freq
from .config import TargetConfig
from .moe_mlp import MoeMLP
from .ops import AttentionParams, GDNParams, TargetOps, bounds
from .state import GDNLayerState, TargetState
from .weights import ATTENTION_FUSED, GDN_FUSED, MLP_FUSED

F32 = np.float32


class GatedDeltaNet:
    """Linear-attention mixer. Shapes: h [R, D] -> [R, D] (R = row set, first n rows real).

    Every row, of a step, a verify or a commit's replay, goes through the same per-token code of the
    chosen op table."""

    def __init__(self, cfg: TargetConfig, w: dict, p: str, index: int, lin, fused, ops: TargetOps):
        self.cfg, self.index, self.ops = cfg, index, ops
        # qkv, z, b, a read the same input: one call, split at these column offsets
        self.in_proj = fused([p + n + ".weight" for n in GDN_FUSED])
        self.out_proj = lin(p + "out_proj.weight")
        hv = cfg.linear_num_value_heads
        self.params = GDNParams(
            conv_weight=np.ascontiguousarray(w[p + "conv1d.weight"][:, 0, :], dtype=F32),  # [C, K]
            neg_A=-np.exp(w[p + "A_log"].astype(F32)),  # [HV]
            dt_bias=np.ascontiguousarray(w[p + "dt_bias"], dtype=F32),
            norm_weight=np.ascontiguousarray(w[p + "norm.weight"], dtype=F32),
            eps=F32(cfg.rms_norm_eps), n_k_heads=cfg.linear_num_key_heads, n_v_heads=hv,
            dk=cfg.linear_key_head_dim, dv=cfg.linear_value_head_dim, splits=bounds([cfg.conv_dim, cfg.value_dim, hv]),
        )

    def new_state(self) -> GDNLayerState:
        c = self.cfg
        return GDNLayerState(
            np.zeros((c.conv_dim, c.linear_conv_kernel_dim - 1), F32),
            np.zeros((c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim), F32),
        )

    def __call__(self, h: np.ndarray, n: int, state: TargetState) -> np.ndarray:
        record = state.pending
        rows = record.rows_of(self.index, state.pos, n) if record is not None else None
        # a verify's first call starts from the snapshot it handed over (state.hand_over), later ones in place
        src = record.snapshot[self.index] if record is not None and state.pos == record.start_pos else None
        proj = self.in_proj(h)  # [R, C + HV*dv + 2*HV]: mixed | z | b | a
        return self.out_proj(self.ops.gdn_rows(proj, n, state.layers[self.index], self.params, rows, src,
                                               threads=self.threads()))

    def threads(self) -> int:
        return backend_threads(self.in_proj)

    def replay(self, snapshot: GDNLayerState, mixed: np.ndarray, alpha: np.ndarray, beta: np.ndarray, *,
               in_place: bool = False) -> GDNLayerState:
        """The state ``len(mixed)`` steps leave after ``snapshot``, from a verify's recorded inputs
        (mixed [a, C], alpha and beta [a, HV]): the same per-token code the forward ran, no GEMM.
        ``in_place``: advance ``snapshot`` itself (a commit that has no further use for it) instead of a copy."""
        st = snapshot if in_place else snapshot.copy()
        self.ops.gdn_replay(st, mixed, alpha, beta, self.params, threads=self.threads())
        return st


class GatedAttention:
    """Full attention with q/k norms, partial RoPE and a sigmoid output gate. h [R, D] -> [R, D]."""

    def __init__(self, cfg: TargetConfig, w: dict, p: str, index: int, lin, fused, ops: TargetOps):
        self.cfg, self.index, self.ops = cfg, index, ops
        self.qkv_proj = fused([p + n + ".weight" for n in ATTENTION_FUSED])
        self.o_proj = lin(p + "o_proj.weight")
        H, HKV, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.params = AttentionParams(
            q_norm=np.ascontiguousarray(w[p + "q_norm.weight"], dtype=F32),
            k_norm=np.ascontiguousarray(w[p + "k_norm.weight"], dtype=F32),
            freqs=inv_freq(cfg.rot_dim, cfg.rope_theta), scale=float(hd) ** -0.5, eps=F32(cfg.rms_norm_eps),
            n_heads=H, n_kv_heads=HKV, head_dim=hd, splits=bounds([2 * H * hd, HKV * hd]),
        )

    def threads(self) -> int:
        return backend_threads(self.qkv_proj)

    def new_state(self) -> KVCache:
        # keys_last: the compiled score loop runs over contiguous positions (ops.attention_fast)
        return KVCache(self.cfg.num_key_value_heads, self.cfg.head_dim, keys_last=True)

    def __call__(self, h: np.ndarray, n: int, state: TargetState) -> np.ndarray:
        qkv = self.qkv_proj(h)  # [R, H*2*hd + 2*HKV*hd]: per head [query | gate], then k, v
        return self.o_proj(self.ops.attention_rows(qkv, n, state.layers[self.index], state.pos, self.params,
                                                   threads=self.threads()))


class DenseMLP:
    def __init__(self, p: str, lin, fused, ops: TargetOps):
        self.gate_up = fused([p + n + ".weight" for n in MLP_FUSED])
        self.down = lin(p + "down_proj.weight")
        self.ops = ops

    def __call__(self, h, n: int = 0):  # n (the real rows) matters to the sparse block only
        return self.down(self.ops.silu_mul(self.gate_up(h), threads=backend_threads(self.down)))  # gate_up: [R, 2I]


class DecoderLayer:
    """Pre-norm block with two residuals: x + mixer(norm(x)), then + mlp(norm(.))."""

    def __init__(self, cfg: TargetConfig, w: dict, i: int, lin, fused, ops: TargetOps, row_set: int, row_invariant: bool):
        p = f"model.layers.{i}."
        self.kind = cfg.layer_types[i]
        mixer = GatedDeltaNet if self.kind == "linear_attention" else GatedAttention
        sub = "linear_attn." if self.kind == "linear_attention" else "self_attn."
        self.mixer = mixer(cfg, w, p + sub, i, lin, fused, ops)
        if cfg.is_sparse(i):
            self.mlp = MoeMLP(cfg.moe, p + "mlp.", lin, lambda q: DenseMLP(q, lin, fused, ops), row_set, row_invariant,
                              ops)
        else:
            self.mlp = DenseMLP(p + "mlp.", lin, fused, ops)
        self.in_norm = np.ascontiguousarray(w[p + "input_layernorm.weight"], dtype=F32)
        self.post_norm = np.ascontiguousarray(w[p + "post_attention_layernorm.weight"], dtype=F32)
        self.eps = cfg.rms_norm_eps
        self.norm = ops.norm

    def __call__(self, x: np.ndarray, n: int, state: TargetState) -> np.ndarray:
        t = self.mixer.threads()
        x = x + self.mixer(self.norm(x, self.in_norm, self.eps, threads=t), n, state)
        return x + self.mlp(self.norm(x, self.post_norm, self.eps, threads=t), n)
