"""transformers caches: snapshot, restore and ``state_arrays`` (torch is imported by the caller).

Works on ``DynamicCache(config=...)`` of transformers >= 5 (``cache.layers``): attention layers hold
``keys`` / ``values`` [B, H, T, hd] (grown by concatenation); linear-attention (Gated DeltaNet)
layers hold ``conv_states`` / ``recurrent_states`` dicts of tensors that HF updates *in place*
(``copy_``) - which is why a snapshot must clone every tensor (a shallow one is overwritten by the
verify it was meant to undo).
"""
from __future__ import annotations

from typing import Any


def _clone(v):
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, dict):
        return {k: _clone(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v


def snapshot(cache) -> list[dict[str, Any]]:
    """Every attribute of every layer, tensors cloned (dicts of tensors included)."""
    return [{k: _clone(v) for k, v in vars(layer).items()} for layer in cache.layers]


def restore(cache, snap) -> None:
    """Put a snapshot back (cloned again: the next in-place update must not write into the snapshot)."""
    for layer, saved in zip(cache.layers, snap):
        for k, v in saved.items():
            setattr(layer, k, _clone(v))


def state_arrays(cache) -> dict:
    """``layer.{i}.keys`` / ``.values`` [H, T, hd] for attention layers, ``layer.{i}.conv`` [C, K] and
    ``layer.{i}.recurrent`` [H, dk, dv] for linear-attention layers (batch 0), as float numpy arrays."""
    out = {}
    for i, layer in enumerate(cache.layers):
        keys = getattr(layer, "keys", None)
        if keys is not None and getattr(keys, "numel", lambda: 0)() > 0:
            out[f"layer.{i}.keys"] = keys[0].detach().cpu().numpy().copy()
            out[f"layer.{i}.values"] = layer.values[0].detach().cpu().numpy().copy()
        for name, short in (("conv_states", "conv"), ("recurrent_states", "recurrent")):
            states = getattr(layer, name, None)
            if not isinstance(states, dict):
                continue
            for j, t in states.items():
                if t is None:
                    continue
                suffix = "" if j == 0 else f".{j}"
                arr = t[0].detach().cpu().numpy().copy()  # a copy: HF updates these tensors in place
                if short == "conv":
                    kernel = (getattr(layer, "conv_kernel_size", {}) or {}).get(j)
                    arr = arr[..., -kernel:] if kernel else arr
                out[f"layer.{i}.{short}{suffix}"] = arr
    return out
