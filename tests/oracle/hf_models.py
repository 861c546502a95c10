"""Tiny random HF transformers models of each supported model_type, saved with save_pretrained."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

torch = __import__("torch")

BASE = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4, full_attention_interval=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
    linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=1, eos_token_id=None,
)


def _randomise(model, seed: int) -> None:
    """HF zero / one inits hide layout bugs: perturb norms, gated norm and dt_bias (docs/model-math.md, "Testing
    on random weights")."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("embed_tokens.weight") or name.endswith("lm_head.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def build(model_type: str, folder: Path, *, seed: int = 0, tied: bool = False, layers: int = 4,
          geometry: dict | None = None, partial_rotary_factor: float = 0.25):
    """Build, randomise, save; return the HF model (float32, eval) for use as the oracle.
    ``geometry`` overrides fields of BASE (head counts and sizes, conv kernel, attention interval...)."""
    import transformers as tf

    torch.manual_seed(seed)
    kw = dict(BASE, **(geometry or {}), num_hidden_layers=layers, tie_word_embeddings=tied)
    rope = {"rope_type": "default", "partial_rotary_factor": partial_rotary_factor}
    if model_type == "qwen3_next":
        cfg = tf.Qwen3NextConfig(**kw, num_experts=0, rope_parameters=dict(rope, rope_theta=1e4))
        model = tf.Qwen3NextForCausalLM(cfg)
    else:
        half = int(kw["head_dim"] * partial_rotary_factor) // 2  # rotary pairs, split t/h/w as Qwen3.5 does
        section = [half - 2 * (half // 4), half // 4, half // 4]
        cfg = tf.Qwen3_5TextConfig(**kw, rope_parameters=dict(rope, rope_theta=1e7, mrope_section=section, mrope_interleaved=True))
        model = tf.Qwen3_5ForCausalLM(cfg)
    model = model.float().eval()
    _randomise(model, seed)
    model.save_pretrained(folder)
    if model_type == "qwen3_5":
        _to_vl_layout(folder)
    return model


def _to_vl_layout(folder: Path) -> None:
    """Re-key a saved text checkpoint into the Qwen3.5 VL layout, with vision and MTP tensors to ignore."""
    from safetensors.numpy import load_file, save_file

    t = load_file(str(folder / "model.safetensors"))
    out = {}
    for k, v in t.items():
        out[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    out["model.visual.patch_embed.proj.weight"] = np.zeros((8, 3, 2, 2), np.float32)
    out["mtp.fc.weight"] = np.zeros((64, 128), np.float32)
    (folder / "model.safetensors").unlink()
    save_file(out, str(folder / "model.safetensors"))
    text = json.loads((folder / "config.json").read_text())
    vl = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
          "text_config": text, "vision_config": {"depth": 1}, "tie_word_embeddings": text.get("tie_word_embeddings", False)}
    (folder / "config.json").write_text(json.dumps(vl))


def hf_logits(model, tokens) -> np.ndarray:
    """HF's own full forward (no cache) of a whole sequence: float32 [T, V]."""
    with torch.no_grad():
        out = model(torch.tensor([list(tokens)]), use_cache=False)
    return out.logits[0].float().numpy()
