"""The built-in default model: the trained pair that ships in the package (no download, ever).

``default_target`` falls back to a small seeded random hybrid target only when the shipped pair is
missing (a source tree without ``data/builtin``); ``docs/trained-pair.md`` says how the pair was made.
"""
from __future__ import annotations

from .synthetic import random_target, tiny_config

BUILTIN_SEED = 20261130


def default_target(*, backend="reference", row_set: int = 8):
    from . import load_target, pretrained

    try:
        target_dir, _, _ = pretrained.builtin_paths()
    except FileNotFoundError:
        cfg = tiny_config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, head_dim=16)
        return random_target(cfg, BUILTIN_SEED, backend=backend, row_set=row_set)
    return load_target(target_dir, backend=backend, row_set=row_set)
