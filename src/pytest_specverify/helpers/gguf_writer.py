"""A Hugging Face Qwen3.5 text / Qwen3-Next checkpoint folder -> a float32 GGUF file llama.cpp loads (arch
``qwen35`` / ``qwen3next``).

Built on the ``gguf`` package (``pip install gguf``: the writer and llama.cpp's tensor-name table); llama.cpp's
own converter is a script, not a package, so the conversion is stated here: the metadata below, the tensor
rules in ``gguf_tensors``. It is meant for the small seeded checkpoints tests make (``tiny_models.tiny_gguf``),
written in float32 so that the port is compared with its reference at float32 rounding. The M-RoPE sections of
``qwen35`` cover every rotary pair with the t / h / w position (``mrope_sections``); the tokenizer is ``none``
with ``vocab_size`` dummy tokens: the tests feed ids, not text. llama.cpp's ``qwen3next`` graph has a mixture
of experts with a shared expert in every layer, so only such Qwen3-Next folders convert.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import gguf_tensors

#: HF model types this writer converts, and the llama.cpp arch each becomes
ARCHS = {"qwen3_5_text": "qwen35", "qwen3_5": "qwen35", "qwen3_next": "qwen3next"}


class GGUFConversionError(ValueError):
    """The folder cannot be converted (its model type, a missing tensor, a layout llama.cpp cannot read)."""


def _hf_tensors(folder: Path) -> dict:
    from safetensors.numpy import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise GGUFConversionError(f"{folder}: no *.safetensors file; write the checkpoint first (config.json + weights)")
    out = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def _text_config(folder: Path) -> dict:
    cfg = json.loads((folder / "config.json").read_text())
    return {**cfg, **cfg.get("text_config", {})} if "text_config" in cfg else cfg


def mrope_sections(rope_dim: int) -> list[int]:
    """llama.cpp's 4 interleaved M-RoPE sections for text: rotary pair ``j`` reads the t / h / w position when
    ``j % 3`` is 0 / 1 / 2 and ``j < 3 * section``, else the 4th position, which a text token leaves at 0 (no
    rotation). Text tokens have t = h = w, so HF rotates every pair by the token's position whatever its
    ``mrope_section``; the split here puts every pair in t, h or w to match (``[11, 11, 10]`` for 64 rotary dims,
    Qwen3.5's own; ``[1, 1, 0]`` for 4, where ``[2, 0, 0]`` would leave pair 1 unrotated)."""
    half = rope_dim // 2
    t, h = -(-half // 3), -(-(half - 1) // 3) if half > 1 else 0
    return [t, h, half - t - h, 0]


def write_gguf(folder: "str | Path", out: "str | Path") -> Path:
    """Convert the HF checkpoint ``folder`` (config.json + safetensors) to the float32 GGUF file ``out``."""
    import gguf
    import numpy as np

    folder, out = Path(folder), Path(out)
    cfg = _text_config(folder)
    model_type = cfg.get("model_type")
    if model_type not in ARCHS:
        raise GGUFConversionError(f"{folder}: model_type {model_type!r} is not one of {sorted(ARCHS)}; this writer "
                                  f"converts dense Qwen3.5 text and Qwen3-Next checkpoints")
    arch = ARCHS[model_type]
    if arch == "qwen3next" and (not cfg.get("num_experts") or cfg.get("mlp_only_layers")
                                or cfg.get("decoder_sparse_step", 1) != 1 or not cfg.get("shared_expert_intermediate_size")):
        raise GGUFConversionError(f"{folder}: llama.cpp's qwen3next graph needs a mixture of experts with a shared expert "
                                  f"in every layer (num_experts > 0, decoder_sparse_step 1, no mlp_only_layers, "
                                  f"shared_expert_intermediate_size > 0)")
    n_layer = int(cfg["num_hidden_layers"])
    interval = int(cfg.get("full_attention_interval", 4))
    types = cfg.get("layer_types") or ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                                       for i in range(n_layer)]
    if cfg["linear_key_head_dim"] != cfg["linear_value_head_dim"]:
        raise GGUFConversionError(f"{folder}: linear_key_head_dim {cfg['linear_key_head_dim']} != linear_value_head_dim "
                                  f"{cfg['linear_value_head_dim']}; llama.cpp's {arch} graph uses one head size for both")
    rope = cfg.get("rope_parameters") or {}
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    rope_dim = int(head_dim * rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25)))

    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(n_layer)
    w.add_context_length(int(cfg.get("max_position_embeddings", 4096)))
    w.add_embedding_length(int(cfg["hidden_size"]))
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_head_count_kv(int(cfg["num_key_value_heads"]))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 1e4))))
    w.add_rope_dimension_count(rope_dim)
    if arch == "qwen35":
        w.add_rope_dimension_sections(mrope_sections(rope_dim))
    else:
        w.add_expert_count(int(cfg["num_experts"]))
        w.add_expert_used_count(int(cfg["num_experts_per_tok"]))
        w.add_expert_feed_forward_length(int(cfg["moe_intermediate_size"]))
        w.add_expert_shared_feed_forward_length(int(cfg["shared_expert_intermediate_size"]))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_ssm_conv_kernel(int(cfg["linear_conv_kernel_dim"]))
    w.add_ssm_state_size(int(cfg["linear_key_head_dim"]))
    w.add_ssm_group_count(int(cfg["linear_num_key_heads"]))
    w.add_ssm_time_step_rank(int(cfg["linear_num_value_heads"]))
    w.add_ssm_inner_size(int(cfg["linear_value_head_dim"]) * int(cfg["linear_num_value_heads"]))
    w.add_full_attention_interval(interval)
    # which layers are delta-net layers, said outright (the gguf package has no add_ method for this key yet)
    w.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in types])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")
    w.add_vocab_size(int(cfg["vocab_size"]))

    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()), n_layer)
    tensors = _hf_tensors(folder)
    if cfg.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    for name, a in gguf_tensors.convert_all(tensors, cfg, arch):
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise GGUFConversionError(f"{folder}: tensor {name!r} has no llama.cpp {arch} name; is it a {model_type} "
                                      f"text checkpoint (a multimodal or MTP tensor cannot be converted here)?")
        w.add_tensor(new, np.ascontiguousarray(a, np.float32))
    out.parent.mkdir(parents=True, exist_ok=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
