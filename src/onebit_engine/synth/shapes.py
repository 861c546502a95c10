"""The published shapes of the hybrid family and of their DFlash 2 drafts, as a table.

Each :class:`Shape` holds a target's config.json values (the text model: Qwen3.5 / Qwen3.6 checkpoints
are vision-language wrappers whose ``text_config`` this is) and a draft recipe. Sources:

* Qwen3.5-0.8B, Qwen3.5-9B, Qwen3.6-27B: the models' config.json (``text_config``); 9B is transformers'
  ``Qwen3_5TextConfig`` defaults.
* Qwen3.5-35B-A3B and Qwen3-Next-80B-A3B: their config.json values as Megatron training recipes restate
  them (THUDM/slime ``scripts/models/qwen3.5-35B-A3B.sh``, ``qwen3-next-80B-A3B.sh``): hidden 2048, 40 / 48
  layers, 16 query / 2 KV heads of 256, 256 / 512 experts of 512 with a shared expert of 512, top-8 / 10.
* The one published DFlash 2 draft for this family, Qwen3.8-27B-DFlash2 (z-lab), pairs with the 27B:
  5 layers, hidden 5120, 32 / 8 heads of 128, intermediate 17408, taps [5, 19, 33, 47, 61] of 64, block 8,
  mask id 248070, every layer sliding (window 2048) and non-causal, grouped dynamic conv (kernel 2, group
  16), candidate selector (rank 256, top 16); its model card reports tau = 5.46 at block 8. No draft is
  published for the other sizes, so their drafts *scale that recipe*: 5 layers of the target's hidden
  size, 128-wide heads (32 / 8 from hidden 2048 up, hidden / 64 and a quarter of that below), the target's
  intermediate size (3 x hidden for a target with no dense MLP), taps spread like the 27B's, block 8.

``Shape.shrunk()`` keeps a shape's structure (layer types, head counts and ratios, top-k and the shared
expert) at tiny widths, so CI runs every shape's layer structure in seconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..draft.config import DraftConfig
from ..draft.loader import expected_shapes
from ..hybrid.config import TargetConfig
from ..hybrid.moe_config import MoeConfig
from ..hybrid.weights import file_shapes

QWEN35_VOCAB, QWEN3_VOCAB = 248320, 151936


def _layer_types(n: int, interval: int = 4) -> tuple[str, ...]:
    return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n))


@dataclass(frozen=True)
class DraftRecipe:
    """A DFlash 2 draft's shape (the config.json fields that size it)."""

    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    target_layer_ids: tuple[int, ...]
    block_size: int
    mask_token_id: int
    sliding_window: int = 2048
    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_rank: int = 256
    selector_top_k: int = 16
    rope_theta: float = 1e7


@dataclass(frozen=True)
class Shape:
    name: str
    target: TargetConfig
    draft: DraftRecipe
    source: str
    draft_source: str
    published_tau: "float | None" = None  # mean tokens per round its draft's model card reports
    shrunk_from: "str | None" = field(default=None)

    def draft_config_json(self) -> dict:
        """The draft's config.json (HF ``qwen3`` with ``dflash_config``), as the z-lab checkpoints write it."""
        d, t = self.draft, self.target
        return {
            "architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "attention_bias": False, "hidden_act": "silu",
            "hidden_size": t.hidden_size, "intermediate_size": d.intermediate_size,
            "num_hidden_layers": d.num_hidden_layers, "num_attention_heads": d.num_attention_heads,
            "num_key_value_heads": d.num_key_value_heads, "head_dim": d.head_dim, "vocab_size": t.vocab_size,
            "num_target_layers": t.num_hidden_layers, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_theta": d.rope_theta, "rope_type": "default"},
            "max_position_embeddings": t.max_position_embeddings,
            "layer_types": ["sliding_attention"] * d.num_hidden_layers, "use_sliding_window": True,
            "sliding_window": d.sliding_window, "is_causal": False, "tie_word_embeddings": False, "dtype": "bfloat16",
            "dflash_config": {
                "target_layer_ids": list(d.target_layer_ids), "mask_token_id": d.mask_token_id, "block_size": d.block_size,
                "conv_kernel_size": d.conv_kernel_size, "conv_group_size": d.conv_group_size,
                "selector_rank": d.selector_rank, "selector_top_k": d.selector_top_k,
            },
        }

    def draft_config(self) -> DraftConfig:
        return DraftConfig.from_hf(self.draft_config_json(), source=f"shape {self.name}")

    def target_tensors(self) -> dict[str, tuple[int, ...]]:
        return file_shapes(self.target)

    def draft_tensors(self) -> dict[str, tuple[int, ...]]:
        return expected_shapes(self.draft_config(), self.target.vocab_size)

    @property
    def target_params(self) -> int:
        return sum(math.prod(s) for s in self.target_tensors().values())

    @property
    def draft_params(self) -> int:
        return sum(math.prod(s) for s in self.draft_tensors().values())

    def active_params(self) -> int:
        """Parameters one token reads (all of them for a dense target; the routed experts only for MoE)."""
        m = self.target.moe
        if m is None:
            return self.target_params
        sparse = sum(self.target.is_sparse(i) for i in range(self.target.num_hidden_layers))
        idle = sparse * (m.num_experts - m.num_experts_per_tok) * 3 * m.moe_intermediate_size * self.target.hidden_size
        return self.target_params - idle

    def shrunk(self) -> "Shape":
        """The same structure at tiny widths: layer types, head counts, GQA and delta-net head ratios,
        top-k and the shared expert kept; vocab 512, hidden 64, heads 16 wide, 16 experts at least 2 x top-k."""
        t, d = self.target, self.draft
        moe = None
        if t.moe is not None:
            moe = replace(t.moe, num_experts=max(16, 2 * t.moe.num_experts_per_tok), moe_intermediate_size=8,
                          shared_expert_intermediate_size=8 if t.moe.shared_expert_intermediate_size else 0)
        tt = replace(t, vocab_size=512, hidden_size=64, intermediate_size=96, head_dim=16, linear_key_head_dim=16,
                     linear_value_head_dim=16, max_position_embeddings=4096, moe=moe)
        dd = replace(d, num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=96, mask_token_id=500,
                     selector_rank=8, selector_top_k=4, sliding_window=16)
        return replace(self, name=f"{self.name}-shrunk", target=tt, draft=dd, shrunk_from=self.name)


def _spread_taps(n_layers: int, count: int = 5) -> tuple[int, ...]:
    """Tap layers spread as the 27B draft's are: from about n/13 to n - 3 ([5, 19, 33, 47, 61] of 64)."""
    lo, hi = round(n_layers * 5 / 64), n_layers - 3
    return tuple(round(lo + i * (hi - lo) / (count - 1)) for i in range(count))


def _scaled_draft(t: TargetConfig, mask: int) -> DraftRecipe:
    heads = 32 if t.hidden_size >= 2048 else t.hidden_size // 64
    inter = t.intermediate_size if t.moe is None else 3 * t.hidden_size
    return DraftRecipe(5, heads, max(1, heads // 4), 128, inter, _spread_taps(t.num_hidden_layers), 8, mask)


def _dense(name: str, *, vocab: int, hidden: int, layers: int, heads: int, kv: int, inter: int, hk: int, hv: int,
           tie: bool) -> TargetConfig:
    return TargetConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        layer_types=_layer_types(layers), num_attention_heads=heads, num_key_value_heads=kv, head_dim=256,
        linear_num_key_heads=hk, linear_num_value_heads=hv, linear_key_head_dim=128, linear_value_head_dim=128,
        rope_theta=1e7, tie_word_embeddings=tie, max_position_embeddings=262144,
    )


def _table() -> dict[str, Shape]:
    hf = "the model's config.json (text_config)"
    scaled = "no published DFlash 2 draft: the Qwen3.8-27B-DFlash2 recipe scaled to this target"
    t08 = _dense("qwen3.5-0.8b", vocab=QWEN35_VOCAB, hidden=1024, layers=24, heads=8, kv=2, inter=3584, hk=16, hv=16, tie=True)
    t9 = _dense("qwen3.5-9b", vocab=QWEN35_VOCAB, hidden=4096, layers=32, heads=16, kv=4, inter=12288, hk=16, hv=32, tie=False)
    t27 = _dense("qwen3.6-27b", vocab=QWEN35_VOCAB, hidden=5120, layers=64, heads=24, kv=4, inter=17408, hk=16, hv=48, tie=False)
    moe35 = MoeConfig(num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512)
    t35 = replace(_dense("qwen3.5-35b-a3b", vocab=QWEN35_VOCAB, hidden=2048, layers=40, heads=16, kv=2, inter=512, hk=16,
                         hv=32, tie=False), moe=moe35, model_type="qwen3_5_moe_text")
    moe80 = MoeConfig(num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512, shared_expert_intermediate_size=512)
    t80 = replace(_dense("qwen3-next-80b-a3b", vocab=QWEN3_VOCAB, hidden=2048, layers=48, heads=16, kv=2, inter=5120, hk=16,
                         hv=32, tie=False), moe=moe80, model_type="qwen3_next", layout="grouped")
    d27 = DraftRecipe(5, 32, 8, 128, 17408, (5, 19, 33, 47, 61), 8, 248070)
    shapes = [
        Shape("qwen3.5-0.8b", t08, _scaled_draft(t08, 248070), hf, scaled),
        Shape("qwen3.5-9b", t9, _scaled_draft(t9, 248070), hf + "; transformers' Qwen3_5TextConfig defaults", scaled),
        Shape("qwen3.6-27b", t27, d27, hf, "Qwen3.8-27B-DFlash2 (z-lab): published", published_tau=5.46),
        Shape("qwen3.5-35b-a3b", t35, _scaled_draft(t35, 248070), "config.json values (THUDM/slime qwen3.5-35B-A3B.sh)", scaled),
        Shape("qwen3-next-80b-a3b", t80, _scaled_draft(t80, 151669), "config.json values (THUDM/slime qwen3-next-80B-A3B.sh)", scaled),
    ]
    return {s.name: s for s in shapes}


SHAPES: dict[str, Shape] = _table()


def get_shape(name: str) -> Shape:
    """A shape by name; ``NAME-shrunk`` gives its tiny copy."""
    base = name[: -len("-shrunk")] if name.endswith("-shrunk") else name
    if base not in SHAPES:
        from ..errors import ConfigError

        raise ConfigError(f"shape {name!r} is not known; choose one of {sorted(SHAPES)} (add -shrunk for the tiny copy)")
    return SHAPES[base].shrunk() if base != name else SHAPES[base]
