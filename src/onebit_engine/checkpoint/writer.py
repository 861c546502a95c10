"""Write a safetensors file one tensor at a time, without holding the others.

``safetensors.numpy.save_file`` needs every tensor in memory at once; a 27B checkpoint does not fit.
The format's header lists every tensor's dtype, shape and byte span up front, so when the shapes are
known before the data (they always are: from the config, or from the input's headers) the header is
written first and each tensor's bytes follow in the declared order::

    with StreamWriter(path, [("a", "F32", (4, 8)), ("b", "U8", (4, 3))], metadata={...}) as w:
        w.write("a", a)   # in the order declared; dtype and shape checked
        w.write("b", b)   # may also come in blocks of rows: w.write("b", rows, partial=True)

The file is the one ``safetensors`` writes: an 8-byte little-endian header length, the JSON header
(padded with spaces to a multiple of 8 bytes), then the data with no gaps. Writing into a temporary
path and renaming it is the caller's (``atomic.atomic_path`` / ``atomic_folder``).

A whole file of ``DROP_CACHE_BYTES`` or more is synced at ``close`` and its pages dropped from the page cache. Why:
the host-int backend keeps every weight in 2 MiB huge pages, and a loader run right after a writer (``onebit
bench --shape`` synthesizes, then loads, in one process) met the memory held by the ~14 GB of pages just
written, freed in 4 KiB pieces as it read them: 8.7 of 13.0 GB of a 27B target in huge pages, against all of
it when the same folder was loaded later (docs/host-int.md, "Huge pages even when memory is fragmented").
"""
from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np

from ..errors import CheckpointError
from .lazy import DTYPES, advise

DROP_CACHE_BYTES = 256 << 20  # smaller files cannot hold much memory; syncing each would slow the tests' many


class StreamWriter:
    def __init__(self, path: "str | Path", entries: list[tuple[str, str, tuple[int, ...]]], metadata: dict | None = None):
        self.path = Path(path)
        self.entries = [(n, d, tuple(int(x) for x in s)) for n, d, s in entries]
        header: dict = {"__metadata__": dict(metadata)} if metadata else {}
        at = 0
        for name, dtype, shape in self.entries:
            if dtype not in DTYPES:
                raise CheckpointError(f"tensor {name!r}: dtype {dtype!r} is not a safetensors dtype ({sorted(DTYPES)})")
            if name in header:
                raise CheckpointError(f"tensor {name!r} is declared twice; a safetensors file names each tensor once")
            n = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + n]}
            at += n
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)
        self.data_bytes = at
        self._next, self._left = 0, None  # the entry being written and its bytes still to come
        self._f = open(self.path, "wb")
        self._f.write(struct.pack("<Q", len(raw)) + raw)

    def write(self, name: str, array: np.ndarray, *, partial: bool = False) -> None:
        """The next declared tensor's data (or, with ``partial``, its next block of rows)."""
        if self._next >= len(self.entries):
            raise CheckpointError(f"tensor {name!r} written after the last declared tensor")
        want, dtype, shape = self.entries[self._next]
        if name != want:
            raise CheckpointError(f"tensor {name!r} written where {want!r} comes next (write in the declared order)")
        a = np.ascontiguousarray(array)
        if a.dtype != np.dtype(DTYPES[dtype]) or (not partial and a.shape != shape) or (partial and a.shape[1:] != shape[1:]):
            raise CheckpointError(f"tensor {name!r}: got {a.dtype} {a.shape}, declared {dtype} {shape}")
        if self._left is None:
            self._left = math.prod(shape) * a.itemsize
        if a.nbytes > self._left:
            raise CheckpointError(f"tensor {name!r}: {a.nbytes} more bytes than the {self._left} still declared")
        self._f.write(memoryview(a.reshape(-1).view(np.uint8)))
        self._left -= a.nbytes
        if self._left == 0:
            self._next, self._left = self._next + 1, None

    def close(self) -> None:
        if self._f.closed:
            return
        whole, size = self._next == len(self.entries), self._f.tell()
        if whole and size >= DROP_CACHE_BYTES:  # see the module docstring
            self._f.flush()
            os.fsync(self._f.fileno())  # written back first: the cache drops clean pages only
            advise(self._f.fileno(), 0, size, "POSIX_FADV_DONTNEED")
        self._f.close()
        if not whole:
            missing = [n for n, _, _ in self.entries[self._next:]]
            raise CheckpointError(f"{self.path}: {len(missing)} declared tensor(s) never written (first {missing[0]!r})")

    def __enter__(self) -> "StreamWriter":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.close()
        else:
            self._f.close()


def copy_tensors(path: "str | Path", refs: dict, metadata: dict | None = None) -> None:
    """Write checkpoint tensors (``lazy.TensorRef``) into a new file in their stored dtype, a block at a time."""
    with StreamWriter(path, [(n, r.dtype, r.shape) for n, r in refs.items()], metadata) as w:
        for n, r in refs.items():
            if not r.shape or 0 in r.shape:  # a scalar, or an empty tensor (a zero-width shared expert): no blocks
                w.write(n, r.load())
                continue
            for lo, hi in r.blocks():
                w.write(n, r.read(lo, hi), partial=True)
