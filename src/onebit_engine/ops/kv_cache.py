"""The engine's one attention KV cache: the target's full-attention layers and every draft layer use it.

Rows ``[0, length)`` are live; rows past ``length`` are dead (rolling back lowers ``length``). The
capacity is spare room only: growing copies the live rows into a larger zeroed buffer, and every reader
(``ops.attention_fast``, ``draft.kernels.attention``, the numpy twins) reads live rows only, so no bit
depends on the capacity or on how often the cache grew.

Two layouts. Values are always ``[H, capacity, hd]``. Keys are ``[H, capacity, hd]`` too, or, with
``keys_last=True``, ``[H, hd, capacity]`` (positions last: the draft's compiled score loop then runs
over contiguous positions). ``append``, ``view`` and ``prefix`` speak ``[H, T, hd]`` in both layouts.
"""
from __future__ import annotations

import numpy as np

from ..errors import StateError

F32 = np.float32
MIN_CAPACITY = 64


def grown_capacity(have: int, need: int) -> int:
    """The growth policy: at least ``need`` rows, at least double ``have``, never fewer than MIN_CAPACITY."""
    return max(need, 2 * have, MIN_CAPACITY)


class KVCache:
    """float32 ``keys`` (``[H, capacity, hd]`` or, keys_last, ``[H, hd, capacity]``), ``values``
    ``[H, capacity, hd]`` and ``length``: the number of live rows (row p = position p's key and value)."""

    def __init__(self, num_heads: int, head_dim: int, *, capacity: int = 0, keys_last: bool = False):
        self.num_heads, self.head_dim, self.keys_last = int(num_heads), int(head_dim), bool(keys_last)
        self.keys = np.zeros(self._key_shape(capacity), F32)
        self.values = np.zeros((self.num_heads, capacity, self.head_dim), F32)
        self.length = 0

    def _key_shape(self, capacity: int) -> tuple[int, int, int]:
        h, hd = self.num_heads, self.head_dim
        return (h, hd, capacity) if self.keys_last else (h, capacity, hd)

    @property
    def capacity(self) -> int:
        return self.values.shape[1]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def reserve(self, capacity: int) -> None:
        """Make rows ``[0, capacity)`` exist (growing by :func:`grown_capacity`); live rows are kept."""
        have = self.capacity
        if capacity <= have:
            return
        cap, n = grown_capacity(have, capacity), self.length
        keys = np.zeros(self._key_shape(cap), F32)
        values = np.zeros((self.num_heads, cap, self.head_dim), F32)
        if self.keys_last:
            keys[:, :, :n] = self.keys[:, :, :n]
        else:
            keys[:, :n] = self.keys[:, :n]
        values[:, :n] = self.values[:, :n]
        self.keys, self.values = keys, values

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        """Write rows ``[length, length + T)`` and advance ``length`` by T. Shapes: k, v ``[H, T, hd]``
        (or ``[H, hd]``: one row)."""
        if k.ndim == 2:
            k, v = k[:, None], v[:, None]
        lo, hi = self.length, self.length + k.shape[1]
        self.reserve(hi)
        if self.keys_last:
            self.keys[:, :, lo:hi] = k.transpose(0, 2, 1)
        else:
            self.keys[:, lo:hi] = k
        self.values[:, lo:hi] = v
        self.length = hi

    def view(self, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Keys, values of rows ``[0, n)`` (default: the live rows), ``[H, n, hd]`` each, as views (do not
        write; keys_last keys are a transposed view)."""
        n = self.length if n is None else n
        keys = self.keys[:, :, :n].transpose(0, 2, 1) if self.keys_last else self.keys[:, :n]
        return keys, self.values[:, :n]

    def prefix(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Contiguous copies of rows ``[0, n)``: keys, values ``[H, n, hd]`` each."""
        keys, values = self.view(n)
        return np.ascontiguousarray(keys), np.ascontiguousarray(values)

    def truncate(self, n: int) -> None:
        """Forget rows ``>= n`` (a rollback). Only shrinks."""
        if not 0 <= n <= self.length:
            raise StateError(
                f"cannot truncate a KV cache holding {self.length} rows to {n} rows: truncate only shrinks "
                f"(0 <= n <= {self.length}); append rows to grow it"
            )
        self.length = n

    def copy(self) -> "KVCache":
        """An independent copy (live rows and spare capacity)."""
        out = KVCache.__new__(KVCache)
        out.num_heads, out.head_dim, out.keys_last = self.num_heads, self.head_dim, self.keys_last
        out.keys, out.values, out.length = self.keys.copy(), self.values.copy(), self.length
        return out

    def __repr__(self) -> str:
        layout = "keys_last" if self.keys_last else "rows"
        return (f"KVCache(heads={self.num_heads}, head_dim={self.head_dim}, length={self.length}, "
                f"capacity={self.capacity}, layout={layout})")
