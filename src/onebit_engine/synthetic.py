"""Seeded random hybrid targets: configs, weights, and HF-layout checkpoint folders (no network).

Norm weights, ``dt_bias`` and the gated-norm weight are randomised (HF's zero / one initialisations would
hide layout bugs, hybrid-target.md 5.2).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import TargetConfig
from .target import Target
from .target_weights import file_shapes

F32 = np.float32


def tiny_config(
    *, vocab_size: int = 96, hidden_size: int = 32, intermediate_size: int = 64, num_hidden_layers: int = 4,
    full_attention_interval: int = 4, num_attention_heads: int = 4, num_key_value_heads: int = 2,
    head_dim: int = 16, linear_num_key_heads: int = 2, linear_num_value_heads: int = 4,
    linear_key_head_dim: int = 8, linear_value_head_dim: int = 8, linear_conv_kernel_dim: int = 4,
    rope_theta: float = 10000.0, partial_rotary_factor: float = 0.25, tie_word_embeddings: bool = False,
    eos_token_ids: tuple[int, ...] = (),
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
        eos_token_ids=eos_token_ids,
    )


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
                  recurrence: str = "auto") -> Target:
    cfg = cfg or tiny_config()
    return Target(cfg, random_weights(cfg, seed, scale), backend=backend, row_set=row_set, recurrence=recurrence)


def hf_config_dict(cfg: TargetConfig) -> dict:
    """A ``qwen3_5_text`` config.json for ``cfg``."""
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
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
