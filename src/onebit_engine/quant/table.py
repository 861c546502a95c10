"""A lookup table ``[V, D]`` read by rows: the embedding, kept in its stored form.

Widening a bf16 embedding of 248,320 x 5,120 to float32 would take 5 GB for a table of which a decode
reads one row per token. So a table from a checkpoint stays on disk, memory-mapped in its stored dtype
(only the rows a lookup touches become resident), and a quantized table stays as its codes; a lookup
widens just the rows asked for, to the values the whole-table conversion gives (bf16 and f16 exactly,
f64 rounded to float32, codes times their row's scale).
"""
from __future__ import annotations

import numpy as np

from ..checkpoint.lazy import TensorRef, widen
from .formats import QuantWeight, unpack_codes
from .rows import FloatRows, QuantRows, RowSource, load


class RowTable:
    """``table[ids]`` -> float32 rows (ids: an int, an int array or a slice, numpy's rules);
    ``np.asarray(table)`` -> the whole table as float32 (for tests; it is what a lookup of every row gives)."""

    def __init__(self, src):
        self._dtype = None
        if isinstance(src, FloatRows):
            src = src.src
        elif isinstance(src, RowSource) and not isinstance(src, QuantRows):
            src = load(src)  # a fused or picked source: read (rare: tables are plain tensors)
        if isinstance(src, (QuantWeight, QuantRows)):
            data = src.data.mapped() if isinstance(src.data, TensorRef) else src.data
            self._quant = (src.fmt, data, np.asarray(src.scale, np.float32))
            self.shape = tuple(src.shape)
        elif isinstance(src, TensorRef):
            if src.ndim != 2:
                raise ValueError(f"a lookup table must be 2-D [V, D], {src.name} has shape {src.shape}")
            self._quant, self._rows, self._dtype = None, src.mapped(), src.dtype
            self.shape = src.shape
        else:
            self._quant, self._rows = None, np.ascontiguousarray(src, dtype=np.float32)
            self.shape = self._rows.shape
        self.dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, ids) -> np.ndarray:
        if self._quant is None:
            rows = self._rows[ids]
            return rows if self._dtype is None else widen(np.asarray(rows), self._dtype)
        fmt, data, scale = self._quant
        picked = _row_numbers(ids, self.shape[0])
        flat = np.atleast_1d(picked).reshape(-1)
        if flat.size == 0:
            return np.zeros((*np.shape(picked), self.shape[1]), np.float32)
        out = unpack_codes(fmt, np.ascontiguousarray(data[flat]), self.shape[1]).astype(np.float32) * scale[flat][:, None]
        return out.reshape(*np.shape(picked), self.shape[1])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    @property
    def resident_bytes(self) -> int:
        """Bytes this table holds in memory for sure (a mapped table: none until rows are touched)."""
        if self._quant is not None:
            _, data, scale = self._quant
            return int(scale.nbytes + (0 if isinstance(data, np.memmap) else data.nbytes))
        return 0 if isinstance(self._rows, np.memmap) else int(self._rows.nbytes)


def _row_numbers(ids, n: int) -> np.ndarray:
    """The rows ``ids`` names under numpy's rules for a table of n rows (negative ids count from the end; an
    id out of range raises IndexError), without building all n row numbers."""
    if isinstance(ids, slice):
        return np.arange(*ids.indices(n))
    a = np.asarray(ids)
    if a.dtype.kind not in "iu" and a.size:
        raise IndexError(f"table rows must be integer ids, got {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < -n or a.max() >= n):
        raise IndexError(f"row id out of range for a table of {n} rows")
    return np.where(a < 0, a + n, a)
