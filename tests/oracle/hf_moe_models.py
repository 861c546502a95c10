"""Tiny random HF transformers mixture-of-experts models (``qwen3_next``, ``qwen3_5_moe``), saved with
save_pretrained in either expert layout, optionally sharded or re-keyed into the VL layout."""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from .hf_models import BASE, _randomise, _to_vl_layout, torch


@dataclass(frozen=True)
class MoeCase:
    model_type: str  # qwen3_next, qwen3_5_moe_text or qwen3_5_moe (the VL layout)
    experts: int = 4
    top_k: int = 2
    shared: int = 48  # shared_expert_intermediate_size; 0 = no shared expert
    norm_topk_prob: bool = True  # qwen3_5_moe always renormalises
    mlp_only_layers: tuple[int, ...] = ()  # qwen3_next only: dense layers among the sparse ones
    fused: bool = False  # save_original_format=False: experts as 3-D gate_up_proj / down_proj
    shard: bool = False
    tied: bool = False

    @property
    def id(self) -> str:
        return (f"{self.model_type}-e{self.experts}k{self.top_k}-shared{self.shared}-norm{int(self.norm_topk_prob)}"
                f"-dense{list(self.mlp_only_layers)}{'-fused' if self.fused else ''}{'-sharded' if self.shard else ''}"
                f"{'-tied' if self.tied else ''}")


def build_moe(case: MoeCase, folder: Path, *, seed: int = 0, layers: int = 4, geometry: dict | None = None):
    """Build, randomise, save; return the HF model (float32, eval). ``geometry`` overrides fields of
    BASE and the expert size (``moe_intermediate_size``), as in ``hf_models.build``."""
    import transformers as tf

    torch.manual_seed(seed)
    kw = dict(BASE, num_hidden_layers=layers, tie_word_embeddings=case.tied, num_experts=case.experts,
              num_experts_per_tok=case.top_k, moe_intermediate_size=32, shared_expert_intermediate_size=case.shared)
    kw.update(geometry or {})
    rope = {"rope_type": "default", "partial_rotary_factor": 0.25}
    with warnings.catch_warnings():
        # shared=0 (no shared expert) is a case under test: transformers still builds the shared expert's
        # Linear layers with 0 features, and torch warns that initialising them does nothing - which is right.
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op", category=UserWarning)
        if case.model_type == "qwen3_next":
            cfg = tf.Qwen3NextConfig(**kw, norm_topk_prob=case.norm_topk_prob, mlp_only_layers=list(case.mlp_only_layers),
                                     rope_parameters=dict(rope, rope_theta=1e4))
            model = tf.Qwen3NextForCausalLM(cfg)
        else:
            kw.pop("intermediate_size")
            half = int(kw["head_dim"] * 0.25) // 2
            section = [half - 2 * (half // 4), half // 4, half // 4]
            cfg = tf.Qwen3_5MoeTextConfig(**kw, rope_parameters=dict(rope, rope_theta=1e7, mrope_section=section,
                                                                      mrope_interleaved=True))
            model = tf.Qwen3_5MoeForCausalLM(cfg)
    model = model.float().eval()
    _randomise(model, seed)
    _randomise_moe(model, seed + 1)
    model.save_pretrained(folder, save_original_format=not case.fused, max_shard_size="200KB" if case.shard else "50GB")
    if case.model_type == "qwen3_5_moe":
        _to_vl(folder)
    return model


def _randomise_moe(model, seed: int) -> None:
    """HF inits the MLP weights with std 0.02: near-uniform routing (a 1e-7 difference could flip a top-k
    choice) and experts too small to matter. Give them unit-scale rows instead."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".mlp." in name and p.numel():
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 * (3.0 if name.endswith("mlp.gate.weight") else 1.0))


def _to_vl(folder: Path) -> None:
    """The VL layout of a (possibly sharded) text checkpoint: model.language_model.*, a qwen3_5_moe config."""
    if (folder / "model.safetensors").exists():
        _to_vl_layout(folder)
    else:
        from safetensors.numpy import load_file, save_file

        index = json.loads((folder / "model.safetensors.index.json").read_text())
        for fname in sorted(set(index["weight_map"].values())):
            t = load_file(str(folder / fname))
            save_file({k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k: v for k, v in t.items()},
                      str(folder / fname))
        index["weight_map"] = {k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k: f
                               for k, f in index["weight_map"].items()}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        text = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text,
                                                        "tie_word_embeddings": text.get("tie_word_embeddings", False)}))
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "qwen3_5_moe", ["Qwen3_5MoeForConditionalGeneration"]
    (folder / "config.json").write_text(json.dumps(cfg))
