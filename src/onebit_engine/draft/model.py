"""The DFlash / DFlash 2 block-diffusion draft, forward in numpy (docs/draft.md, "What one round computes").

One round: the committed context reaches the draft as target hidden rows ("taps"); each draft layer
projects the fused feature ``c = hidden_norm(fc(concat taps))`` with its own k_proj/v_proj ("KV
injection", cached in :class:`DraftState`). The block ``[anchor, MASK x n]`` at positions
``s..s+n`` then runs once through the layers (pre-norm residual, Qwen3 attention with q/k norm then
RoPE, SwiGLU MLP; DFlash 2 wraps both sublayers in a grouped dynamic conv), is final-normed, and the
target's lm_head turns rows 1..n into draft logits (x output_multiplier, then softcap).

Attention of block query q (absolute position) over keys k (context 0..s-1, block s..s+n) in layer i::

    visible = (not causal[i] or k <= q) and (window[i] is None or (q - k < W and (causal[i] or k - q < W)))

which is always one contiguous key range, so each query row attends to its own slice of the keys:
a row's result never depends on how many rows the block has beyond what it may see.

Everything that is not a GEMM goes through ``self.ops`` (``draft.ops``: the numpy twins or their
compiled versions, chosen at load time); every GEMM goes through ``gemm.Linear``, fused where the
input is shared (q/k/v of the block, k/v of the context, gate/up).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import NumericalError, StateError
from ..gemm import Linear
from ..gemm.base import backend_threads
from ..ops.rope import RopeTable, inv_freq
from .config import DraftConfig
from .conv import GroupedDynamicConv
from .ops import DraftOps, resolve_ops
from .selector import CandidateSelector, sample_index, softmax
from .state import DraftState

F32 = np.float32


@dataclass(frozen=True)
class DraftLayer:
    """Weights of one decoder layer; norms float32 [H] (q_norm/k_norm [hd]); convs only for DFlash 2.

    ``qkv_proj`` is q_proj, k_proj, v_proj fused (output columns in that order) for the block;
    ``kv_proj`` is k_proj, v_proj fused for the context rows (the k/v rows are stored twice: one call
    per round each instead of three and two); ``gate_up_proj`` is gate_proj, up_proj fused."""

    input_layernorm: np.ndarray
    post_attention_layernorm: np.ndarray
    qkv_proj: Linear
    kv_proj: Linear
    o_proj: Linear
    q_norm: np.ndarray
    k_norm: np.ndarray
    gate_up_proj: Linear
    down_proj: Linear
    attention_conv: GroupedDynamicConv | None = None
    mlp_conv: GroupedDynamicConv | None = None


@dataclass(frozen=True)
class Proposal:
    """One draft call's output (n = n_draft).

    ``tokens`` int64 [n]; ``q`` float32 [n, V]: the distribution each token was drawn from (T > 0:
    softmax(logits / T) for v1, the selector's q_t on its k candidates for v2; T = 0: one-hot of the
    greedy choice); ``hidden`` float32 [n + 1, H] final-normed block rows (row 0 = anchor);
    ``logits`` float32 [n, V] after output_multiplier and softcap.
    """

    tokens: np.ndarray
    q: np.ndarray
    hidden: np.ndarray
    logits: np.ndarray


class Draft:
    """A loaded draft bound to its target's embedding table and lm_head (see ``loader.load_draft``)."""

    def __init__(
        self,
        config: DraftConfig,
        *,
        fc: Linear,
        hidden_norm: np.ndarray,
        norm: np.ndarray,
        layers: list[DraftLayer],
        embed_tokens: np.ndarray,
        lm_head: Linear,
        num_target_layers: int,
        selector: CandidateSelector | None = None,
        ops: str | DraftOps = "auto",
    ):
        self.config = config
        self.ops = ops if isinstance(ops, DraftOps) else resolve_ops(ops)
        self.fc, self.hidden_norm, self.norm = fc, hidden_norm, norm
        self.layers = layers
        self.embed_tokens = embed_tokens  # [V, H], the target's raw table
        self.lm_head = lm_head  # the target's, H -> V
        self.num_target_layers = num_target_layers
        self.selector = selector
        self.backend = fc.backend  # the draft's own projections' backend (the run's provenance reports it)
        self.inv_freq = inv_freq(config.head_dim, config.rope_theta)  # [hd / 2]
        self.rope = RopeTable(self.inv_freq)  # cos/sin per absolute position, kept across rounds
        self.tap_index = np.asarray(config.target_layer_ids, dtype=np.int64)
        self._causal, self._windows = config.causal, config.windows  # per layer (the mask rule of docs/draft.md)

    @property
    def block_size(self) -> int:
        """The anchor plus the most drafts one proposal makes (the loop's k is at most block_size - 1)."""
        return self.config.block_size

    def new_state(self) -> DraftState:
        c = self.config
        return DraftState(c.num_hidden_layers, c.num_key_value_heads, c.head_dim)

    # -- context ------------------------------------------------------------------------------
    def context_features(self, taps: np.ndarray) -> np.ndarray:
        """``c = hidden_norm(fc(concat taps at target_layer_ids))``. Shapes: taps [T, L_target, H] -> [T, H]."""
        if taps.ndim != 3 or taps.shape[1] != self.num_target_layers or taps.shape[2] != self.config.hidden_size:
            raise ValueError(
                f"taps must be float32 [T, {self.num_target_layers}, {self.config.hidden_size}] (target Output.hidden "
                f"rows: every target layer's output), got shape {taps.shape}"
            )
        feats = taps[:, self.tap_index, :].reshape(taps.shape[0], -1).astype(F32, copy=False)  # [T, n_feat * H]
        return self.ops.rms_norm(self.fc(feats), self.hidden_norm, self.config.rms_norm_eps)

    def append_context(self, state: DraftState, taps: np.ndarray) -> None:
        """Cache every layer's context K/V for the next T committed positions; ``state.length += T``."""
        t = taps.shape[0]
        if t == 0:
            return
        cfg = self.config
        c = self.context_features(taps)
        cos, sin = self.rope.rows(state.length, state.length + t)
        hk, hd = cfg.num_key_value_heads, cfg.head_dim
        for i, layer in enumerate(self.layers):
            kv = layer.kv_proj(c)  # [T, 2 * Hk * hd]: k then v
            k = self.ops.heads(kv, 0, hk, layer.k_norm, cos, sin, cfg.rms_norm_eps)  # [Hk, T, hd]
            state.append(i, k, kv[:, hk * hd :].reshape(t, hk, hd).transpose(1, 0, 2))
        state.advance(t)

    # -- block --------------------------------------------------------------------------------
    def forward_block(self, state: DraftState, tokens: np.ndarray) -> np.ndarray:
        """Run the block once. Shapes: tokens int [B'] at positions state.length.. -> final-normed hidden [B', H]."""
        c = self.config
        b = tokens.shape[0]
        s = state.length
        h = self.embed_tokens[tokens] * F32(c.input_embedding_scale)  # [B', H]
        cos, sin = self.rope.rows(s, s + b)
        ops = self.ops
        side = ops.conv_side
        inter = c.intermediate_size
        for i, layer in enumerate(self.layers):
            x = ops.rms_norm(h, layer.input_layernorm, c.rms_norm_eps)
            dyn_a = None
            if layer.attention_conv is not None:
                x, dyn_a = layer.attention_conv.prepare(x, side)
            a = self._attention(i, layer, x, state, cos, sin)
            if dyn_a is not None:
                a = layer.attention_conv.finish(a, dyn_a, side)
            h = h + a
            x = ops.rms_norm(h, layer.post_attention_layernorm, c.rms_norm_eps)
            dyn_m = None
            if layer.mlp_conv is not None:
                x, dyn_m = layer.mlp_conv.prepare(x, side)
            gu = layer.gate_up_proj(x)  # [B', 2 * I]: gate then up
            m = layer.down_proj(ops.silu_mul(gu, inter))
            if dyn_m is not None:
                m = layer.mlp_conv.finish(m, dyn_m, side)
            h = h + m
        return ops.rms_norm(h, self.norm, c.rms_norm_eps)

    def compute_logits(self, hidden: np.ndarray) -> np.ndarray:
        """``lm_head(hidden) * output_multiplier``, then ``cap * tanh(z / cap)``. Shapes: [n, H] -> [n, V].

        In place on the lm_head's fresh output."""
        c = self.config
        return self.ops.softcap(self.lm_head(hidden), c.output_multiplier, c.final_logit_softcapping)

    def propose(
        self,
        state: DraftState,
        anchor_token: int,
        n_draft: int,
        *,
        temperature: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> Proposal:
        """Draft ``n_draft`` tokens after ``anchor_token`` (the last committed token, at position state.length).

        The block is ``[anchor, MASK x n_draft]`` (REF-NEW shrinks it the same way near the end).
        v1: argmax per row (T = 0) or one sample per row from softmax(logits / T) with ``rng``;
        v2: the candidate-path selector walk. The state is not modified.
        """
        c = self.config
        if not 1 <= n_draft <= c.block_size - 1:
            raise StateError(
                f"n_draft={n_draft} is outside 1..{c.block_size - 1} (block_size {c.block_size} minus the anchor); "
                f"ask for fewer drafts"
            )
        if temperature < 0:
            raise ValueError(f"temperature {temperature} must be >= 0")
        block = np.full(n_draft + 1, c.mask_token_id, dtype=np.int64)
        block[0] = int(anchor_token)
        hidden = self.forward_block(state, block)
        logits = self.compute_logits(hidden[1:])
        if self.selector is not None:
            tokens, q = self.selector.select(hidden[1:], logits, int(anchor_token), temperature, rng, self.ops)
        elif temperature > 0:
            q = softmax(logits / F32(temperature))
            tokens = np.array([sample_index(row, rng) for row in q], dtype=np.int64)
        else:
            tokens = np.argmax(logits, axis=-1).astype(np.int64)
            q = np.zeros_like(logits)
            q[np.arange(n_draft), tokens] = 1.0
        _check_picked(logits, q, tokens)
        return Proposal(tokens=tokens, q=q, hidden=hidden, logits=logits)

    # -- pieces -------------------------------------------------------------------------------
    def _attention(
        self, i: int, layer: DraftLayer, x: np.ndarray, state: DraftState, cos: np.ndarray, sin: np.ndarray
    ) -> np.ndarray:
        """Block rows attend to [context; block] keys. Shapes: x [B', H] -> o_proj output [B', H]."""
        c = self.config
        qkv = layer.qkv_proj(x)  # [B', (Hq + 2 Hk) * hd]: q, k, v
        out = self.ops.attention(  # [B', Hq * hd]
            qkv, c.num_attention_heads, c.num_key_value_heads, layer.q_norm, layer.k_norm, cos, sin, c.rms_norm_eps,
            state.caches[i].keys, state.caches[i].values, state.length, self._causal[i], self._windows[i],
            threads=backend_threads(layer.qkv_proj),
        )
        return layer.o_proj(out)


def _check_picked(logits: np.ndarray, q: np.ndarray, tokens: np.ndarray) -> None:
    """Refuse a proposal whose chosen tokens' logits or probabilities are NaN or inf: the verify would still keep
    the output right, but every draft would be noise and the run would say nothing. One value a row (a NaN, or
    a +inf that argmax picked, lands there; a sampled row's q turns NaN); scanning the whole [n, V] would cost
    the draft ~1% at 27B."""
    rows = np.arange(len(tokens))
    picked, chance = logits[rows, tokens], q[rows, tokens]
    bad = np.flatnonzero(~(np.isfinite(picked) & np.isfinite(chance)))
    if bad.size:
        r = int(bad[0])
        raise NumericalError(f"the draft's logits of block row {r + 1} hold {float(picked[r])!r} (probability {float(chance[r])!r}) at "
                             f"its chosen token {int(tokens[r])}: its forward overflowed - check the draft's config "
                             f"(output_multiplier, input_embedding_scale, final_logit_softcapping) and weights")
