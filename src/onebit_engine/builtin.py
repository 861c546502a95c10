"""The built-in default model: used when no model path is given (no download, ever)."""
from __future__ import annotations

from .synthetic import random_target, tiny_config

BUILTIN_SEED = 20261130


def default_target(*, backend="reference", row_set: int = 8):
    """A small seeded random hybrid target (until a trained pair ships with the package)."""
    cfg = tiny_config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, head_dim=16)
    return random_target(cfg, BUILTIN_SEED, backend=backend, row_set=row_set)
