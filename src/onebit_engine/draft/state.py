"""The draft's only state: the context K/V of every committed position, per draft layer.

Block K/V (anchor + masks) are recomputed every round and never stored (dflash.md 2.5), so this state
only grows, by ``Draft.append_context``. Keys are stored *after* k_norm and RoPE at their absolute
positions, so the cache never has to be re-rotated. ``truncate`` exists for a caller that un-commits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import StateError


@dataclass
class DraftState:
    """Per layer ``k[i]``, ``v[i]`` float32 ``[Hk, capacity, hd]``; rows ``[0, length)`` are live.

    Row p holds the context of absolute position p (``c_p = hidden_norm(fc(taps_p))`` projected by the
    layer's ``k_proj``/``v_proj``; keys k_norm'd and rotated at position p).
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    length: int = 0
    k: list[np.ndarray] = field(default_factory=list)
    v: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.k:
            shape = (self.num_kv_heads, 0, self.head_dim)
            self.k = [np.zeros(shape, np.float32) for _ in range(self.num_layers)]
            self.v = [np.zeros(shape, np.float32) for _ in range(self.num_layers)]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[1]

    def append(self, layer: int, k_new: np.ndarray, v_new: np.ndarray) -> None:
        """Write rows ``[length, length + T)`` of one layer. Shapes: k_new, v_new [Hk, T, hd].

        Call for every layer, then :meth:`advance` once.
        """
        t = k_new.shape[1]
        need = self.length + t
        if need > self.k[layer].shape[1]:
            self._grow(layer, max(need, 2 * self.k[layer].shape[1], 16))
        self.k[layer][:, self.length : need] = k_new
        self.v[layer][:, self.length : need] = v_new

    def advance(self, t: int) -> None:
        self.length += t

    def view(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Live context K, V of one layer: [Hk, length, hd] each (views, do not write)."""
        return self.k[layer][:, : self.length], self.v[layer][:, : self.length]

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
        return sum(a.nbytes for a in self.k + self.v)

    def _grow(self, layer: int, cap: int) -> None:
        for store in (self.k, self.v):
            old = store[layer]
            new = np.zeros((old.shape[0], cap, old.shape[2]), np.float32)
            new[:, : self.length] = old[:, : self.length]
            store[layer] = new
