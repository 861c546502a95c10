"""The mixture-of-experts part of a target config (``qwen3_next``, ``qwen3_5_moe``): a frozen dataclass.

Which layers are sparse follows transformers: ``qwen3_next`` has a sparse MLP in layer ``i`` when
``i`` is not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``; ``qwen3_5_moe`` has one
in every layer and always renormalises the top-k weights (its router has no ``norm_topk_prob``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ConfigError

#: model types whose every layer is sparse and whose router always renormalises the top-k weights
ALL_SPARSE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")


@dataclass(frozen=True)
class MoeConfig:
    """``shared_expert_intermediate_size`` 0 means no shared expert (HF then builds a zero-width MLP
    whose output is 0)."""

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        problems = _problems(asdict(self))
        if problems:
            raise ConfigError("MoE config is invalid: " + "; ".join(problems))

    def is_sparse(self, layer: int) -> bool:
        return layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mlp_only_layers"] = list(self.mlp_only_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MoeConfig":
        return cls(**{**d, "mlp_only_layers": tuple(d.get("mlp_only_layers", ()))})

    @classmethod
    def from_hf(cls, text: dict[str, Any], model_type: str, source: str = "config.json") -> "MoeConfig | None":
        """The MoE fields of a HF text config; None for a ``qwen3_next`` config without experts
        (``num_experts`` 0 or absent). Every problem is reported at once, in one line, naming ``source``."""
        all_sparse = model_type in ALL_SPARSE_TYPES
        if not all_sparse and not text.get("num_experts"):
            return None
        raw = {
            "num_experts": text.get("num_experts"),
            "num_experts_per_tok": text.get("num_experts_per_tok"),
            "moe_intermediate_size": text.get("moe_intermediate_size"),
            "shared_expert_intermediate_size": text.get("shared_expert_intermediate_size", 0),
            "norm_topk_prob": True if all_sparse else text.get("norm_topk_prob", True),
            "decoder_sparse_step": 1 if all_sparse else text.get("decoder_sparse_step", 1),
            "mlp_only_layers": [] if all_sparse else (text.get("mlp_only_layers") or []),
        }
        problems = _problems(raw)
        n = text.get("num_hidden_layers")
        if isinstance(n, int) and isinstance(raw["mlp_only_layers"], list):
            out = [i for i in raw["mlp_only_layers"] if isinstance(i, int) and not 0 <= i < n]
            if out:
                problems.append(f"mlp_only_layers {out} are outside the {n} layers [0, {n})")
        if problems:
            raise ConfigError(
                f"{source}: {model_type} MoE config is invalid: " + "; ".join(problems)
                + f"; fix {source} (the values transformers' config class documents)"
            )
        return cls.from_dict(raw)


MAX_EXPERTS = 16384  # released models have 512 at most (Qwen3-Next); the checks list every expert's tensors


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _problems(d: dict[str, Any]) -> list[str]:
    """Every type and range problem of the MoE fields (empty when they are fine)."""
    out = []
    for key, low in (("num_experts", 1), ("num_experts_per_tok", 1), ("moe_intermediate_size", 1),
                     ("shared_expert_intermediate_size", 0), ("decoder_sparse_step", 1)):
        v = d.get(key)
        if not _is_int(v):
            out.append(f"{key} must be an integer, got {v!r}")
        elif v < low:
            out.append(f"{key} must be >= {low}, got {v}")
    e, k = d.get("num_experts"), d.get("num_experts_per_tok")
    if _is_int(e) and e > MAX_EXPERTS:
        out.append(f"num_experts is {e}, must be <= {MAX_EXPERTS} (a count past it is a corrupt config: its expert names "
                   f"alone would not fit in memory)")
    if _is_int(e) and _is_int(k) and e >= 1 and k > e:
        out.append(f"num_experts_per_tok ({k}) must be <= num_experts ({e})")
    if not isinstance(d.get("norm_topk_prob"), bool):
        out.append(f"norm_topk_prob must be true or false, got {d.get('norm_topk_prob')!r}")
    layers = d.get("mlp_only_layers")
    if not isinstance(layers, (list, tuple)) or not all(_is_int(i) for i in layers):
        out.append(f"mlp_only_layers must be a list of layer indices, got {layers!r}")
    return out
