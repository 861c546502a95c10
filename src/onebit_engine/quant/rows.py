"""A weight as blocks of rows, so that packing never needs the whole weight at once.

A *row source* has ``shape`` ``(N, K)``, ``fmt`` (None for float weights, else the quantized format)
and ``block(lo, hi)``: rows ``[lo, hi)`` as float32 ``[hi - lo, K]`` or, quantized, as a
:class:`~.formats.QuantWeight`. Sources are made from a checkpoint's :class:`~..checkpoint.lazy.TensorRef`
(read from disk when asked), an array or a QuantWeight (already in memory), and combined without
reading: :class:`Stacked` (a fused projection's weights, rows one after the other) and :class:`Picked`
(chosen rows, in order: Qwen3-Next's regrouping, an expert of a fused expert tensor).

Because every format's scale and codes are per output channel, quantizing block by block gives the bits
of quantizing the whole weight (``quantized_blocks``; pinned by tests/quant/test_rows.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, runtime_checkable

import numpy as np

from ..checkpoint.lazy import BLOCK_BYTES, TensorRef
from ..errors import WeightError
from .formats import CODES_PER_BYTE, QuantWeight, concat_rows, load_problems, quantize_weight

ALIGN = 64  # block starts are multiples of this: whole tiles of every native path (8 or 16 channels)


@runtime_checkable
class RowSource(Protocol):
    shape: tuple[int, int]
    fmt: "str | None"

    def block(self, lo: int, hi: int) -> "np.ndarray | QuantWeight": ...


@dataclass(frozen=True, eq=False)
class FloatRows:
    """A float weight: a checkpoint tensor (read on demand) or an array (2-D view ``[N, K]``)."""

    src: "TensorRef | np.ndarray"
    fmt: None = None

    @property
    def shape(self) -> tuple[int, int]:
        s = self.src.shape
        return (int(s[0]), int(np.prod(s[1:], dtype=np.int64)))

    def block(self, lo: int, hi: int) -> np.ndarray:
        if isinstance(self.src, TensorRef):
            return self.src.rows(lo, hi, release=True)  # a block is read to be packed: the last read
        return np.ascontiguousarray(self.src[lo:hi].reshape(hi - lo, -1), dtype=np.float32)


@dataclass(frozen=True, eq=False)
class QuantRows:
    """A quantized weight: codes read on demand from ``data`` (a checkpoint's ``.qdata`` tensor, uint8
    ``[N, ceil(K / codes per byte)]``) or held in a QuantWeight; float32 ``scale [N]`` in memory."""

    fmt: str
    shape: tuple[int, int]
    data: "TensorRef | np.ndarray"
    scale: np.ndarray

    @classmethod
    def of(cls, qw: QuantWeight) -> "QuantRows":
        return cls(qw.fmt, qw.shape, qw.data, qw.scale)

    def block(self, lo: int, hi: int) -> QuantWeight:
        # a block is read to be packed, the last read of those rows (the checks read through problems())
        data = self.data.read(lo, hi, release=True) if isinstance(self.data, TensorRef) else np.ascontiguousarray(self.data[lo:hi])
        return QuantWeight(self.fmt, (hi - lo, self.shape[1]), data, np.ascontiguousarray(self.scale[lo:hi]))

    def problems(self) -> list[str]:
        """What is wrong with the codes and scales (``formats.load_problems``), read block by block."""
        out = [p for p in load_problems(self.fmt, np.zeros((0, self.data.shape[1]), np.uint8), self.scale, self.shape[1])]
        ones = np.ones(self.shape[0], np.float32)
        for lo, hi in blocks(self):
            data = self.data.read(lo, hi) if isinstance(self.data, TensorRef) else self.data[lo:hi]
            out += [p for p in load_problems(self.fmt, data, ones[lo:hi], self.shape[1]) if p not in out]
        return out


def mixed_formats(tensors: dict, groups) -> list[str]:
    """The groups (lists of tensor names a loader fuses into one :class:`Stacked`) whose present parts are stored in
    different formats - what ``Stacked`` would refuse at build, found while names and shapes are checked."""
    out = []
    for group in groups:
        got = [(n, getattr(tensors[n], "fmt", None) or "float") for n in group if n in tensors]
        if len({f for _, f in got}) > 1:
            out.append(" + ".join(f"{n} ({f})" for n, f in got))
    return out


@dataclass(frozen=True, eq=False)
class Stacked:
    """Weights that read the same input, rows one after the other (same K, same fmt)."""

    parts: tuple

    def __post_init__(self) -> None:
        ks, fmts = {p.shape[1] for p in self.parts}, {p.fmt for p in self.parts}
        if len(ks) != 1 or len(fmts) != 1:
            raise WeightError(f"cannot fuse weights of input sizes {sorted(ks)} and formats {sorted(map(str, fmts))}; "
                              f"a fused projection needs one K and one format (quantize every projection of a layer "
                              f"alike: `onebit quantize` the float checkpoint again with one --format)")

    @property
    def shape(self) -> tuple[int, int]:
        return (sum(p.shape[0] for p in self.parts), self.parts[0].shape[1])

    @property
    def fmt(self) -> "str | None":
        return self.parts[0].fmt

    def block(self, lo: int, hi: int):
        out, at = [], 0
        for p in self.parts:
            n = p.shape[0]
            a, b = max(lo, at), min(hi, at + n)
            if a < b:
                out.append(p.block(a - at, b - at))
            at += n
        return join(out, self.fmt, self.shape[1])


@dataclass(frozen=True, eq=False)
class Picked:
    """Rows ``idx`` of ``src``, in that order (read as runs of consecutive rows)."""

    src: RowSource
    idx: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.idx), self.src.shape[1])

    @property
    def fmt(self) -> "str | None":
        return self.src.fmt

    def block(self, lo: int, hi: int):
        ids = np.asarray(self.idx[lo:hi], np.int64)
        cuts = np.flatnonzero(np.diff(ids) != 1) + 1
        runs = np.split(ids, cuts) if len(ids) else []
        return join([self.src.block(int(r[0]), int(r[-1]) + 1) for r in runs], self.fmt, self.shape[1])


def join(parts: list, fmt: "str | None", k: int):
    """Blocks of rows -> one block (float32 array or QuantWeight)."""
    if fmt is None:
        return np.concatenate(parts) if parts else np.zeros((0, k), np.float32)
    if not parts:
        return QuantWeight(fmt, (0, k), np.zeros((0, -(-k // CODES_PER_BYTE[fmt])), np.uint8), np.zeros(0, np.float32))
    return parts[0] if len(parts) == 1 else concat_rows(parts)


def as_rows(w) -> RowSource:
    """An array ``[N, K]``, a QuantWeight, a checkpoint tensor or a row source, as a row source."""
    if isinstance(w, QuantWeight):
        return QuantRows.of(w)
    if isinstance(w, (np.ndarray, TensorRef)):
        if len(w.shape) != 2:
            raise ValueError(f"a weight must be 2-D [N, K], got shape {tuple(w.shape)}")
        return FloatRows(w)
    if isinstance(w, RowSource):
        return w
    raise TypeError(f"cannot read rows of a {type(w).__name__}; give an array, a QuantWeight or a row source")


def blocks(src: RowSource, block_bytes: "int | None" = None) -> list[tuple[int, int]]:
    """(lo, hi) ranges of about ``block_bytes`` (default BLOCK_BYTES) of float32 rows, each starting at a
    multiple of ALIGN."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    n, k = src.shape
    step = max(ALIGN, block_bytes // max(1, 4 * k) // ALIGN * ALIGN)
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def quantized_blocks(src: RowSource, fmt: str, block_bytes: "int | None" = None) -> Iterator[tuple[int, QuantWeight]]:
    """(lo, the rows' QuantWeight) block by block: a float source is quantized to ``fmt`` a block at a
    time (the bits of ``quantize_weight`` on the whole weight: scales and codes are per row); a
    quantized one is passed through in its own format."""
    for lo, hi in blocks(src, block_bytes):
        b = src.block(lo, hi)
        yield lo, b if isinstance(b, QuantWeight) else quantize_weight(b, fmt)


def load(src: RowSource):
    """The whole weight: a float32 array, or a QuantWeight."""
    return src.block(0, src.shape[0])


def quantize_source(src: RowSource, fmt: str) -> QuantWeight:
    """The whole weight quantized (or, already quantized, as it is), built a block at a time."""
    parts = [qw for _, qw in quantized_blocks(src, fmt)]
    return join(parts, parts[0].fmt if parts else fmt, src.shape[1])
