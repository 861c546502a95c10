"""Seeded random hybrid targets: configs, weights, and HF-layout checkpoint folders (no network).

``tiny_config(moe=MoeConfig(...))`` gives a mixture-of-experts target: ``qwen3_5_moe_text`` when every
layer is sparse, else ``qwen3_next`` (its checkpoint is written in the grouped layout).

Norm weights, ``dt_bias`` and the gated-norm weight are randomised (HF's zero / one initialisations would
hide layout bugs: docs/model-math.md, "Testing on random weights").
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import TargetConfig
from .model import Target
from .moe_config import MoeConfig
from .weights import file_shapes

F32 = np.float32


def tiny_config(
    *, vocab_size: int = 96, hidden_size: int = 32, intermediate_size: int = 64, num_hidden_layers: int = 4,
    full_attention_interval: int = 4, num_attention_heads: int = 4, num_key_value_heads: int = 2,
    head_dim: int = 16, linear_num_key_heads: int = 2, linear_num_value_heads: int = 4,
    linear_key_head_dim: int = 8, linear_value_head_dim: int = 8, linear_conv_kernel_dim: int = 4,
    rope_theta: float = 10000.0, partial_rotary_factor: float = 0.25, tie_word_embeddings: bool = False,
    eos_token_ids: tuple[int, ...] = (), moe: MoeConfig | None = None,
) -> TargetConfig:
    layer_types = tuple(
        "full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention"
        for i in range(num_hidden_layers)
    )
    return TargetConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, layer_types=layer_types,
        num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads, head_dim=head_dim,
        linear_num_key_heads=linear_num_key_heads, linear_num_value_heads=linear_num_value_heads,
        linear_key_head_dim=linear_key_head_dim, linear_value_head_dim=linear_value_head_dim,
        linear_conv_kernel_dim=linear_conv_kernel_dim, rope_theta=rope_theta,
        partial_rotary_factor=partial_rotary_factor, tie_word_embeddings=tie_word_embeddings,
        eos_token_ids=eos_token_ids, moe=moe, model_type=_moe_type(moe, num_hidden_layers),
        layout="grouped" if _moe_type(moe, num_hidden_layers) == "qwen3_next" else "split",
    )


def _moe_type(moe: MoeConfig | None, layers: int) -> str:
    if moe is None:
        return "qwen3_5_text"
    return "qwen3_5_moe_text" if all(moe.is_sparse(i) for i in range(layers)) else "qwen3_next"


def random_weights(cfg: TargetConfig, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Engine-form (split layout) float32 weights, seeded. ``scale`` sharpens the logits."""
    rng = np.random.default_rng(seed)
    split = TargetConfig(**{**cfg.__dict__, "layout": "split", "model_type": "qwen3_5_text"})
    w = {}
    for name, shape in file_shapes(split).items():
        if name.endswith(("layernorm.weight", "model.norm.weight", "q_norm.weight", "k_norm.weight")):
            a = 0.1 * rng.standard_normal(shape)
        elif name.endswith("linear_attn.norm.weight"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("dt_bias"):
            a = rng.standard_normal(shape)
        elif name.endswith("A_log"):
            a = np.log(rng.uniform(0.01, 16.0, shape))
        elif name.endswith("conv1d.weight"):
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        elif name == "model.embed_tokens.weight":
            a = rng.standard_normal(shape)
        else:
            a = scale * rng.standard_normal(shape) / np.sqrt(shape[-1])
        w[name] = a.astype(F32)
    if cfg.tie_word_embeddings:
        w.pop("lm_head.weight", None)
    return w


def random_target(cfg: TargetConfig | None = None, seed: int = 0, *, backend="reference", row_set: int = 8, scale: float = 1.0,
                  ops: str = "auto") -> Target:
    cfg = cfg or tiny_config()
    return Target(cfg, random_weights(cfg, seed, scale), backend=backend, row_set=row_set, ops=ops)


def _model_type(cfg: TargetConfig) -> str:
    """The config's own model type when it names one of these (a Qwen3-Next whose every layer is sparse
    stays ``qwen3_next``), else the one its MoE layers imply."""
    return cfg.model_type if cfg.model_type in _ARCHS else _moe_type(cfg.moe, cfg.num_hidden_layers)


_ARCHS = {"qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
          "qwen3_next": "Qwen3NextForCausalLM"}


def hf_config_dict(cfg: TargetConfig) -> dict:
    """A ``qwen3_5_text`` config.json for ``cfg`` (``qwen3_5_moe_text`` / ``qwen3_next`` for a MoE one)."""
    mt = _model_type(cfg)
    moe = cfg.moe.to_dict() if cfg.moe is not None else {}
    return {**moe,
        "architectures": [_ARCHS[mt]], "model_type": mt,
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "layer_types": list(cfg.layer_types),
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "linear_num_key_heads": cfg.linear_num_key_heads,
        "linear_num_value_heads": cfg.linear_num_value_heads, "linear_key_head_dim": cfg.linear_key_head_dim,
        "linear_value_head_dim": cfg.linear_value_head_dim, "linear_conv_kernel_dim": cfg.linear_conv_kernel_dim,
        "rms_norm_eps": cfg.rms_norm_eps, "hidden_act": "silu", "attention_bias": False,
        "tie_word_embeddings": cfg.tie_word_embeddings, "max_position_embeddings": cfg.max_position_embeddings,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta,
                            "partial_rotary_factor": cfg.partial_rotary_factor},
        "eos_token_id": list(cfg.eos_token_ids) or None, "dtype": "float32",
    }


def write_checkpoint(folder: "str | Path", cfg: TargetConfig, weights: dict[str, np.ndarray], *, shards: int = 1) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (or ``shards`` files plus the index)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_config_dict(cfg), indent=2))
    if _model_type(cfg) == "qwen3_next":  # Qwen3-Next's grouped delta-net projections
        weights = _grouped(weights, cfg)
    names = sorted(weights)
    if shards <= 1:
        save_file({n: weights[n] for n in names}, str(folder / "model.safetensors"))
        return folder
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: weights[n] for n in part}, str(folder / fname))
        weight_map.update({n: fname for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def _grouped(weights: dict[str, np.ndarray], cfg: TargetConfig) -> dict[str, np.ndarray]:
    """Engine (split) delta-net projections in Qwen3-Next's grouped layout (target_weights._regroup's inverse)."""
    HK, dk, dv = cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    r = cfg.linear_num_value_heads // HK
    w = dict(weights)
    for i, kind in enumerate(cfg.layer_types):
        if kind != "linear_attention":
            continue
        a = f"model.layers.{i}.linear_attn."
        qkv, z = w.pop(a + "in_proj_qkv.weight"), w.pop(a + "in_proj_z.weight")
        q, k, v = qkv[: HK * dk], qkv[HK * dk : 2 * HK * dk], qkv[2 * HK * dk :]
        b, al = w.pop(a + "in_proj_b.weight"), w.pop(a + "in_proj_a.weight")
        g = range(HK)
        w[a + "in_proj_qkvz.weight"] = np.concatenate([np.concatenate(
            [q[j * dk : (j + 1) * dk], k[j * dk : (j + 1) * dk], v[j * r * dv : (j + 1) * r * dv], z[j * r * dv : (j + 1) * r * dv]])
            for j in g])
        w[a + "in_proj_ba.weight"] = np.concatenate([np.concatenate([b[j * r : (j + 1) * r], al[j * r : (j + 1) * r]]) for j in g])
    return w
