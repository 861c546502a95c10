"""The draft's only state: the context K/V of every committed position, per draft layer.

Block K/V (anchor + masks) are recomputed every round and never stored (dflash.md 2.5), so this state
only grows, by ``Draft.append_context``. Keys are stored *after* k_norm and RoPE at their absolute
positions, so the cache never has to be re-rotated. ``truncate`` exists for a caller that un-commits.

Keys are kept transposed (positions last): the compiled attention's score loop then runs over
contiguous positions, which LLVM vectorises. ``view``/``append`` speak the usual ``[Hk, T, hd]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import StateError


@dataclass
class DraftState:
    """Per layer ``kt[i]`` float32 ``[Hk, hd, capacity]`` (keys transposed) and ``v[i]`` float32
    ``[Hk, capacity, hd]``; positions ``[0, length)`` are live.

    Row p holds the context of absolute position p (``c_p = hidden_norm(fc(taps_p))`` projected by the
    layer's ``k_proj``/``v_proj``; keys k_norm'd and rotated at position p).
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    length: int = 0
    kt: list[np.ndarray] = field(default_factory=list)
    v: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.kt:
            self.kt = [np.zeros((self.num_kv_heads, self.head_dim, 0), np.float32) for _ in range(self.num_layers)]
            self.v = [np.zeros((self.num_kv_heads, 0, self.head_dim), np.float32) for _ in range(self.num_layers)]

    @property
    def capacity(self) -> int:
        return self.v[0].shape[1]

    def append(self, layer: int, k_new: np.ndarray, v_new: np.ndarray) -> None:
        """Write rows ``[length, length + T)`` of one layer. Shapes: k_new, v_new [Hk, T, hd].

        Call for every layer, then :meth:`advance` once.
        """
        t = k_new.shape[1]
        need = self.length + t
        if need > self.v[layer].shape[1]:
            self._grow(layer, max(need, 2 * self.v[layer].shape[1], 16))
        self.kt[layer][:, :, self.length : need] = k_new.transpose(0, 2, 1)
        self.v[layer][:, self.length : need] = v_new

    def copy(self) -> "DraftState":
        """An independent copy (the caches' live rows and spare capacity)."""
        return DraftState(self.num_layers, self.num_kv_heads, self.head_dim, self.length,
                          [k.copy() for k in self.kt], [v.copy() for v in self.v])

    def advance(self, t: int) -> None:
        self.length += t

    def view(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Live context K, V of one layer: [Hk, length, hd] each (views, do not write; K is a transposed view)."""
        return self.kt[layer][:, :, : self.length].transpose(0, 2, 1), self.v[layer][:, : self.length]

    def truncate(self, length: int) -> None:
        """Forget context rows ``>= length`` (un-commit). Only shrinks."""
        if not 0 <= length <= self.length:
            raise StateError(
                f"cannot truncate the draft context to {length} rows: it holds {self.length}; "
                f"truncate only shrinks (0 <= length <= {self.length})"
            )
        self.length = length

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.kt + self.v)

    def _grow(self, layer: int, cap: int) -> None:
        old_k, old_v = self.kt[layer], self.v[layer]
        kt = np.zeros((self.num_kv_heads, self.head_dim, cap), np.float32)
        v = np.zeros((self.num_kv_heads, cap, self.head_dim), np.float32)
        kt[:, :, : self.length] = old_k[:, :, : self.length]
        v[:, : self.length] = old_v[:, : self.length]
        self.kt[layer], self.v[layer] = kt, v
