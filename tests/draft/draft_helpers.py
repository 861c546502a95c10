"""Helpers of the draft tests: a tiny stand-in target (config, embed_tokens, lm_head) and random taps
(imported relatively, ``from .draft_helpers import ...``: the folder is a package like every test folder)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from onebit_engine.gemm import Linear
from onebit_engine.gemm.reference import ReferenceBackend

VOCAB, HIDDEN, TARGET_LAYERS, ROW_SET = 64, 32, 6, 8


def make_target(seed: int = 0, vocab: int = VOCAB, hidden: int = HIDDEN, layers: int = TARGET_LAYERS) -> SimpleNamespace:
    """What the draft needs of a target: config (vocab_size, hidden_size, num_hidden_layers), embed_tokens, lm_head."""
    rng = np.random.default_rng(seed)
    embed = rng.standard_normal((vocab, hidden)).astype(np.float32)
    w_head = (rng.standard_normal((vocab, hidden)) / np.sqrt(hidden) * 4.0).astype(np.float32)
    return SimpleNamespace(
        config=SimpleNamespace(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers),
        embed_tokens=embed,
        lm_head=Linear.from_weight(w_head, ReferenceBackend(), ROW_SET, "lm_head"),
        lm_head_weight=w_head,
    )


def make_taps(rng: np.random.Generator, t: int, layers: int = TARGET_LAYERS, hidden: int = HIDDEN) -> np.ndarray:
    """Random stand-ins for target Output.hidden rows: float32 [t, layers, hidden] (residual-stream scale)."""
    return (2.0 * rng.standard_normal((t, layers, hidden))).astype(np.float32)
