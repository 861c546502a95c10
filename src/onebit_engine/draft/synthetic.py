"""Write a seeded random tiny draft folder in the z-lab layout (for tests; never a trained model).

``write_synthetic_draft(folder, target_config, version=1|2, ...)`` writes ``config.json`` (HF
``model_type: qwen3`` with ``dflash_config``) and ``model.safetensors`` (float32, the tensor names of
docs/draft.md's table, codebooks without ``.weight``) sized for the given target (vocab, hidden size, layers).
The same folder loads in this engine and in the ``dflash`` reference (``DFlash2DraftModel.from_pretrained``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from .config import DraftConfig, build_target_layer_ids
from .loader import expected_shapes


def write_synthetic_draft(
    folder: str | Path,
    target_config: Any,
    *,
    version: int = 1,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 8,
    intermediate_size: int | None = None,
    target_layer_ids: list[int] | None = None,
    block_size: int = 6,
    mask_token_id: int | None = None,
    layer_types: list[str] | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    conv_kernel_size: int = 2,
    conv_group_size: int = 4,
    selector_rank: int = 8,
    selector_top_k: int = 4,
    output_multiplier: float | None = None,
    final_logit_softcapping: float | None = None,
    input_embedding_scale: float | None = None,
    rope_theta: float = 10000.0,
    rms_norm_eps: float = 1e-6,
    seed: int = 0,
) -> Path:
    """Write the folder and return its path. ``sliding_window`` set -> ``use_sliding_window: true``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    h, vocab, n_target = target_config.hidden_size, target_config.vocab_size, target_config.num_hidden_layers
    dflash: dict[str, Any] = {
        "target_layer_ids": list(target_layer_ids or build_target_layer_ids(n_target, min(num_layers, n_target))),
        "mask_token_id": int(vocab - 1 if mask_token_id is None else mask_token_id),
        "block_size": block_size,
    }
    if version == 2:
        dflash.update(conv_kernel_size=conv_kernel_size, conv_group_size=conv_group_size,
                      selector_rank=selector_rank, selector_top_k=selector_top_k)
    for key, val in (("output_multiplier", output_multiplier), ("final_logit_softcapping", final_logit_softcapping),
                     ("input_embedding_scale", input_embedding_scale)):
        if val is not None:
            dflash[key] = val
    raw: dict[str, Any] = {
        "architectures": ["DFlash2DraftModel" if version == 2 else "DFlashDraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": intermediate_size or 2 * h,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "num_target_layers": n_target,
        "rms_norm_eps": rms_norm_eps,
        "rope_parameters": {"rope_theta": rope_theta, "rope_type": "default"},
        "max_position_embeddings": 4096,
        "layer_types": list(layer_types or ["full_attention"] * num_layers),
        "use_sliding_window": sliding_window is not None,
        "sliding_window": sliding_window,
        "tie_word_embeddings": False,
        "dtype": "float32",
        "dflash_config": dflash,
    }
    if is_causal is not None:
        raw["is_causal"] = is_causal
    config = DraftConfig.from_hf(raw)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    save_file(random_draft_tensors(config, vocab, seed), str(folder / "model.safetensors"))
    return folder


def random_draft_tensors(config: DraftConfig, vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded float32 tensors for every name of ``expected_shapes``; scales keep activations O(1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_shapes(config, vocab).items():
        if len(shape) == 1:  # RMSNorm weights
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("base_kernel"):  # [2, K, H]: tap 0 near identity, older taps small
            arr = 0.3 * rng.standard_normal(shape)
            arr[:, 0] += 1.0
        elif name.endswith("kernel_projection.weight"):
            arr = 0.2 * rng.standard_normal(shape) / np.sqrt(shape[1])
        elif "codebook" in name:
            arr = 0.5 * rng.standard_normal(shape)
        else:  # Linear [N, K]
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = np.ascontiguousarray(arr, dtype=np.float32)
    return out
