"""Helpers for ports whose state is an opaque byte blob (a C++ engine's "save sequence state").

``state_arrays`` must return every live array by name; when the engine only hands out a serialized
blob, the port parses it. The pieces every such parser needs:

* :class:`BlobReader` - a cursor over the bytes: little-endian scalars, raw spans, typed arrays, and
  :meth:`BlobReader.done`, which fails when bytes are left over (a parser that stops early reads a
  layout it does not understand, and its arrays would silently miss a part of the state);
* :data:`GGML_TYPES` / :func:`ggml_array` - ggml's element types (f32, f16, bf16) as float32 numpy arrays;
* :func:`rows_by_position` - cache rows put in position order: an engine's KV slots are not positions
  (after a rollback new rows land in freed slots anywhere), so two equal states may list their rows in
  different slot orders; compare them by position, and compare the positions too.

``adapters/llama_cpp/blob.py`` is a worked parser (llama.cpp's sequence state) built from these.
"""
from __future__ import annotations

import struct

#: ggml element type id -> (name, bytes per element)
GGML_TYPES = {0: ("f32", 4), 1: ("f16", 2), 30: ("bf16", 2)}


class BlobFormatError(ValueError):
    """The blob does not have the layout the parser expects (names the offset and what was expected)."""


class BlobReader:
    """Reads a little-endian blob front to back. Every read names what it expected when the blob is too short."""

    def __init__(self, data: "bytes | bytearray | memoryview", *, what: str = "state blob"):
        self.data = memoryview(bytes(data))
        self.offset = 0
        self.what = what

    def _take(self, n: int, label: str) -> memoryview:
        if n < 0 or self.offset + n > len(self.data):
            raise BlobFormatError(f"{self.what}: {label} needs {n} bytes at offset {self.offset}, but only "
                                  f"{len(self.data) - self.offset} are left of {len(self.data)}; the blob's layout is not "
                                  f"the one this parser reads (another engine version?)")
        out = self.data[self.offset:self.offset + n]
        self.offset += n
        return out

    def _scalar(self, fmt: str, label: str):
        return struct.unpack("<" + fmt, self._take(struct.calcsize(fmt), label))[0]

    def u32(self, label: str = "a u32") -> int:
        return self._scalar("I", label)

    def i32(self, label: str = "an i32") -> int:
        return self._scalar("i", label)

    def u64(self, label: str = "a u64") -> int:
        return self._scalar("Q", label)

    def raw(self, n: int, label: str = "raw bytes") -> memoryview:
        return self._take(n, label)

    def expect(self, value: int, got: int, label: str) -> None:
        if value != got:
            raise BlobFormatError(f"{self.what}: {label} is {got} at offset {self.offset}, expected {value}; the blob's "
                                  f"layout is not the one this parser reads")

    def done(self) -> None:
        """Every byte was read: a parser that leaves bytes over has not understood the whole state."""
        if self.offset != len(self.data):
            raise BlobFormatError(f"{self.what}: {len(self.data) - self.offset} bytes left unread at offset {self.offset} "
                                  f"of {len(self.data)}; the parser misses a part of the state")


def ggml_array(raw: "bytes | memoryview", type_id: int, shape: tuple[int, ...], *, label: str = "array"):
    """``raw`` of ggml type ``type_id`` as a float32 numpy array of ``shape`` (a copy: the blob stays the engine's)."""
    import numpy as np

    if type_id not in GGML_TYPES:
        raise BlobFormatError(f"{label}: ggml type {type_id} is not one of {sorted(GGML_TYPES)} (f32, f16, bf16); "
                              f"a quantized cache cannot be compared element by element")
    name, size = GGML_TYPES[type_id]
    count = 1
    for s in shape:
        count *= int(s)
    if len(raw) != count * size:
        raise BlobFormatError(f"{label}: {len(raw)} bytes of {name} do not fill shape {shape} ({count * size} bytes)")
    if name == "f32":
        a = np.frombuffer(raw, dtype="<f4")
    elif name == "f16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    else:  # bf16: the high half of a float32
        a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    return np.array(a, dtype=np.float32).reshape(shape)


def rows_by_position(rows, positions, *, axis: int = 0):
    """(rows sorted along ``axis`` by position, the sorted positions). Two equal positions in one sequence
    are a broken cache: refused, since no order could make the comparison meaningful."""
    import numpy as np

    positions = np.asarray(positions, dtype=np.int64)
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    if len(ordered) > 1 and np.any(ordered[1:] == ordered[:-1]):
        dup = int(ordered[1:][ordered[1:] == ordered[:-1]][0])
        raise BlobFormatError(f"the cache holds two rows at position {dup} for one sequence; a rollback left a stale row "
                              f"behind (positions {ordered.tolist()[:16]})")
    return np.take(np.asarray(rows), order, axis=axis), ordered
