"""The DFlash / DFlash 2 draft's configuration: a frozen dataclass built from a HF ``config.json``.

Field lookup follows REF-NEW (``z-lab/dflash`` ``dflash/model.py`` ``_draft_value``): every DFlash field
is read first from the ``dflash_config`` object, then from the top level. The attention layout follows
the REF-NEW / vLLM / SGLang per-layer rule (docs/draft.md, "The mask rule")::

    causal[i] = is_causal            if the config sets it
              = layer_types[i] == "sliding_attention"   otherwise
    window[i] = sliding_window       for sliding layers (HF Qwen3Config: only if use_sliding_window)
              = None                 for full-attention layers
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
    lookup,
    read_field,
    read_int_list,
    read_name_list,
    read_object,
    show,
    top_object,
    typed,
)
from ..errors import ConfigError
from ..hybrid.config import MAX_LAYERS

DRAFT_ARCHITECTURES = {"DFlashDraftModel": 1, "DFlash2DraftModel": 2}
DRAFT_LAYER_TYPES = ("full_attention", "sliding_attention")
V2_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")

# A draft's largest block: a verify's k + 1 rows are at most one GEMM row set (the CLI's --row-set cap, 64;
# published DFlash drafts use 8-16).
MAX_BLOCK = 64

# DraftConfig field -> its config.json value at the top level (HF Qwen3Config).
TOP_FIELDS: dict[str, Field] = {
    "hidden_size": Field("hidden_size", "int", min=1),
    "intermediate_size": Field("intermediate_size", "int", min=1),
    "num_hidden_layers": Field("num_hidden_layers", "int", min=1, max=MAX_LAYERS),
    "num_attention_heads": Field("num_attention_heads", "int", min=1),
    "num_key_value_heads": Field("num_key_value_heads", "int", None, min=1, null_is_default=True),
    "head_dim": Field("head_dim", "int", None, min=1, null_is_default=True),  # missing: refused above
    "rms_norm_eps": Field("rms_norm_eps", "float", 1e-6, above=0),
    "vocab_size": Field("vocab_size", "int", None, min=1, null_is_default=True),
}
# DraftConfig field -> its value, read from ``dflash_config`` first, then the top level (REF-NEW).
DFLASH_FIELDS: dict[str, Field] = {
    "mask_token_id": Field("mask_token_id", "int", min=0),
    "block_size": Field("block_size", "int", 16, min=2, max=MAX_BLOCK),
    "num_target_layers": Field("num_target_layers", "int", None, min=1, null_is_default=True),
    "output_multiplier": Field("output_multiplier", "float", 1.0),
    "input_embedding_scale": Field("input_embedding_scale", "float", 1.0),
    **{f: Field(f, "int", 0, min=0, null_is_default=True) for f in V2_FIELDS},
}
SUPPORT_FIELDS = (
    Field("hidden_act", "str", "silu", choices=("silu",)),
    Field("attention_bias", "bool", False, choices=(False,)),
)


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
        problems = consistency_problems(asdict(self))
        if problems:
            raise ConfigError("DraftConfig: " + "; ".join(problems))

    # Derived per-layer attention layout (the REF-NEW rule, docs/draft.md, "The mask rule").
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
    def from_hf(cls, raw: Any, source: str = "draft config.json") -> "DraftConfig":
        """Build from a parsed draft ``config.json`` (``model_type: qwen3`` + ``dflash_config``); every
        value read is typed and ranged, and every problem is refused at once."""
        raw = top_object(raw, source)
        p = Problems(source)
        dcfg = read_object(p, "dflash_config", raw.get("dflash_config"))
        top, dflash = [("", raw)], [("dflash_config.", dcfg), ("", raw)]
        for f in SUPPORT_FIELDS:
            read_field(p, f, top)
        if lookup("attention_sink_bias", dflash)[1] is not None:
            p.add("dflash_config.attention_sink_bias (MiMo-style sinks) is not supported by this draft")
        if raw.get("head_dim") is None:
            p.add("head_dim is missing; HF Qwen3Config would silently default it to 128 - add the real head_dim")
        v: dict[str, Any] = {name: read_field(p, f, top) for name, f in TOP_FIELDS.items()}
        v.update({name: read_field(p, f, dflash) for name, f in DFLASH_FIELDS.items()})
        if raw.get("num_key_value_heads") is None:  # absent or null: HF's default
            v["num_key_value_heads"] = v["num_attention_heads"]
        use_sw = read_field(p, Field("use_sliding_window", "bool", False), top)
        window = raw.get("sliding_window", 4096) if use_sw else None
        if window is not None:
            window = typed(p, "sliding_window", window, Field("sliding_window", "int", min=1))
        v["sliding_window"] = window
        rope = _rope(p, raw)
        prf = read_field(p, Field("partial_rotary_factor", "float", 1.0), rope + top)
        if prf is not None and prf != 1.0:
            p.add("partial_rotary_factor != 1 is not supported (Qwen3 drafts rotate all of head_dim)")
        v["rope_theta"] = read_field(p, Field("rope_theta", "float", 10000.0, min=1), rope + top)
        v["layer_types"] = _layer_types(p, raw, v["num_hidden_layers"], use_sw and window is not None)
        v["target_layer_ids"] = _target_layer_ids(p, dflash, v["num_target_layers"], v["num_hidden_layers"])
        label, cap, _ = lookup("final_logit_softcapping", dflash)
        cap = None if cap is None else typed(p, label, cap, Field("final_logit_softcapping", "float"))
        v["final_logit_softcapping"] = None if cap is None or cap <= 0 else cap
        label, causal, _ = lookup("is_causal", dflash)
        v["is_causal"] = None if causal is None else typed(p, label, causal, Field("is_causal", "bool"))
        v["version"] = _version(p, raw, v)
        p.items.extend(consistency_problems(v))
        p.check("fix these values in the draft's config.json (or use the one that came with the weights); nothing was loaded")
        return cls(**v)


def consistency_problems(v: dict[str, Any]) -> list[str]:
    """Rules between draft values (each checked only when its values were read cleanly)."""
    out: list[str] = []
    if known(v, "version") and v["version"] not in (1, 2):
        out.append(f"draft version {v['version']} is not 1 (DFlash) or 2 (DFlash 2)")
    out += layer_type_problems(v, DRAFT_LAYER_TYPES, "draft ")
    out += divisible(v, "num_attention_heads", "num_key_value_heads")
    if known(v, "head_dim") and v["head_dim"] % 2:
        out.append(f"head_dim {v['head_dim']} must be even for rotate-half RoPE")
    if known(v, "block_size") and v["block_size"] < 2:
        out.append(f"block_size {v['block_size']} must be >= 2 (anchor + at least one draft)")
    if known(v, "target_layer_ids") and not v["target_layer_ids"]:
        out.append("target_layer_ids is empty; the draft needs at least one target layer to tap")
    if known(v, "sliding_window") and v["sliding_window"] < 1:
        out.append(f"sliding_window {v['sliding_window']} must be >= 1 (or null for no window)")
    if v.get("version") == 2 and known(v, *V2_FIELDS):
        missing = [f for f in V2_FIELDS if v[f] <= 0]
        if missing:
            out.append(f"a DFlash 2 draft needs positive {missing} in dflash_config; the config gives "
                       f"{ {f: v[f] for f in missing} }")
        else:
            out += divisible(v, "hidden_size", "conv_group_size")
    return out


def _rope(p: Problems, raw: dict) -> list[tuple[str, dict]]:
    found: list[tuple[str, dict]] = []
    for key in ("rope_parameters", "rope_scaling"):
        obj = read_object(p, key, raw.get(key))
        if obj and not found:
            found = [(key + ".", obj)]
    for prefix, obj in found:
        label, rt = (prefix + "rope_type", obj["rope_type"]) if "rope_type" in obj else (prefix + "type", obj.get("type"))
        if rt not in ("default", None):
            p.add(f"draft {label} {rt!r} is not supported; only 'default' RoPE is")
    return found


def _layer_types(p: Problems, raw: dict, n: int | None, windowed: bool) -> tuple[str, ...] | None:
    if raw.get("layer_types") is not None:
        got = read_name_list(p, "layer_types", raw["layer_types"], DRAFT_LAYER_TYPES)
        return None if got is None else tuple(got)
    mwl = read_field(p, Field("max_window_layers", "int", 28, min=0), [("", raw)])  # HF Qwen3Config default
    if mwl is None or n is None:
        return None
    return tuple("sliding_attention" if windowed and i >= mwl else "full_attention" for i in range(n))


def _target_layer_ids(p: Problems, dflash: list, n_target: int | None, n: int | None) -> tuple[int, ...] | None:
    label, ids, _ = lookup("target_layer_ids", dflash)
    if ids is not None:
        got = read_int_list(p, label, ids)
        return None if got is None else tuple(got)
    if lookup("num_target_layers", dflash)[1] is None:
        p.add("neither dflash_config.target_layer_ids nor num_target_layers is given; add target_layer_ids "
              "(the target layers whose outputs feed the draft)")
        return None
    return None if n_target is None or n is None else tuple(build_target_layer_ids(n_target, n))


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """REF's fallback tap choice: one layer -> [N // 2]; else evenly from 1 to N - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + i * (end - start) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def _version(p: Problems, raw: dict[str, Any], v: dict[str, Any]) -> int:
    """1 or 2: from ``architectures`` when it names a DFlash class, else from the DFlash 2 fields."""
    archs = raw.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        p.add(f"architectures is {show(archs)}, must be a list of class names")
        archs = []
    for arch in archs:
        if arch in DRAFT_ARCHITECTURES:
            return DRAFT_ARCHITECTURES[arch]
    return 2 if any(v.get(f) for f in V2_FIELDS) else 1
