"""The hybrid target's configuration: a frozen dataclass built from a Hugging Face ``config.json``.

Supported ``model_type`` values: ``qwen3_5_text``, ``qwen3_5`` (the VL wrapper; its ``text_config`` is
read), ``qwen3_next`` (dense or mixture-of-experts MLPs) and the Qwen3.5 / 3.6 MoE family
``qwen3_5_moe_text`` / ``qwen3_5_moe`` (VL wrapper). The MoE fields live in ``moe_config.MoeConfig``.

Every value read is typed and ranged (:data:`TEXT_FIELDS`, ``config_check``): a bad config.json is
refused with one :class:`ConfigError` that lists every problem, never truncated or half-read.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..checkpoint.fields import (
    Field,
    Problems,
    divisible,
    known,
    layer_type_problems,
    read_field,
    read_int_list,
    read_name_list,
    read_object,
    show,
    top_object,
)
from ..errors import ConfigError
from .moe_config import ALL_SPARSE_TYPES, MoeConfig

SUPPORTED_MODEL_TYPES = ("qwen3_5_text", "qwen3_5", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe")
VL_WRAPPERS = ("qwen3_5", "qwen3_5_moe")  # configs whose decoder is in ``text_config``
LAYER_TYPES = ("linear_attention", "full_attention")
MAX_LAYERS = 1024  # no known model comes near; a larger count is a corrupt config, not a model to build

# TargetConfig field -> its config.json value, read from the text config (``text_config`` for qwen3_5).
# Defaults None are derived below (num_key_value_heads = heads, head_dim = hidden // heads).
TEXT_FIELDS: dict[str, Field] = {
    "vocab_size": Field("vocab_size", "int", min=1),
    "hidden_size": Field("hidden_size", "int", min=1),
    "intermediate_size": Field("intermediate_size", "int", min=1),
    "num_hidden_layers": Field("num_hidden_layers", "int", min=1, max=MAX_LAYERS),
    "num_attention_heads": Field("num_attention_heads", "int", min=1),
    "num_key_value_heads": Field("num_key_value_heads", "int", None, min=1, null_is_default=True),
    "head_dim": Field("head_dim", "int", None, min=1, null_is_default=True),
    "linear_num_key_heads": Field("linear_num_key_heads", "int", min=1),
    "linear_num_value_heads": Field("linear_num_value_heads", "int", min=1),
    "linear_key_head_dim": Field("linear_key_head_dim", "int", min=1),
    "linear_value_head_dim": Field("linear_value_head_dim", "int", min=1),
    "linear_conv_kernel_dim": Field("linear_conv_kernel_dim", "int", 4, min=1),
    "rms_norm_eps": Field("rms_norm_eps", "float", 1e-6, above=0),
    "max_position_embeddings": Field("max_position_embeddings", "int", 32768, min=1),
}
# Read from the RoPE object first, then the text config (older configs keep them at the top level).
ROPE_FIELDS: dict[str, Field] = {
    # a base below 1 makes the frequencies grow with the dimension (1e-300 overflows them): no model is built so
    "rope_theta": Field("rope_theta", "float", 10000.0, min=1),
    "partial_rotary_factor": Field("partial_rotary_factor", "float", 0.25, above=0, max=1),
}
# Read from the top level first, then the text config (the VL wrapper keeps them outside).
OUTER_FIELDS: dict[str, Field] = {
    "tie_word_embeddings": Field("tie_word_embeddings", "bool", False),
}
# Values this engine only accepts one way: read, typed, and refused when they ask for something else.
SUPPORT_FIELDS = (
    Field("hidden_act", "str", "silu", choices=("silu",)),
    Field("attention_bias", "bool", False, choices=(False,)),
)
# An all-sparse model (qwen3_5_moe) has no dense MLP and its config no intermediate_size.
SPARSE_FIELDS: dict[str, Field] = {"intermediate_size": Field("intermediate_size", "int", 0, min=0)}
WAY_OUT = "fix these values in config.json (or use the config.json that came with the weights); nothing was loaded"


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
        problems = consistency_problems(asdict(self))
        if self.layout not in ("split", "grouped"):
            problems.append(f"layout {self.layout!r} is not 'split' or 'grouped'")
        if problems:
            raise ConfigError("TargetConfig: " + "; ".join(problems))

    # Derived sizes (the notation of docs/model-math.md).
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
    def from_hf(cls, raw: Any, source: str = "config.json") -> "TargetConfig":
        """Build from a parsed HF ``config.json`` (any supported ``model_type``); ``source`` names the file
        in refusals. Every problem is collected, then refused at once."""
        raw = top_object(raw, source)
        mt = raw.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: model_type {mt!r} is not supported; this engine reads {list(SUPPORTED_MODEL_TYPES)} "
                f"(Qwen3.6 checkpoints declare 'qwen3_5')"
            )
        text, pre = raw, ""
        if mt in VL_WRAPPERS:
            text, pre = raw.get("text_config"), "text_config."
            if not isinstance(text, dict):
                raise ConfigError(f"{source}: model_type {mt!r} needs a 'text_config' object, got "
                                  f"{show(text)}; use the config.json that came with the weights")
        p = Problems(source)
        inner = [(pre, text)]
        outer = [("", raw), (pre, text)] if text is not raw else [("", raw)]  # the VL wrapper first
        for f in SUPPORT_FIELDS:
            read_field(p, f, inner)
        fields = {**TEXT_FIELDS, **SPARSE_FIELDS} if mt in ALL_SPARSE_TYPES else TEXT_FIELDS
        v: dict[str, Any] = {name: read_field(p, f, inner) for name, f in fields.items()}
        rope = _rope(p, text, pre)
        v.update({name: read_field(p, f, rope + inner) for name, f in ROPE_FIELDS.items()})
        v.update({name: read_field(p, f, outer) for name, f in OUTER_FIELDS.items()})
        if text.get("num_key_value_heads") is None:  # absent or null: HF's default (an invalid value stays refused)
            v["num_key_value_heads"] = v["num_attention_heads"]
        if text.get("head_dim") is None and v["hidden_size"] and v["num_attention_heads"]:
            v["head_dim"] = v["hidden_size"] // v["num_attention_heads"] or None
            if v["head_dim"] is None:
                p.add(f"{pre}head_dim is not given and hidden_size // num_attention_heads is 0; give head_dim")
        v["layer_types"] = _layer_types(p, text, pre, v["num_hidden_layers"])
        v["eos_token_ids"] = _eos_ids(p, *_outer_value("eos_token_id", outer))
        p.items.extend(consistency_problems(v))
        p.check(WAY_OUT)
        moe = MoeConfig.from_hf(text, mt, source) if mt in ("qwen3_next", *ALL_SPARSE_TYPES) else None
        return cls(**v, model_type=mt, layout="grouped" if mt == "qwen3_next" else "split", moe=moe)


def consistency_problems(v: dict[str, Any]) -> list[str]:
    """Rules between values (each checked only when its values were read cleanly: None = already refused)."""
    out = layer_type_problems(v, LAYER_TYPES)
    out += divisible(v, "linear_num_value_heads", "linear_num_key_heads")
    out += divisible(v, "num_attention_heads", "num_key_value_heads")
    if known(v, "head_dim", "partial_rotary_factor"):
        rot = int(v["head_dim"] * v["partial_rotary_factor"])
        if rot % 2 or rot > v["head_dim"]:
            out.append(f"rotary dims int(head_dim * partial_rotary_factor) = {rot} must be even "
                       f"and <= head_dim ({v['head_dim']})")
    if known(v, "linear_conv_kernel_dim") and v["linear_conv_kernel_dim"] < 1:
        out.append(f"linear_conv_kernel_dim must be >= 1, got {v['linear_conv_kernel_dim']}")
    if known(v, "eos_token_ids", "vocab_size"):
        bad = [i for i in v["eos_token_ids"] if not 0 <= i < v["vocab_size"]]
        if bad:
            out.append(f"eos_token_id {bad} is outside the vocabulary 0..{v['vocab_size'] - 1}")
    return out


def _outer_value(key: str, sources: list[tuple[str, dict]]) -> tuple[str, Any]:
    for prefix, obj in sources:
        if key in obj:
            return prefix + key, obj[key]
    return key, None


def _rope(p: Problems, text: dict, pre: str) -> list[tuple[str, dict]]:
    """The RoPE object as a lookup source: ``rope_parameters`` (HF v5) else ``rope_scaling``; only the
    default RoPE is supported."""
    found: list[tuple[str, dict]] = []
    for key in ("rope_parameters", "rope_scaling"):
        obj = read_object(p, pre + key, text.get(key))
        if obj and not found:
            found = [(f"{pre}{key}.", obj)]
    for prefix, obj in found:
        label, rt = (prefix + "rope_type", obj["rope_type"]) if "rope_type" in obj else (prefix + "type", obj.get("type"))
        if rt not in ("default", None):
            p.add(f"{label} {rt!r} is not supported; only 'default' RoPE is")
    return found


def _layer_types(p: Problems, text: dict, pre: str, n: int | None) -> tuple[str, ...] | None:
    if text.get("layer_types") is not None:
        got = read_name_list(p, pre + "layer_types", text["layer_types"], LAYER_TYPES)
        return None if got is None else tuple(got)
    interval = read_field(p, Field("full_attention_interval", "int", 4, min=1), [(pre, text)])
    if interval is None or n is None:
        return None
    return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n))


def _eos_ids(p: Problems, label: str, v: Any) -> tuple[int, ...] | None:
    if v is None:
        return ()
    if not isinstance(v, (int, list)) or isinstance(v, bool):
        p.add(f"{label} is {show(v)}, must be a token id, a list of token ids or null")
        return None
    got = read_int_list(p, label, [v] if isinstance(v, int) else v)
    return None if got is None else tuple(got)

