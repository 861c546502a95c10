"""The DFlash / DFlash 2 draft's configuration: a frozen dataclass built from a HF ``config.json``.

Field lookup follows REF-NEW (``z-lab/dflash`` ``dflash/model.py`` ``_draft_value``): every DFlash field
is read first from the ``dflash_config`` object, then from the top level. The attention layout follows
the REF-NEW / vLLM / SGLang per-layer rule (dflash.md 2.4)::

    causal[i] = is_causal            if the config sets it
              = layer_types[i] == "sliding_attention"   otherwise
    window[i] = sliding_window       for sliding layers (HF Qwen3Config: only if use_sliding_window)
              = None                 for full-attention layers
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ConfigError

DRAFT_ARCHITECTURES = {"DFlashDraftModel": 1, "DFlash2DraftModel": 2}
DRAFT_LAYER_TYPES = ("full_attention", "sliding_attention")
V2_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


@dataclass(frozen=True)
class DraftConfig:
    """Shapes and constants of the draft (names follow HF ``Qwen3Config`` + ``dflash_config``).

    ``version`` is 1 (DFlash) or 2 (DFlash 2: grouped dynamic conv + candidate selector; the four
    ``conv_*``/``selector_*`` fields are then required). ``sliding_window`` is the effective window
    (``None`` when ``use_sliding_window`` is false, as HF does); use :attr:`windows` per layer.
    """

    version: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    block_size: int = 16
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    is_causal: bool | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    vocab_size: int | None = None
    num_target_layers: int | None = None
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    input_embedding_scale: float = 1.0
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    selector_rank: int = 0
    selector_top_k: int = 0

    def __post_init__(self) -> None:
        if self.version not in (1, 2):
            raise ConfigError(f"draft version {self.version} is not 1 (DFlash) or 2 (DFlash 2)")
        if len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(
                f"layer_types has {len(self.layer_types)} entries but num_hidden_layers is "
                f"{self.num_hidden_layers}; give one type per draft layer"
            )
        bad = sorted({t for t in self.layer_types if t not in DRAFT_LAYER_TYPES})
        if bad:
            raise ConfigError(f"unknown draft layer type(s) {bad}; expected one of {DRAFT_LAYER_TYPES}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ConfigError(f"head_dim {self.head_dim} must be even for rotate-half RoPE")
        if self.block_size < 2:
            raise ConfigError(f"block_size {self.block_size} must be >= 2 (anchor + at least one draft)")
        if not self.target_layer_ids:
            raise ConfigError("target_layer_ids is empty; the draft needs at least one target layer to tap")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ConfigError(f"sliding_window {self.sliding_window} must be >= 1 (or null for no window)")
        if self.version == 2:
            missing = [f for f in V2_FIELDS if getattr(self, f) <= 0]
            if missing:
                raise ConfigError(
                    f"a DFlash 2 draft needs positive {missing} in dflash_config; the config gives "
                    f"{ {f: getattr(self, f) for f in missing} }"
                )
            if self.hidden_size % self.conv_group_size:
                raise ConfigError(
                    f"hidden_size ({self.hidden_size}) must be divisible by conv_group_size "
                    f"({self.conv_group_size})"
                )

    # Derived per-layer attention layout (the REF-NEW rule, dflash.md 2.4).
    @property
    def causal(self) -> tuple[bool, ...]:
        if self.is_causal is not None:
            return tuple(bool(self.is_causal) for _ in self.layer_types)
        return tuple(t == "sliding_attention" for t in self.layer_types)

    @property
    def windows(self) -> tuple[int | None, ...]:
        return tuple(self.sliding_window if t == "sliding_attention" else None for t in self.layer_types)

    @property
    def conv_groups(self) -> int:
        """G = hidden_size / conv_group_size (DFlash 2 only)."""
        return self.hidden_size // self.conv_group_size if self.conv_group_size else 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layer_types"] = list(self.layer_types)
        d["target_layer_ids"] = list(self.target_layer_ids)
        return d

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> "DraftConfig":
        """Build from a parsed draft ``config.json`` (``model_type: qwen3`` + ``dflash_config``)."""
        dcfg = raw.get("dflash_config") or {}
        if not isinstance(dcfg, dict):
            raise ConfigError(f"dflash_config must be a JSON object, got {type(dcfg).__name__}")

        def value(name: str, default: Any = None) -> Any:
            return dcfg.get(name, raw.get(name, default))

        if raw.get("attention_bias", False):
            raise ConfigError("attention_bias=true is not supported for the draft (no known DFlash checkpoint uses it)")
        if raw.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"draft hidden_act {raw.get('hidden_act')!r} is not supported; only 'silu' is")
        if value("attention_sink_bias") is not None:
            raise ConfigError("dflash_config.attention_sink_bias (MiMo-style sinks) is not supported by this draft")
        n = _need(raw, "num_hidden_layers")
        heads = _need(raw, "num_attention_heads")
        if "head_dim" not in raw:
            raise ConfigError(
                "draft config.json has no 'head_dim'; HF Qwen3Config would silently default it to 128 - "
                "add the real head_dim to config.json"
            )
        use_sw = bool(raw.get("use_sliding_window", False))
        window = raw.get("sliding_window", 4096) if use_sw else None
        layer_types = raw.get("layer_types")
        if layer_types is None:  # HF Qwen3Config default
            mwl = int(raw.get("max_window_layers", 28))
            layer_types = ["sliding_attention" if window is not None and i >= mwl else "full_attention" for i in range(n)]
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ConfigError(f"draft rope_type {rope_type!r} is not supported; only 'default' RoPE is")
        if float(rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))) != 1.0:
            raise ConfigError("draft partial_rotary_factor != 1 is not supported (Qwen3 drafts rotate all of head_dim)")
        theta = float(rope.get("rope_theta", raw.get("rope_theta", 10000.0)))
        ids = value("target_layer_ids")
        if ids is None:
            n_target = value("num_target_layers")
            if n_target is None:
                raise ConfigError(
                    "draft config gives neither dflash_config.target_layer_ids nor num_target_layers; "
                    "add target_layer_ids (the target layers whose outputs feed the draft)"
                )
            ids = build_target_layer_ids(int(n_target), n)
        mask = value("mask_token_id")
        if mask is None:
            raise ConfigError("draft config has no mask_token_id (in dflash_config or at top level); add it")
        softcap = value("final_logit_softcapping")
        is_causal = value("is_causal")
        n_target = value("num_target_layers")
        return cls(
            version=_version(raw, value),
            hidden_size=_need(raw, "hidden_size"),
            intermediate_size=_need(raw, "intermediate_size"),
            num_hidden_layers=n,
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw["head_dim"]),
            target_layer_ids=tuple(int(i) for i in ids),
            mask_token_id=int(mask),
            block_size=int(value("block_size", 16)),
            layer_types=tuple(layer_types),
            sliding_window=None if window is None else int(window),
            is_causal=None if is_causal is None else bool(is_causal),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            vocab_size=None if raw.get("vocab_size") is None else int(raw["vocab_size"]),
            num_target_layers=None if n_target is None else int(n_target),
            output_multiplier=float(value("output_multiplier", 1.0)),
            final_logit_softcapping=None if softcap is None or float(softcap) <= 0 else float(softcap),
            input_embedding_scale=float(value("input_embedding_scale", 1.0)),
            conv_kernel_size=int(value("conv_kernel_size", 0) or 0),
            conv_group_size=int(value("conv_group_size", 0) or 0),
            selector_rank=int(value("selector_rank", 0) or 0),
            selector_top_k=int(value("selector_top_k", 0) or 0),
        )


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """REF's fallback tap choice: one layer -> [N // 2]; else evenly from 1 to N - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + i * (end - start) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def _version(raw: dict[str, Any], value: Any) -> int:
    """1 or 2: from ``architectures`` when it names a DFlash class, else from the DFlash 2 fields."""
    for arch in raw.get("architectures") or []:
        if arch in DRAFT_ARCHITECTURES:
            return DRAFT_ARCHITECTURES[arch]
    return 2 if any(value(f) for f in V2_FIELDS) else 1


def _need(d: dict[str, Any], key: str) -> int:
    if key not in d:
        raise ConfigError(f"draft config.json has no {key!r}; a DFlash draft config must give it")
    return int(d[key])
