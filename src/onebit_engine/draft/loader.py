"""Load a z-lab DFlash / DFlash 2 draft folder (``config.json`` + ``*.safetensors``) against a target.

Tensor names are those of the table in docs/draft.md, "Checkpoint layout and loader errors" (no
prefix). Accepted aliases: a leading ``model.``, ``midlayer.`` -> ``layers.0.``, ``encoder.fc.`` ->
``fc.``, ``encoder.output_norm_enc.`` -> ``hidden_norm.``, and the selector codebooks with or without
``.weight``. Every missing tensor, unknown tensor and shape mismatch is reported in one
:class:`WeightError`; a draft that does not fit the target (hidden size, vocabulary, tapped layer ids)
is refused with one :class:`ConfigError`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint.fields import first_few
from ..checkpoint.lazy import TensorRef
from ..checkpoint.safetensors import read_config
from ..errors import ConfigError, WeightError
from ..gemm import Linear, get_backend
from ..hybrid.model import folder_weights
from ..hybrid.weights import value_problems
from ..quant.rows import mixed_formats
from ..quant.table import RowTable
from .config import DraftConfig
from .conv import GroupedDynamicConv
from .model import Draft, DraftLayer
from .ops import resolve_ops
from .selector import CandidateSelector

# the projections a layer fuses (they read the same input; the context's k/v are QKV[1:])
QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")

_PREFIX_ALIASES = (
    ("midlayer.", "layers.0."),
    ("encoder.fc.", "fc."),
    ("encoder.output_norm_enc.", "hidden_norm."),
)
_CODEBOOKS = ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook")


def load_draft(path: str | Path, target: Any, *, backend: Any = "reference", row_set: int = 8, ops: Any = "auto") -> Draft:
    """Load the draft in ``path`` for ``target`` (needs ``config``, ``embed_tokens``, ``lm_head``).

    ``ops``: the non-GEMM op set, ``"numpy"`` (the readable twins), ``"numba"`` (compiled) or
    ``"auto"`` (numba when installed), or a ``draft.ops.DraftOps`` table; see ``draft.ops``."""
    ops_set = resolve_ops(ops)
    folder = Path(path)
    config = DraftConfig.from_hf(read_config(folder), source=str(folder / "config.json"))
    check_fits_target(config, target.config)
    try:  # the draft's weight problems name its folder (a run reads two checkpoints)
        tensors = canonical_names(folder_weights(folder))
        check_tensors(tensors, expected_shapes(config, target.config.vocab_size), fused_groups(config))
    except WeightError as e:
        raise WeightError(f"{folder}: {e}") from None
    be = get_backend(backend)

    def lin(name: str) -> Linear:
        return Linear.from_weight(tensors[name], be, row_set, name)

    def fused(prefix: str, names: tuple[str, ...]) -> Linear:
        return Linear.fused([tensors[prefix + n + ".weight"] for n in names], be, row_set, prefix + "+".join(names))

    def vec(name: str) -> np.ndarray:
        t = tensors[name]
        return np.ascontiguousarray(t.load() if isinstance(t, TensorRef) else t, dtype=np.float32)

    def conv(prefix: str) -> GroupedDynamicConv | None:
        if config.version == 1:
            return None
        return GroupedDynamicConv(vec(prefix + ".base_kernel"), lin(prefix + ".kernel_projection.weight"), config.conv_group_size)

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        layers.append(
            DraftLayer(
                input_layernorm=vec(p + "input_layernorm.weight"),
                post_attention_layernorm=vec(p + "post_attention_layernorm.weight"),
                qkv_proj=fused(p + "self_attn.", QKV),
                kv_proj=fused(p + "self_attn.", QKV[1:]),
                o_proj=lin(p + "self_attn.o_proj.weight"),
                q_norm=vec(p + "self_attn.q_norm.weight"),
                k_norm=vec(p + "self_attn.k_norm.weight"),
                gate_up_proj=fused(p + "mlp.", GATE_UP),
                down_proj=lin(p + "mlp.down_proj.weight"),
                attention_conv=conv(p + "attention_conv"),
                mlp_conv=conv(p + "mlp_conv"),
            )
        )
    selector = None
    if config.version == 2:
        selector = CandidateSelector(
            hidden_projection=lin("candidate_selector.hidden_projection.weight"),
            predecessor_codebook=RowTable(tensors[_CODEBOOKS[0]]),  # kept as stored: the walk reads a few rows
            successor_codebook=RowTable(tensors[_CODEBOOKS[1]]),
            top_k=config.selector_top_k,
        )
    return Draft(
        config,
        fc=lin("fc.weight"),
        hidden_norm=vec("hidden_norm.weight"),
        norm=vec("norm.weight"),
        layers=layers,
        embed_tokens=target.embed_tokens if isinstance(target.embed_tokens, RowTable) else RowTable(target.embed_tokens),
        lm_head=target.lm_head,
        num_target_layers=int(target.config.num_hidden_layers),
        selector=selector,
        ops=ops_set,
    )


def check_fits_target(config: DraftConfig, target_config: Any) -> None:
    """Refuse (one ConfigError listing every problem) a draft whose shapes do not fit the target."""
    problems = []
    hidden, vocab, n_layers = target_config.hidden_size, target_config.vocab_size, target_config.num_hidden_layers
    if config.hidden_size != hidden:
        problems.append(f"draft hidden_size {config.hidden_size} != target hidden_size {hidden} (the draft reads target features and embeddings)")
    if config.vocab_size is not None and config.vocab_size != vocab:
        problems.append(f"draft vocab_size {config.vocab_size} != target vocab_size {vocab} (the draft borrows the target's lm_head)")
    if not 0 <= config.mask_token_id < vocab:
        problems.append(f"mask_token_id {config.mask_token_id} is outside the target vocabulary 0..{vocab - 1}")
    bad = [i for i in config.target_layer_ids if not 0 <= i < n_layers]
    if bad:
        problems.append(f"target_layer_ids {bad} are not target layers (the target has num_hidden_layers={n_layers}: ids 0..{n_layers - 1})")
    if config.num_target_layers is not None and config.num_target_layers != n_layers:
        problems.append(f"draft was built for num_target_layers={config.num_target_layers}, the target has {n_layers}")
    if problems:
        raise ConfigError("the draft does not fit this target: " + "; ".join(problems) + "; load the draft trained for this target")


def canonical_names(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Map checkpoint names to this loader's names (the aliases of the module docstring)."""
    out: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for name, arr in tensors.items():
        new = name[len("model."):] if name.startswith("model.") else name
        for old, repl in _PREFIX_ALIASES:
            if new.startswith(old):
                new = repl + new[len(old):]
        if new.endswith(".weight") and new[: -len(".weight")] in _CODEBOOKS:
            new = new[: -len(".weight")]
        if new in out:
            raise WeightError(f"tensors {sources[new]!r} and {name!r} both map to {new!r}; the checkpoint has duplicates - keep one")
        out[new], sources[new] = arr, name
    return out


def expected_shapes(c: DraftConfig, vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor the config requires, with its shape (the table in docs/draft.md)."""
    h, hd, i_sz = c.hidden_size, c.head_dim, c.intermediate_size
    nq, nkv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, len(c.target_layer_ids) * h),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
    }
    for i in range(c.num_hidden_layers):
        p = f"layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (nq, h),
            p + "self_attn.k_proj.weight": (nkv, h),
            p + "self_attn.v_proj.weight": (nkv, h),
            p + "self_attn.o_proj.weight": (h, nq),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (i_sz, h),
            p + "mlp.up_proj.weight": (i_sz, h),
            p + "mlp.down_proj.weight": (h, i_sz),
        })
        if c.version == 2:
            for conv in ("attention_conv", "mlp_conv"):
                shapes[f"{p}{conv}.base_kernel"] = (2, c.conv_kernel_size, h)
                shapes[f"{p}{conv}.kernel_projection.weight"] = (2 * c.conv_kernel_size * c.conv_groups, h)
    if c.version == 2:
        shapes["candidate_selector.hidden_projection.weight"] = (c.selector_rank, h)
        for cb in _CODEBOOKS:
            shapes[cb] = (vocab, c.selector_rank)
    return shapes


def check_tensors(tensors: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], groups=(), *,
                  values: bool = True) -> None:
    """One WeightError naming every kind of problem (the first few of each, counted): missing tensors,
    unknown tensors, shape mismatches, fused ``groups`` (:func:`fused_groups`) of mixed formats, float weights stored
    as integers, NaN / inf values (``values=False``: names, shapes and formats only)."""
    missing = sorted(set(shapes) - set(tensors))
    unknown = sorted(set(tensors) - set(shapes))
    shaped = sorted(set(shapes) & set(tensors))
    wrong = [f"{n}: shape {tuple(tensors[n].shape)} in the file, config needs {shapes[n]}"
             for n in shaped if tuple(tensors[n].shape) != shapes[n]]
    lines = []
    if missing:
        lines.append(first_few([f"missing tensor {n} (shape {shapes[n]})" for n in missing]))
    if unknown:
        lines.append(first_few([f"unknown tensor {n} (shape {tuple(tensors[n].shape)})" for n in unknown]))
    if wrong:
        lines.append(first_few(wrong))
    mixed = mixed_formats(tensors, groups)
    if mixed:
        lines.append(f"{len(mixed)} fused projection(s) mix formats (quantize a layer's projections alike): " + first_few(mixed))
    if values:
        lines += value_problems({n: tensors[n] for n in shaped if getattr(tensors[n], "fmt", None) is None})
    if lines:
        raise WeightError(
            f"the draft checkpoint does not match its config.json ({len(missing)} missing, {len(unknown)} unknown, "
            f"{len(wrong)} wrong shape): " + "; ".join(lines)
            + "; use the config.json that came with these weights (layer count, heads, sizes, version) and "
            "weights in a float dtype with finite values"
        )


def fused_groups(config: DraftConfig) -> list[list[str]]:
    """The tensors each layer runs as one fused projection (``load_draft``'s ``fused``: q/k/v, its k/v, gate/up)."""
    return [[f"layers.{i}.{sub}{n}.weight" for n in names] for i in range(config.num_hidden_layers)
            for sub, names in (("self_attn.", QKV), ("mlp.", GATE_UP))]


def check_structure(folder: str | Path, config: DraftConfig) -> None:
    """The draft's own tensors against its config, names and shapes, with no target and no value scanned
    (``onebit inspect``). The fit to a target (``check_fits_target``) needs one. The codebooks' rows are the
    target's vocabulary: with no ``vocab_size`` in config.json they are taken as stored."""
    tensors = canonical_names(folder_weights(Path(folder), values=False))
    vocab = config.vocab_size
    if vocab is None:
        rows = [tensors[n].shape[0] for n in _CODEBOOKS if n in tensors and len(tensors[n].shape) == 2]
        vocab = rows[0] if rows else 0
    check_tensors(tensors, expected_shapes(config, vocab), fused_groups(config), values=False)
