"""The hybrid target's configuration: a frozen dataclass built from a Hugging Face ``config.json``.

Supported ``model_type`` values: ``qwen3_5_text``, ``qwen3_5`` (the VL wrapper; its ``text_config`` is
read), ``qwen3_next`` (dense or mixture-of-experts MLPs) and the Qwen3.5 / 3.6 MoE family
``qwen3_5_moe_text`` / ``qwen3_5_moe`` (VL wrapper). The MoE fields live in ``moe_config.MoeConfig``.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Any

from .errors import ConfigError
from .moe_config import ALL_SPARSE_TYPES, MoeConfig

SUPPORTED_MODEL_TYPES = ("qwen3_5_text", "qwen3_5", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe")
VL_WRAPPERS = ("qwen3_5", "qwen3_5_moe")  # configs whose decoder is in ``text_config``
LAYER_TYPES = ("linear_attention", "full_attention")


@dataclass(frozen=True)
class TargetConfig:
    """Shapes and constants of the hybrid decoder (names follow HF ``Qwen3_5TextConfig``).

    ``layout`` is how the Gated DeltaNet input projections are stored: ``"split"`` (Qwen3.5/3.6:
    ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``) or ``"grouped"`` (Qwen3-Next:
    ``in_proj_qkvz``, ``in_proj_ba`` grouped by key head).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    tie_word_embeddings: bool = False
    model_type: str = "qwen3_5_text"
    layout: str = "split"
    eos_token_ids: tuple[int, ...] = ()
    max_position_embeddings: int = 32768
    moe: MoeConfig | None = None  # None: every MLP is dense

    def __post_init__(self) -> None:
        if isinstance(self.moe, dict):  # TargetConfig(**cfg.to_dict()) round-trips
            object.__setattr__(self, "moe", MoeConfig.from_dict(self.moe))
        if len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(
                f"layer_types has {len(self.layer_types)} entries but num_hidden_layers is "
                f"{self.num_hidden_layers}; give one type per layer"
            )
        bad = sorted({t for t in self.layer_types if t not in LAYER_TYPES})
        if bad:
            raise ConfigError(f"unknown layer type(s) {bad}; expected one of {LAYER_TYPES}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ConfigError(
                f"linear_num_value_heads ({self.linear_num_value_heads}) must be divisible by "
                f"linear_num_key_heads ({self.linear_num_key_heads})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.rot_dim % 2 or self.rot_dim > self.head_dim:
            raise ConfigError(
                f"rotary dims int(head_dim * partial_rotary_factor) = {self.rot_dim} must be even "
                f"and <= head_dim ({self.head_dim})"
            )
        if self.layout not in ("split", "grouped"):
            raise ConfigError(f"layout {self.layout!r} is not 'split' or 'grouped'")
        if self.linear_conv_kernel_dim < 1:
            raise ConfigError(f"linear_conv_kernel_dim must be >= 1, got {self.linear_conv_kernel_dim}")

    # Derived sizes (hybrid-target.md section 2 notation).
    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    @property
    def rot_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def is_sparse(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` has a mixture-of-experts MLP."""
        return self.moe is not None and self.moe.is_sparse(layer)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layer_types"] = list(self.layer_types)
        d["eos_token_ids"] = list(self.eos_token_ids)
        d["moe"] = self.moe.to_dict() if self.moe is not None else None
        return d

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> "TargetConfig":
        """Build from a parsed HF ``config.json`` (any supported ``model_type``)."""
        mt = raw.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"model_type {mt!r} is not supported; this engine reads {list(SUPPORTED_MODEL_TYPES)} "
                f"(Qwen3.6 checkpoints declare 'qwen3_5')"
            )
        text = raw
        if mt in VL_WRAPPERS:
            text = raw.get("text_config")
            if not isinstance(text, dict):
                raise ConfigError(f"model_type {mt!r} needs a 'text_config' object; none was found")
        eos = _eos_ids(raw.get("eos_token_id", text.get("eos_token_id")))
        moe = MoeConfig.from_hf(text, mt) if mt in ("qwen3_next", *ALL_SPARSE_TYPES) else None
        if text.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"hidden_act {text.get('hidden_act')!r} is not supported; only 'silu' is")
        if text.get("attention_bias", False):
            raise ConfigError("attention_bias=true is not supported by this engine (no known checkpoint uses it)")
        n = _need(text, "num_hidden_layers")
        layer_types = text.get("layer_types")
        if layer_types is None:
            interval = int(text.get("full_attention_interval", 4))
            layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ConfigError(f"rope_type {rope_type!r} is not supported; only 'default' RoPE is")
        theta = rope.get("rope_theta", text.get("rope_theta", 10000.0))
        prf = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
        heads = _need(text, "num_attention_heads")
        hidden = _need(text, "hidden_size")
        return cls(
            vocab_size=_need(text, "vocab_size"),
            hidden_size=hidden,
            # an all-sparse model (qwen3_5_moe) has no dense MLP and its config no intermediate_size
            intermediate_size=int(text.get("intermediate_size", 0)) if mt in ALL_SPARSE_TYPES else _need(text, "intermediate_size"),
            num_hidden_layers=n,
            layer_types=tuple(layer_types),
            num_attention_heads=heads,
            num_key_value_heads=int(text.get("num_key_value_heads", heads)),
            head_dim=int(text.get("head_dim") or hidden // heads),
            linear_num_key_heads=_need(text, "linear_num_key_heads"),
            linear_num_value_heads=_need(text, "linear_num_value_heads"),
            linear_key_head_dim=_need(text, "linear_key_head_dim"),
            linear_value_head_dim=_need(text, "linear_value_head_dim"),
            linear_conv_kernel_dim=int(text.get("linear_conv_kernel_dim", 4)),
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            partial_rotary_factor=float(prf),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            model_type=mt,
            layout="grouped" if mt == "qwen3_next" else "split",
            eos_token_ids=eos,
            max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
            moe=moe,
        )


def _need(d: dict[str, Any], key: str) -> int:
    if key not in d:
        raise ConfigError(f"config.json has no {key!r}; a hybrid target config must give it")
    return int(d[key])


def _eos_ids(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)

