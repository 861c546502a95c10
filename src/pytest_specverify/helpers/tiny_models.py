"""Seeded tiny random checkpoints for the native-engine adapters: an HF folder (written by the engine's
synthetic helpers - the one place this module leans on ``onebit_engine``) and its GGUF twin, so CI makes
its own models and never downloads one.

``tiny_hf_folder(folder, seed)``: a dense Qwen3.5 text checkpoint (``model_type qwen3_5_text``): 4 layers
(3 Gated DeltaNet : 1 gated attention), hidden 32, 2 key / 4 value delta-net heads (so the value-head
reordering of a conversion is exercised), vocabulary 256 (the byte prompts map one to one), float32.
``model_type="qwen3_next"``: the same with a mixture of experts in every layer (4 experts, top 2, a shared
expert: llama.cpp's ``qwen3next`` graph has no dense layer), as a ``qwen3_next`` folder in its grouped
projection layout. The engine names an all-sparse config ``qwen3_5_moe_text``, so the config is renamed and
the projections grouped here (with the engine's own regrouping).
``tiny_gguf(folder, seed)``: the same weights as ``model.gguf`` beside it (``helpers.gguf_writer``).
"""
from __future__ import annotations

from pathlib import Path

#: the tiny target's shape (the engine's ``tiny_config`` keywords)
TINY = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=4, full_attention_interval=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4)


#: the experts of the tiny ``qwen3_next`` (the engine's ``MoeConfig`` keywords)
TINY_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
MODEL_TYPES = ("qwen3_5", "qwen3_next")


def tiny_hf_folder(folder: "str | Path", seed: int = 0, *, model_type: str = "qwen3_5", **overrides) -> Path:
    """Write ``config.json`` + ``model.safetensors`` of a seeded tiny random target into ``folder``."""
    from dataclasses import replace

    from onebit_engine.hybrid.moe_config import MoeConfig
    from onebit_engine.hybrid.synthetic import _grouped, random_weights, tiny_config, write_checkpoint

    if model_type not in MODEL_TYPES:
        raise ValueError(f"tiny model type {model_type!r} is not one of {MODEL_TYPES}")
    if model_type == "qwen3_5":
        cfg = tiny_config(**{**TINY, **overrides})
        return write_checkpoint(folder, cfg, random_weights(cfg, seed=seed))
    cfg = tiny_config(**{**TINY, **overrides}, moe=MoeConfig(**TINY_MOE))
    weights = random_weights(cfg, seed=seed)
    cfg = replace(cfg, model_type="qwen3_next", layout="grouped")
    return write_checkpoint(folder, cfg, _grouped(weights, cfg))


def tiny_gguf(folder: "str | Path", seed: int = 0, *, model_type: str = "qwen3_5", **overrides) -> Path:
    """``tiny_hf_folder(folder, seed, model_type=...)`` and its float32 GGUF, ``folder/model.gguf`` (returned)."""
    from .gguf_writer import write_gguf

    folder = tiny_hf_folder(folder, seed, model_type=model_type, **overrides)
    return write_gguf(folder, Path(folder) / "model.gguf")
