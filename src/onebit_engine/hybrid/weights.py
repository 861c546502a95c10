"""Checkpoint tensor names of the hybrid target: what must be there, and the mapping to engine form.

Engine names are the Qwen3.5 "split" names under ``model.``. The Qwen3.5 VL layout
(``model.language_model.``) is re-keyed; ``model.visual.*`` and ``mtp.*`` are ignored. Qwen3-Next's
grouped ``in_proj_qkvz`` / ``in_proj_ba`` are regrouped into the split form (a row permutation).
"""
from __future__ import annotations

import warnings

import numpy as np

from ..checkpoint.fields import first_few
from ..checkpoint.lazy import TensorRef
from ..checkpoint.safetensors import FLOAT_DTYPES, file_dtype
from ..errors import WeightError
from ..quant.formats import QuantWeight
from ..quant.rows import FloatRows, Picked, RowSource, as_rows, blocks, mixed_formats
from .config import TargetConfig
from .moe_weights import moe_shapes, unfuse_experts

IGNORED_PREFIXES = ("model.visual.", "mtp.", "model.mtp.")


# The projections a layer runs as one call (layers.py fuses them: they read the same input), by the name after
# the layer's prefix; their parts must share a format, which names and shapes alone do not show.
GDN_FUSED = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
ATTENTION_FUSED = ("q_proj", "k_proj", "v_proj")
MLP_FUSED = ("gate_proj", "up_proj")


def fused_groups(cfg: TargetConfig) -> list[list[str]]:
    """The file's tensors that end up in one fused projection, group by group (a grouped Qwen3-Next file's
    in_proj_qkvz and in_proj_ba: their rows become the four GDN parts)."""
    out = []
    for i, kind in enumerate(cfg.layer_types):
        p = f"model.layers.{i}."
        if kind == "linear_attention":
            parts = ("in_proj_qkvz", "in_proj_ba") if cfg.layout == "grouped" else GDN_FUSED
            out.append([f"{p}linear_attn.{n}.weight" for n in parts])
        else:
            out.append([f"{p}self_attn.{n}.weight" for n in ATTENTION_FUSED])
        mlps = [f"{p}mlp."]
        if cfg.is_sparse(i):
            mlps = [f"{p}mlp.experts.{e}." for e in range(cfg.moe.num_experts)]
            mlps += [f"{p}mlp.shared_expert."] if cfg.moe.shared_expert_intermediate_size else []
        out += [[f"{m}{n}.weight" for n in MLP_FUSED] for m in mlps]
    return out


def file_shapes(cfg: TargetConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the file must hold (after the VL prefix is stripped) with its shape."""
    D, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    HV, dv, K = cfg.linear_num_value_heads, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim
    H, HKV, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    s: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not cfg.tie_word_embeddings:
        s["lm_head.weight"] = (V, D)
    for i, kind in enumerate(cfg.layer_types):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (D,)
        s[p + "post_attention_layernorm.weight"] = (D,)
        if cfg.is_sparse(i):
            s.update(moe_shapes(cfg, p + "mlp."))
        else:
            s[p + "mlp.gate_proj.weight"] = (I, D)
            s[p + "mlp.up_proj.weight"] = (I, D)
            s[p + "mlp.down_proj.weight"] = (D, I)
        if kind == "linear_attention":
            a = p + "linear_attn."
            if cfg.layout == "grouped":
                s[a + "in_proj_qkvz.weight"] = (2 * cfg.key_dim + 2 * cfg.value_dim, D)
                s[a + "in_proj_ba.weight"] = (2 * HV, D)
            else:
                s[a + "in_proj_qkv.weight"] = (cfg.conv_dim, D)
                s[a + "in_proj_z.weight"] = (cfg.value_dim, D)
                s[a + "in_proj_b.weight"] = (HV, D)
                s[a + "in_proj_a.weight"] = (HV, D)
            s[a + "conv1d.weight"] = (cfg.conv_dim, 1, K)
            s[a + "A_log"] = (HV,)
            s[a + "dt_bias"] = (HV,)
            s[a + "norm.weight"] = (dv,)
            s[a + "out_proj.weight"] = (D, cfg.value_dim)
        else:
            a = p + "self_attn."
            s[a + "q_proj.weight"] = (2 * H * hd, D)
            s[a + "k_proj.weight"] = (HKV * hd, D)
            s[a + "v_proj.weight"] = (HKV * hd, D)
            s[a + "o_proj.weight"] = (D, H * hd)
            s[a + "q_norm.weight"] = (hd,)
            s[a + "k_norm.weight"] = (hd,)
    return s


def normalize_names(raw: dict[str, np.ndarray], source: str = "checkpoint") -> dict[str, np.ndarray]:
    """Strip the VL text prefix and drop the ignored vision / MTP tensors. Two stored names for one tensor
    (``model.X`` and ``model.language_model.X``) are refused: which copy would run is not for the loader to guess."""
    out, stored = {}, {}
    for name, arr in raw.items():
        new = name
        if new.startswith("model.language_model."):
            new = "model." + new[len("model.language_model."):]
        if new.startswith(IGNORED_PREFIXES):
            continue
        if new in out:
            raise WeightError(f"{source}: tensors {stored[new]!r} and {name!r} are both {new!r} (the VL wrapper's "
                              f"language_model prefix); the checkpoint has two copies - keep one")
        out[new], stored[new] = arr, name
    return out


def check_and_map(raw: dict, cfg: TargetConfig, source: str, *, values: bool = True) -> dict:
    """Validate every tensor at once (names, shapes, float dtypes, finite values), then return the
    engine-form weights: vectors and other small tensors as float32 arrays, 2-D weights as given (arrays
    as float32; checkpoint tensors and quantized weights as row sources, read block by block when packed).

    ``raw`` maps checkpoint names to arrays, QuantWeights, :class:`~..checkpoint.lazy.TensorRef` or
    row sources (a lazily read quantized file). ``values=False``: names and shapes only, no weight is scanned
    (``onebit quantize`` scans each projection as it quantizes it)."""
    tensors = normalize_names(raw, source)
    want = file_shapes(cfg)
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:  # tied: the embedding is the head
        head = tensors.pop("lm_head.weight")
        if values:
            _check_tied_copy(head, tensors.get("model.embed_tokens.weight"), source)
    problems = unfuse_experts(tensors, cfg)  # fused 3-D experts -> per-expert names
    missing = sorted(set(want) - set(tensors))
    unknown = sorted(set(tensors) - set(want))
    if missing:
        problems.append(f"{len(missing)} missing tensor(s): " + first_few(missing))
    if unknown:
        problems.append(f"{len(unknown)} unknown tensor(s): " + first_few(unknown))
    shaped = sorted(set(want) & set(tensors))
    wrong = [f"shape mismatch {n}: file {tuple(tensors[n].shape)}, config needs {want[n]}"  # a QuantWeight
             for n in shaped if tuple(tensors[n].shape) != want[n]]                         # reports [N, K]
    if wrong:
        problems.append(first_few(wrong))
    mixed = mixed_formats(tensors, fused_groups(cfg))
    if mixed:
        problems.append(f"{len(mixed)} fused projection(s) mix formats (quantize a layer's projections alike: "
                        f"`onebit quantize` the float checkpoint again with one --format): " + first_few(mixed))
    floats = [n for n in shaped if not _is_quant(tensors[n])]
    problems += value_problems({n: tensors[n] for n in floats}) if values else []
    if problems:
        raise WeightError(
            f"checkpoint {source} does not match its config ({cfg.model_type}, {cfg.num_hidden_layers} layers, "
            f"hidden {cfg.hidden_size}): " + "; ".join(problems)
            + "; fix the config.json or re-export the weights (float dtypes, finite values); nothing was loaded"
        )
    w = {k: _engine_form(v) for k, v in tensors.items()}
    if cfg.layout == "grouped":
        _regroup(w, cfg)
    return w


def _check_tied_copy(head, embed, source: str) -> None:
    """A tied checkpoint that also stores ``lm_head.weight`` (transformers writes such files): the engine uses
    the embedding as the head, as transformers' ``tie_weights`` does; a copy that differs from it is said so
    (a warning naming both tensors and the largest difference), compared a block of rows at a time."""
    if embed is None or _is_quant(head) or _is_quant(embed) or tuple(head.shape) != tuple(embed.shape):
        if embed is not None and tuple(head.shape) != tuple(embed.shape):
            warnings.warn(f"{source}: tie_word_embeddings is true, so model.embed_tokens.weight {tuple(embed.shape)} is the "
                          f"lm_head; the stored lm_head.weight {tuple(head.shape)} is not used (set tie_word_embeddings "
                          f"false in config.json to use it)", stacklevel=3)
        return
    a, b = as_rows(head), as_rows(embed)
    worst = 0.0
    for lo, hi in blocks(a):
        worst = max(worst, float(np.max(np.abs(a.block(lo, hi) - b.block(lo, hi)), initial=0.0)))
    if worst > 0:
        warnings.warn(f"{source}: tie_word_embeddings is true and the stored lm_head.weight differs from "
                      f"model.embed_tokens.weight (max |difference| {worst:.3g}); the embedding is used as the head, as "
                      f"transformers ties them (set tie_word_embeddings false in config.json to use the stored head)",
                      stacklevel=3)


def _engine_form(v):
    """Arrays as float32; a 2-D checkpoint tensor as a row source; small tensors read now, as float32."""
    if _is_quant(v) or isinstance(v, RowSource):
        return v
    if isinstance(v, TensorRef):
        return FloatRows(v) if v.ndim == 2 else np.ascontiguousarray(v.load(), dtype=np.float32)
    return np.ascontiguousarray(v, dtype=np.float32)


def value_problems(tensors: dict) -> list[str]:
    """Float weights stored as integers or bools, and weights holding NaN / inf (checked as the float32
    the engine runs, so a float64 value past float32's range counts): one summary line per kind.
    Values are arrays, checkpoint tensors (scanned a block at a time) or float row sources."""
    ints = [f"{n} ({_dtype_name(a)})" for n, a in tensors.items() if not _float_dtype(a)]
    bad = [(n, c) for n, a in tensors.items() if _float_dtype(a) and (c := _nonfinite_counts(a)) != (0, 0)]
    out = []
    if ints:
        out.append(f"{len(ints)} float weight(s) stored as integer or bool: {first_few(ints)} "
                   f"(allowed: {', '.join(FLOAT_DTYPES)})")
    if bad:
        out.append(f"{len(bad)} tensor(s) hold NaN or inf: {first_few([_nonfinite(n, tensors[n], c) for n, c in bad])}")
    return out


def _dtype_name(a) -> str:
    return a.dtype if isinstance(a, TensorRef) else file_dtype(a)


def _float_dtype(a) -> bool:
    if isinstance(a, TensorRef):
        return a.dtype in FLOAT_DTYPES
    if isinstance(a, RowSource):
        return True
    return a.dtype.kind in "f"


def _nonfinite_counts(a) -> tuple[int, int]:
    """(NaN, inf) counted as float32; 0, 0 found cheaply where possible (a bit test on the exponent)."""
    if isinstance(a, TensorRef):
        return a.count_nonfinite()
    if isinstance(a, RowSource):
        nan = inf = 0
        for lo, hi in blocks(a):
            b = a.block(lo, hi)
            nan, inf = nan + int(np.isnan(b).sum()), inf + int(np.isinf(b).sum())
        return nan, inf
    if _finite(a):
        return 0, 0
    with np.errstate(over="ignore"):
        a32 = np.asarray(a, dtype=np.float32) if a.dtype == np.float64 else a
    return int(np.isnan(a32).sum()), int(np.isinf(a32).sum())


# NaN and inf are the values whose exponent bits are all ones: a bit test is ~10x cheaper than
# np.isfinite on float16 (the shipped pair's dtype) and as cheap on float32.
_EXPONENT = {np.dtype(np.float16): (np.uint16, 0x7C00), np.dtype(np.float32): (np.uint32, 0x7F800000)}


def _finite(a: np.ndarray) -> bool:
    if a.dtype in _EXPONENT:
        view, mask = _EXPONENT[a.dtype]
        return not bool(((a.view(view) & mask) == mask).any())
    with np.errstate(over="ignore"):  # float64: what the engine will hold is float32
        return bool(np.isfinite(a.astype(np.float32)).all())


def _nonfinite(name: str, a, counts: tuple[int, int]) -> str:
    f64 = (a.dtype == "F64") if isinstance(a, TensorRef) else getattr(a, "dtype", None) == np.float64
    return f"{name} ({counts[0]} NaN, {counts[1]} inf{' in float32' if f64 else ''})"


def _is_quant(v) -> bool:
    return isinstance(v, QuantWeight) or (isinstance(v, RowSource) and v.fmt is not None)


def _rows(w, idx: np.ndarray):
    """Output channels ``idx`` of a float or quantized weight (a row source stays lazy)."""
    if isinstance(w, QuantWeight):
        from ..quant import take_rows

        return take_rows(w, idx)
    if isinstance(w, np.ndarray):
        return np.ascontiguousarray(w[idx])
    return Picked(as_rows(w), np.asarray(idx, np.int64))


def _regroup(w: dict, cfg: TargetConfig) -> None:
    """Qwen3-Next: per key head g the rows are [q_g | k_g | v_g (r heads) | z_g (r heads)], [b_g | a_g]."""
    HK, dk, dv = cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    r = cfg.linear_num_value_heads // HK
    for i, kind in enumerate(cfg.layer_types):
        if kind != "linear_attention":
            continue
        a = f"model.layers.{i}.linear_attn."
        idx = np.arange(HK * (2 * dk + 2 * r * dv)).reshape(HK, 2 * dk + 2 * r * dv)  # row ids per key group
        q, k = idx[:, :dk], idx[:, dk : 2 * dk]
        v, z = idx[:, 2 * dk : 2 * dk + r * dv], idx[:, 2 * dk + r * dv :]
        qkvz = w.pop(a + "in_proj_qkvz.weight")
        w[a + "in_proj_qkv.weight"] = _rows(qkvz, np.concatenate([q.ravel(), k.ravel(), v.ravel()]))
        w[a + "in_proj_z.weight"] = _rows(qkvz, z.ravel())
        ba_idx = np.arange(HK * 2 * r).reshape(HK, 2 * r)
        ba = w.pop(a + "in_proj_ba.weight")
        w[a + "in_proj_b.weight"] = _rows(ba, ba_idx[:, :r].ravel())
        w[a + "in_proj_a.weight"] = _rows(ba, ba_idx[:, r:].ravel())


def moe_summary(cfg: TargetConfig) -> dict:
    """Experts, top-k, which layers are sparse, and the parameters a token reads (active) vs all of them
    (total), counted from the config's tensor shapes (embedding and head included)."""
    m = cfg.moe
    total = sum(int(np.prod(s)) for s in file_shapes(cfg).values())
    sparse = [i for i in range(cfg.num_hidden_layers) if cfg.is_sparse(i)]
    idle = len(sparse) * (m.num_experts - m.num_experts_per_tok) * 3 * m.moe_intermediate_size * cfg.hidden_size
    return {"num_experts": m.num_experts, "top_k": m.num_experts_per_tok, "moe_intermediate_size": m.moe_intermediate_size,
            "shared_expert_intermediate_size": m.shared_expert_intermediate_size, "norm_topk_prob": m.norm_topk_prob,
            "sparse_layers": sparse, "total_params": total, "active_params": total - idle}
