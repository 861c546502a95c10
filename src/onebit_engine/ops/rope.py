"""Partial rotary embedding, rotate-half (NeoX) convention (hybrid-target.md 3.4)."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def inv_freq(rot_dim: int, theta: float) -> np.ndarray:
    """[rot_dim // 2] inverse frequencies, computed in float32 like HF."""
    exps = np.arange(0, rot_dim, 2, dtype=np.int64).astype(F32) / F32(rot_dim)
    return (F32(1.0) / (F32(theta) ** exps)).astype(F32)


def cos_sin(position: int, freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [rot_dim] for one absolute position (the same bits wherever the row sits)."""
    ang = F32(position) * freqs
    emb = np.concatenate([ang, ang])
    return np.cos(emb).astype(F32), np.sin(emb).astype(F32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the first len(cos) dims of every head. Shapes: x [H, hd]; cos, sin [rot]."""
    rot = cos.shape[0]
    xr, rest = x[:, :rot], x[:, rot:]
    half = rot // 2
    rotated = np.concatenate([-xr[:, half:], xr[:, :half]], axis=-1)
    return np.concatenate([xr * cos + rotated * sin, rest], axis=-1)
