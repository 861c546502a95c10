"""Tensors of a safetensors checkpoint read on demand, a block of rows at a time.

A :class:`TensorRef` is one tensor's place on disk (file, dtype, shape, byte offset). Nothing is read
when it is made: ``rows(lo, hi)`` reads rows ``[lo, hi)`` with ``os.pread`` into a fresh array and widens
them to float32 (BF16 by a 16-bit shift, exact; F16 exactly; F64 rounded as ``astype`` does), so a
loader can quantize or pack a weight block by block and never holds a float copy of the whole model.
Reading by ``pread`` rather than a memory map keeps the file's pages out of the process's resident
set: they stay in the page cache, where the kernel may drop them. A loader reading rows for the last
time says so (``release=True``): those pages then leave the cache at once and the next rows are read
ahead. Why: the packed copy is the one that lives, and a file's worth of cache pages left behind in
every free gap of memory made later huge-page faults fail (Zen 4: a 27B-shaped int4 target loaded with
6-9 of its 13 GB in huge pages, its GEMMs 1.17-1.20x slower on the rest; with the pages released, all
13 GB). ``mapped()`` is the other way, for a lookup table (the embedding, the selector codebooks): a
read-only map in the stored dtype, of which only the rows a lookup touches become resident.

``rows`` sees a tensor as 2-D: shape ``[N, ...]`` reads as ``[N, prod(rest)]`` (vectors and other small
tensors are read whole with ``load()``).

``safetensors.folder_refs`` is ``safetensors.load_folder_tensors`` without the reading: the same checks
(every header, the shard index against the shards) and a dict of refs. ``load()`` gives exactly the
array ``safetensors.iter_tensors`` gives (its slow twin; pinned bitwise by tests/checkpoint/test_lazy.py).
"""
from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointError

DTYPES = {  # safetensors dtype name -> numpy dtype (BF16 read as its raw uint16 bits)
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
# NaN and inf are the values whose exponent bits are all ones (a bit test, no float conversion)
_EXPONENT = {"BF16": (np.uint16, 0x7F80), "F16": (np.uint16, 0x7C00), "F32": (np.uint32, 0x7F800000)}
BLOCK_BYTES = 16 << 20  # bytes read per block by the streaming helpers (a few ms of disk or page cache)


def widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values -> float32 (BF16 exactly, by a shift into the high half; the rest by ``astype``)."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


@dataclass(frozen=True)
class TensorRef:
    """One tensor of a safetensors file: ``dtype`` (safetensors name), ``shape``, ``offset`` (absolute
    byte offset of its data in ``path``)."""

    path: Path
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return np.dtype(DTYPES[self.dtype]).itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def row_len(self) -> int:
        """Elements per row of the 2-D view ``[shape[0], prod(shape[1:])]``."""
        return math.prod(self.shape[1:])

    def read(self, lo: int, hi: int, release: bool = False) -> np.ndarray:
        """Rows ``[lo, hi)`` in the stored dtype (BF16 as uint16), shape ``[hi - lo, *shape[1:]]``.
        ``release``: the caller reads these rows for the last time (see the module docstring)."""
        n = self.shape[0] if self.shape else 1
        if not 0 <= lo <= hi <= n:
            raise IndexError(f"rows [{lo}, {hi}) of {self.name} ({n} rows)")
        row = self.row_len * self.itemsize
        out = np.empty((hi - lo, *self.shape[1:]), DTYPES[self.dtype])
        want = (hi - lo) * row
        if want:
            with open(self.path, "rb", buffering=0) as f:
                at = self.offset + lo * row
                got = os.preadv(f.fileno(), [memoryview(out.reshape(-1).view(np.uint8))], at)
                if release:
                    advise(f.fileno(), at, want, "POSIX_FADV_DONTNEED")
                    advise(f.fileno(), at + want, want, "POSIX_FADV_WILLNEED")  # the next block, while this one packs
            if got != want:
                raise CheckpointError(f"{self.path}: tensor {self.name} ends early ({got} of {want} bytes at rows "
                                      f"[{lo}, {hi})); the file changed or is truncated - copy it again")
        return out

    def rows(self, lo: int, hi: int, release: bool = False) -> np.ndarray:
        """Rows ``[lo, hi)`` as float32 ``[hi - lo, row_len]`` (the 2-D view); ``release`` as for ``read``."""
        return widen(self.read(lo, hi, release).reshape(hi - lo, self.row_len), self.dtype)

    def load(self) -> np.ndarray:
        """The whole tensor as ``iter_tensors`` gives it: BF16 widened to float32, every other dtype as stored."""
        if not self.shape:
            raw = self._read_bytes(self.offset, self.itemsize).view(DTYPES[self.dtype]).reshape(())
        else:
            raw = self.read(0, self.shape[0])
        return widen(raw, "BF16") if self.dtype == "BF16" else raw

    def mapped(self) -> np.ndarray:
        """A read-only memory map of the tensor in its stored dtype (BF16 as uint16), shape ``shape``:
        rows touched by indexing become resident, the rest never do."""
        return np.memmap(self.path, dtype=DTYPES[self.dtype], mode="r", offset=self.offset, shape=self.shape)

    def blocks(self, block_bytes: int = BLOCK_BYTES):
        """(lo, hi) row ranges of about ``block_bytes`` each, covering every row."""
        n = self.shape[0] if self.shape else 1
        step = max(1, block_bytes // max(1, self.row_len * self.itemsize))
        return [(lo, min(n, lo + step)) for lo in range(0, n, step)]

    def count_nonfinite(self) -> tuple[int, int]:
        """(NaN count, inf count) of a float tensor, read block by block (float64 counted as float32, the
        precision the engine runs)."""
        nan = inf = 0
        if not self.shape:
            a = np.asarray(self.load(), np.float32)
            return int(np.isnan(a)), int(np.isinf(a))
        for lo, hi in self.blocks():
            raw = self.read(lo, hi)
            if self.dtype in _EXPONENT:
                view, mask = _EXPONENT[self.dtype]
                bits = raw.view(view)
                special = (bits & mask) == mask
                if not special.any():
                    continue
                a = widen(raw, self.dtype) if self.dtype != "F32" else raw
            else:
                with np.errstate(over="ignore"):
                    a = raw.astype(np.float32)
            nan += int(np.isnan(a).sum())
            inf += int(np.isinf(a).sum())
        return nan, inf

    def _read_bytes(self, offset: int, n: int) -> np.ndarray:
        with open(self.path, "rb", buffering=0) as f:
            data = os.pread(f.fileno(), n, offset)
        if len(data) != n:
            raise CheckpointError(f"{self.path}: tensor {self.name} ends early; the file is truncated - copy it again")
        return np.frombuffer(data, np.uint8).copy()


def advise(fd: int, offset: int, n: int, advice: str) -> None:
    """Page-cache advice for ``n`` bytes at ``offset``. Only advice: where the system has no such call, or the
    file system takes none, the bytes read are the same."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None or n <= 0:
        return
    try:
        fadvise(fd, offset, n, getattr(os, advice))
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ESPIPE, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
