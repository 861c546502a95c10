"""The draft's only state: the context K/V of every committed position, per draft layer.

Block K/V (anchor + masks) are recomputed every round and never stored (docs/draft.md, "What one round
computes"), so this state
only grows, by ``Draft.append_context``. Keys are stored *after* k_norm and RoPE at their absolute
positions, so the cache never has to be re-rotated. ``truncate`` exists for a caller that un-commits.

Each layer's rows live in an ``ops.kv_cache.KVCache`` (the engine's one KV cache) with keys kept
transposed (``keys_last``: positions last): the compiled attention's score loop then runs over
contiguous positions, which LLVM vectorises. ``view``/``append`` speak the usual ``[Hk, T, hd]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import StateError
from ..ops.kv_cache import KVCache


@dataclass
class DraftState:
    """``caches[i]``: layer i's :class:`KVCache` (keys_last: keys float32 ``[Hk, hd, capacity]``, values
    ``[Hk, capacity, hd]``); positions ``[0, length)`` are committed. ``kt[i]``/``v[i]`` are its arrays.

    Row p holds the context of absolute position p (``c_p = hidden_norm(fc(taps_p))`` projected by the
    layer's ``k_proj``/``v_proj``; keys k_norm'd and rotated at position p).
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    length: int = 0
    caches: list[KVCache] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.caches:
            self.caches = [KVCache(self.num_kv_heads, self.head_dim, keys_last=True) for _ in range(self.num_layers)]

    @property
    def kt(self) -> list[np.ndarray]:
        """Per layer the keys, transposed: float32 ``[Hk, hd, capacity]`` (columns < length live)."""
        return [c.keys for c in self.caches]

    @property
    def v(self) -> list[np.ndarray]:
        """Per layer the values: float32 ``[Hk, capacity, hd]`` (rows < length live)."""
        return [c.values for c in self.caches]

    @property
    def capacity(self) -> int:
        return self.caches[0].capacity

    def append(self, layer: int, k_new: np.ndarray, v_new: np.ndarray) -> None:
        """Write rows ``[length, length + T)`` of one layer. Shapes: k_new, v_new [Hk, T, hd].

        Call for every layer, then :meth:`advance` once.
        """
        cache = self.caches[layer]
        if cache.length != self.length:
            raise StateError(
                f"draft layer {layer} already holds {cache.length} rows but the state has {self.length} committed: "
                f"append each layer once, then call advance"
            )
        cache.append(k_new, v_new)

    def copy(self) -> "DraftState":
        """An independent copy (the caches' live rows and spare capacity)."""
        return DraftState(self.num_layers, self.num_kv_heads, self.head_dim, self.length, [c.copy() for c in self.caches])

    def advance(self, t: int) -> None:
        n = self.length + t
        behind = [i for i, c in enumerate(self.caches) if c.length != n]
        if behind:
            raise StateError(
                f"cannot advance the draft context to {n} rows: layers {behind} hold "
                f"{[self.caches[i].length for i in behind]}; append {t} rows to every layer first"
            )
        self.length = n

    def view(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Live context K, V of one layer: [Hk, length, hd] each (views, do not write; K is a transposed view)."""
        return self.caches[layer].view(self.length)

    def truncate(self, length: int) -> None:
        """Forget context rows ``>= length`` (un-commit). Only shrinks (``KVCache.truncate``'s StateError)."""
        for c in self.caches:
            c.truncate(min(c.length, self.length))  # drop rows appended but never advanced over
            c.truncate(length)
        self.length = length

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches)
