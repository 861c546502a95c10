"""RoPE cos/sin per absolute position, computed once and kept (the draft asks for the same positions every round)."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def rope_cos_sin(positions: np.ndarray, inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [T, hd] for rotate-half RoPE (angles in float32, as HF). Shapes: positions int [T]; inv_freq [hd / 2]."""
    ang = positions.astype(F32)[:, None] * inv_freq[None, :]
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
            new_cos, new_sin = rope_cos_sin(np.arange(cos.shape[0], cap), self.inv_freq)
            cos, sin = np.concatenate([cos, new_cos]), np.concatenate([sin, new_sin])
            cos.flags.writeable = sin.flags.writeable = False
            self._tables = (cos, sin)
        return cos[lo:hi], sin[lo:hi]
