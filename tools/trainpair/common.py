"""Paths, the seed, the special token ids and the two schedules every training stage shares."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BUILTIN = REPO / "src" / "onebit_engine" / "data" / "builtin"
PROMPTS_JSON = REPO / "src" / "onebit_engine" / "data" / "prompts" / "default.json"

SEED = 20261130
SPECIALS = ["<|endoftext|>", "<|pad|>", "<|mask|>"]
EOT_ID, PAD_ID, MASK_ID = 0, 1, 2
VOCAB = 4096


def lr_at(step: int, steps: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def every25(values) -> list[float]:
    """A curve for TRAINING.json: the mean of every 25 steps."""
    return [float(np.mean(values[i: i + 25])) for i in range(0, len(values), 25)]


def round_to_f16_(module) -> None:
    """Every parameter to its float16 value, kept in float32 (what ships is float16)."""
    import torch

    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.half().float())
