"""Checkpoint tensors of the sparse MLP blocks, and their two layouts.

Engine form is the hub's per-expert layout under ``model.layers.{i}.mlp.``: ``gate.weight`` (router,
[E, D]), ``experts.{e}.gate_proj/up_proj/down_proj.weight``, ``shared_expert.*_proj.weight`` and
``shared_expert_gate.weight`` ([1, D]). transformers 5 ``save_pretrained`` writes that layout by
default; with ``save_original_format=False`` (its in-memory form) the experts are two 3-D tensors,
``experts.gate_up_proj`` [E, 2 I, D] (gate rows first) and ``experts.down_proj`` [E, D, I], which
:func:`unfuse_experts` splits into the per-expert names.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from ..checkpoint.lazy import TensorRef
from ..quant.rows import FloatRows, Picked
from .config import TargetConfig

_EXPERT = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.")


def moe_shapes(cfg: TargetConfig, p: str) -> dict[str, tuple[int, ...]]:
    """Every tensor a sparse block under prefix ``p`` (``model.layers.{i}.mlp.``) needs, with its shape."""
    m = cfg.moe
    D, I, S = cfg.hidden_size, m.moe_intermediate_size, m.shared_expert_intermediate_size
    s: dict[str, tuple[int, ...]] = {p + "gate.weight": (m.num_experts, D)}
    for e in range(m.num_experts):
        q = f"{p}experts.{e}."
        s.update({q + "gate_proj.weight": (I, D), q + "up_proj.weight": (I, D), q + "down_proj.weight": (D, I)})
    if S:
        q = p + "shared_expert."
        s.update({q + "gate_proj.weight": (S, D), q + "up_proj.weight": (S, D), q + "down_proj.weight": (D, S),
                  p + "shared_expert_gate.weight": (1, D)})
    return s


def idle_shared(name: str, shape, cfg) -> bool:
    """A tensor of HF's zero-width shared expert (``shared_expert_intermediate_size`` 0: its output is 0): its (0, D) /
    (D, 0) projections and its gate. Stored by transformers, computing nothing: the loader drops them, and
    ``onebit quantize`` has nothing to quantize in them. ``cfg``: a target config (any other has none)."""
    m = getattr(cfg, "moe", None)
    if m is None or m.shared_expert_intermediate_size or ".mlp.shared_expert" not in name:
        return False
    return name.endswith("shared_expert_gate.weight") or 0 in tuple(shape)


def unfuse_experts(tensors: dict, cfg: TargetConfig) -> list[str]:
    """In place: split fused 3-D expert tensors into the per-expert names and drop a zero-width shared
    expert (``shared_expert_intermediate_size`` 0). Returns the problems found (every one at once):
    fused tensors of the wrong shape and expert counts that disagree with ``num_experts``."""
    if cfg.moe is None:
        return []
    m = cfg.moe
    E, D, I = m.num_experts, cfg.hidden_size, m.moe_intermediate_size
    problems = []
    for i in range(cfg.num_hidden_layers):
        if not cfg.is_sparse(i):
            continue
        p = f"model.layers.{i}.mlp."
        for name in [n for n in tensors if n.startswith(p + "shared_expert") and idle_shared(n, tensors[n].shape, cfg)]:
            del tensors[name]
        for fused, split, want in ((p + "experts.gate_up_proj", ("gate_proj", "up_proj"), (E, 2 * I, D)),
                                   (p + "experts.down_proj", ("down_proj",), (E, D, I))):
            if fused + ".weight" in tensors and fused not in tensors:  # the same tensor under a .weight name
                tensors[fused] = tensors.pop(fused + ".weight")
            if fused not in tensors:
                continue
            arr = tensors.pop(fused)
            shape = tuple(arr.shape)
            if shape != want:
                if len(shape) == 3 and shape[0] != E:
                    problems.append(f"inconsistent expert count in layer {i}: {fused} holds {shape[0]} experts, "
                                    f"config num_experts is {E}")
                problems.append(f"shape mismatch {fused}: file {shape}, config needs {want}")
                continue
            rows = arr.shape[1] // len(split)
            for e in range(E):
                for j, part in enumerate(split):
                    tensors[f"{p}experts.{e}.{part}.weight"] = _expert_rows(arr, e, j * rows, (j + 1) * rows)
    ids: dict[int, set[int]] = {i: set() for i in range(cfg.num_hidden_layers) if cfg.is_sparse(i)}
    for name in tensors:
        hit = _EXPERT.match(name)
        if hit and int(hit.group(1)) in ids:
            ids[int(hit.group(1))].add(int(hit.group(2)))
    for i, have in ids.items():
        absent, extra = sorted(set(range(E)) - have), sorted(have - set(range(E)))
        if absent:
            problems.append(f"layer {i} is missing expert(s) {_ids(absent)} of num_experts={E}")
        if extra:
            problems.append(f"inconsistent expert count in layer {i}: the file has expert id(s) {_ids(extra)} "
                            f"beyond num_experts={E}")
    return problems


def _expert_rows(arr, e: int, lo: int, hi: int):
    """Rows [lo, hi) of expert e of a fused [E, R, D] tensor: a view of an array, or of a checkpoint
    tensor read lazily (its rows e * R + lo .. e * R + hi of the [E * R, D] view)."""
    if isinstance(arr, TensorRef):
        E, R, D = arr.shape
        flat = FloatRows(replace(arr, shape=(E * R, D)))
        return Picked(flat, np.arange(e * R + lo, e * R + hi, dtype=np.int64))
    return arr[e, lo:hi]


def split_fused_experts(tensors: dict) -> dict:
    """Config-free: every fused 3-D ``experts.gate_up_proj`` [E, 2 I, D] / ``experts.down_proj`` [E, D, I]
    as per-expert 2-D projections (so ``onebit quantize`` quantizes each expert like a dense weight; a
    checkpoint tensor's experts stay lazy row sources); other tensors unchanged."""
    out = {}
    for name, arr in tensors.items():
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        if len(arr.shape) == 3 and base.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")):
            p = base[: base.rindex("experts.") + len("experts.")]
            parts = ("gate_proj", "up_proj") if base.endswith("gate_up_proj") else ("down_proj",)
            rows = arr.shape[1] // len(parts)
            for e in range(arr.shape[0]):
                for j, part in enumerate(parts):
                    piece = _expert_rows(arr, e, j * rows, (j + 1) * rows)
                    out[f"{p}{e}.{part}.weight"] = np.ascontiguousarray(piece) if isinstance(piece, np.ndarray) else piece
        else:
            out[name] = arr
    return out


def _ids(v: list[int]) -> str:
    return str(v) if len(v) <= 16 else f"[{v[0]}..{v[-1]}] ({len(v)} ids)"
