"""Rotary embedding, rotate-half (NeoX) convention: the target's partial rotary (docs/model-math.md,
"Gated attention"; one position at a time) and the draft's full-width tables (many positions, kept in
a ``RopeTable``)."""
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


def cos_sin_rows(positions: np.ndarray, freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [T, 2 * len(freqs)] for many positions (angles in float32, as HF). Shapes: positions int [T]."""
    ang = positions.astype(F32)[:, None] * freqs[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    return np.cos(emb).astype(F32), np.sin(emb).astype(F32)


class RopeTable:
    """Rows ``[lo, hi)`` of the cos/sin table; it grows by doubling and never recomputes a row it holds,
    so a position's bits are fixed once computed (numpy's cos/sin are elementwise: a row's bits do not
    depend on which call made it either)."""

    def __init__(self, inv_freq: np.ndarray):
        self.inv_freq = inv_freq
        hd = 2 * inv_freq.shape[0]
        self._tables = (np.empty((0, hd), F32), np.empty((0, hd), F32))  # replaced whole, never edited

    def rows(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin [hi - lo, hd] (read-only views)."""
        cos, sin = self._tables
        if hi > cos.shape[0]:
            cap = max(hi, 2 * cos.shape[0], 64)
            new_cos, new_sin = cos_sin_rows(np.arange(cos.shape[0], cap), self.inv_freq)
            cos, sin = np.concatenate([cos, new_cos]), np.concatenate([sin, new_sin])
            cos.flags.writeable = sin.flags.writeable = False
            self._tables = (cos, sin)
        return cos[lo:hi], sin[lo:hi]


def rotate_half(x: np.ndarray) -> np.ndarray:
    """``[-x2, x1]`` of the last axis split in halves ``[x1, x2]`` (exact: a negation and a copy)."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the first len(cos) dims of every head. Shapes: x [H, hd]; cos, sin [rot]."""
    rot = cos.shape[0]
    xr, rest = x[:, :rot], x[:, rot:]
    return np.concatenate([xr * cos + rotate_half(xr) * sin, rest], axis=-1)
