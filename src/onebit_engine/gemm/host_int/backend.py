"""The ``host-int`` backend: the device numerics contract (``docs/CONTRACTS.md``) computed on the
host, bit for bit, with a fast exact integer kernel (``int_kernels.py``).

``pack`` quantizes a float weight ``[N, K]`` to ``weight_format`` (int8 by default, the contract's
format) or accepts a :class:`~onebit_engine.quant.QuantWeight`; ``matmul`` quantizes each activation
row, runs one exact int32 product and applies the float32 epilogue ``(acc * sa) * sw``.

Kernels (``kernel=``), fastest first: ``avx512vnni`` and ``avx2`` (native paths: all three steps in one
C call; ``pack`` re-tiles the weight for the path, ``host_int/layout.py``), then ``numba`` and
``numpy`` (the numpy quantizer and epilogue of ``quant/activations.py`` around their integer product,
on the file format). ``None`` picks the first one the CPU running this code supports (cpuid and
xgetbv, read by the native library); ``"native"`` the first native one. ``avx512vnni-emulated`` (the
VNNI source on scalar intrinsics, for tests) is never picked. All are bitwise equal (tested);
``describe()`` says which runs and why each faster one could not.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailable
from ...quant.activations import dequantize_acc, quantize_rows
from ...quant.formats import FORMATS, QuantWeight
from ...quant.rows import as_rows, load, quantize_source
from . import int_kernels, native
from .arena import TileArena, settle
from .layout import TiledWeight
from ..base import F32_DTYPE as _F32
from ..base import each_product, flat_rows
from ..registry import register

WEIGHT_CODES = {"int8": "int8 [-127,127] max/127", "int4": "int4 [-7,7] max/7", "ternary": "ternary {-1,0,1} absmean"}
NUMERICS = (
    "weights {codes} per-output-channel scale; activations per-row amax/127, rint half-even, "
    "clip +-127; exact int32 accumulate; y = (acc * sa) * sw in float32"
)
DISPATCH = ("avx512vnni", "avx2")  # native paths, fastest first; then numba, numpy
KERNELS = DISPATCH + ("numba", "numpy", "avx512vnni-emulated")
_SOURCES = ("int_kernels.py", "backend.py", "native.py", "layout.py", "kernel.c", "avx2.c",
            "vnni.c", "repack.c", "tiles.h", "quant.h", "pool.h", "avx512_emul.h")


def kernel_hash(kernel: str = "") -> str:
    """sha256 (first 16 hex digits) of the sources that define the numerics and of the path's name,
    so results of different paths never compare as the same kernel."""
    here = Path(__file__).parent
    h = hashlib.sha256(kernel.encode())
    for p in [here / f for f in _SOURCES] + [here.parents[1] / "quant" / "formats.py", here.parents[1] / "quant" / "activations.py"]:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _pick(candidates: tuple[str, ...]) -> tuple["str | None", dict[str, str]]:
    """The first native path that can run here, and why each one before it cannot."""
    skipped = {}
    for path in candidates:
        reason = native.path_unavailable(path)
        if not reason:
            return path, skipped
        skipped[path] = reason
    return None, skipped


class HostIntBackend:
    name = "host-int"
    exact = True
    streams_rows = True  # pack reads a row source a block at a time
    row_invariant = True  # an exact integer product per row: its bits cannot depend on the other rows

    def __init__(self, *, weight_format: str = "int8", threads: int = 1, kernel: str | None = None):
        if weight_format not in FORMATS:
            raise ValueError(f"weight_format {weight_format!r} is unknown; choose one of {FORMATS}")
        if not 1 <= threads <= int_kernels.MAX_THREADS:
            raise ValueError(f"threads = {threads} must be in 1..{int_kernels.MAX_THREADS}")
        self.unavailable: dict[str, str] = {}  # faster paths that could not run, and why
        if kernel is None or kernel == "native":
            kernel_, self.unavailable = _pick(DISPATCH)
            if kernel_ is None and kernel == "native":
                raise BackendUnavailable(f"kernel 'native': no native path runs here ({'; '.join(self.unavailable.values())}); "
                                         f"use kernel=None to fall back to numba or numpy")
            kernel = kernel_ or ("numba" if int_kernels.HAVE_NUMBA else "numpy")
        elif kernel not in KERNELS:
            raise ValueError(f"kernel {kernel!r} is unknown; choose one of {KERNELS}, 'native' or None (the fastest here)")
        elif kernel in int_kernels.NATIVE_KERNELS:
            reason = native.path_unavailable(kernel)
            if reason:
                raise native.NativeUnavailable(f"kernel {kernel!r} cannot run here: {reason}; use kernel=None to take the "
                                               f"fastest path this CPU supports (or kernel='avx2')")
        if kernel == "numba" and not int_kernels.HAVE_NUMBA:
            raise ValueError("kernel 'numba' needs numba: pip install 'onebit-specverify[fast]', or use kernel='numpy'")
        self._native = native.library_for(kernel) if kernel in int_kernels.NATIVE_KERNELS else None
        self._arena = TileArena()  # packed tiles in huge pages (arena.py)
        self.weight_format = weight_format
        self.threads = threads
        self.kernel = kernel

    @property
    def library(self) -> "native.NativeKernel | None":
        """The native library this backend's kernel runs in (its thread pool, its read loop), else None."""
        return self._native

    def pack(self, weight: Any, *, name: str = "") -> "QuantWeight | TiledWeight":
        """The resident form: a TiledWeight for a native path (it replaces the file format's codes),
        else the QuantWeight. ``weight``: a float array, a QuantWeight, a TiledWeight or a row source
        (``quant.rows``: read, quantized and tiled a block at a time, never whole)."""
        if isinstance(weight, TiledWeight):
            if self._native is not None and weight.path == self.kernel:
                return weight
            weight = weight.to_quant()
        src = as_rows(weight)
        int_kernels.check_k(src.shape[1])
        if (src.fmt or self.weight_format) == "ternary":
            src = _TernaryChecked(src)
        if self._native is not None:
            tw = TiledWeight.from_rows(src, self.kernel, self.weight_format, self._native.tile_block, self._arena.empty)
            settle(tw.tiles)  # into huge pages now, not whenever the kernel gets round to it (arena.py)
            # the C descriptor now, not at the weight's first call: a 35B-A3B target has 20,480 expert
            # weights and a decode of a few dozen tokens meets most of them for the first time (~5 us each)
            tw.c_struct  # noqa: B018
            return tw
        if isinstance(weight, QuantWeight):  # the numpy / numba kernels run the file format as it is
            load(src)  # the checks above, on every block
            return weight
        return quantize_source(src, self.weight_format)

    def matmul(self, x: np.ndarray, packed: "QuantWeight | TiledWeight") -> np.ndarray:
        shape = x.shape
        if len(shape) != 2 or shape[1] != packed.shape[1]:
            raise ValueError(f"x must be [M, {packed.shape[1]}], got {shape}")
        if self._native is None:
            xq, sa = quantize_rows(x)
            acc = int_kernels.matmul_int(xq, packed.fmt, packed.data, threads=self.threads, kernel=self.kernel)
            return dequantize_acc(acc, sa, packed.scale)
        if getattr(packed, "path", None) != self.kernel:
            raise ValueError(f"packed weight is a {type(packed).__name__} (path {getattr(packed, 'path', None)!r}), this "
                             f"backend runs {self.kernel!r}; pack it with this backend's pack()")
        # the common call first, with the cheapest checks (identity of the dtype singleton): a small layer's
        # whole GEMM takes a few us, so every 100 ns here shows
        if x.dtype is not _F32 or not x.flags.c_contiguous:
            quantize_rows(x)  # raises on a wrong dtype, with the fix
            x = np.ascontiguousarray(x)
        if not 0 < shape[0] <= int_kernels.MAX_ROWS or shape[1] == 0:
            return self._odd_shape(x, packed)
        y = self._native.matmul(x, packed, self.threads)
        if y.__class__ is np.ndarray:
            return y
        quantize_rows(x)  # a non-finite row: raise the numpy quantizer's error, naming every bad row
        raise AssertionError("native kernel reported a non-finite row that numpy accepted")  # pragma: no cover

    def matmul_packed(self, x: np.ndarray, offs: "list[int]", counts: "list[int]", packed: list) -> np.ndarray:
        """``base.run_packed``'s products on flat buffers: product s is ``packed[s]`` on the ``counts[s]`` rows of
        its K at element ``offs[s]`` of the flat x; the outputs back to back in one flat float32 array. The bits
        of ``matmul`` on each product's rows (its twin, and every check's message where the call cannot go as it is)."""
        if not (len(offs) == len(counts) == len(packed)):
            raise ValueError(f"matmul_packed: {len(offs)} offsets and {len(counts)} counts for {len(packed)} weights")
        yo = self._packed_plan(x, offs, counts, packed) if self._native is not None else None
        if yo is None:
            return each_product([lambda r, p=p: self.matmul(r, p) for p in packed], x, offs, counts,
                                [p.shape[1] for p in packed])
        y = np.empty(yo.pop(), _F32)
        for lo in range(0, len(packed), native.MAX_MANY):
            hi = lo + native.MAX_MANY
            bad = self._native.matmul_packed(x, offs[lo:hi], counts[lo:hi], packed[lo:hi], y, yo[lo:hi], self.threads)
            if bad is not None:
                s = lo + bad
                self.matmul(flat_rows(x, offs[s], counts[s], packed[s].shape[1]), packed[s])  # the quantizer's error
                raise AssertionError("native kernel reported a non-finite row that numpy accepted")  # pragma: no cover
        return y

    def _packed_plan(self, x, offs, counts, packed) -> "list[int] | None":
        """Each product's output offset in y, then y's size (popped by the caller), when every product can go to
        the native call as it is (x flat float32 C-contiguous, each weight this kernel's, 1..MAX_ROWS rows inside
        x); else None."""
        if x.__class__ is not np.ndarray or x.dtype is not _F32 or x.ndim != 1 or not x.flags.c_contiguous:
            return None
        kernel, rows, size = self.kernel, int_kernels.MAX_ROWS, x.shape[0]
        yo, at = [], 0
        for o, c, p in zip(offs, counts, packed):
            if getattr(p, "path", None) != kernel or not 0 < c <= rows or o < 0 or not 0 < p.shape[1] or o + c * p.shape[1] > size:
                return None
            yo.append(at)
            at += c * p.shape[0]
        yo.append(at)
        return yo

    def _odd_shape(self, x: np.ndarray, packed: TiledWeight) -> np.ndarray:
        """No rows, K = 0 (acc = 0, sa = 1: zeros), or more than MAX_ROWS rows (run MAX_ROWS at a time:
        rows are independent)."""
        if x.shape[0] == 0 or x.shape[1] == 0:
            quantize_rows(x)
            return np.zeros((x.shape[0], packed.shape[0]), np.float32)
        return np.concatenate([self.matmul(x[r:r + int_kernels.MAX_ROWS], packed)
                               for r in range(0, x.shape[0], int_kernels.MAX_ROWS)])

    def describe(self) -> dict[str, Any]:
        d = {
            "backend": self.name,
            "numerics": NUMERICS.format(codes=WEIGHT_CODES[self.weight_format]),
            "weight_format": self.weight_format,
            "kernel": self.kernel,
            "kernel_set": int_kernels.KERNEL_SETS[self.kernel],
            "threads": self.threads,
            "unavailable": dict(self.unavailable),
            "hash": kernel_hash(self.kernel),
        }
        if self._native is not None:
            d["cpu"] = self._native.cpu_regs()
        return d


class _TernaryChecked:
    """A ternary source whose blocks are refused when they hold the unused 2-bit code 3 (a corrupt weight)."""

    def __init__(self, src):
        self.src, self.shape, self.fmt = src, src.shape, src.fmt

    def block(self, lo: int, hi: int):
        b = self.src.block(lo, hi)
        if isinstance(b, QuantWeight) and np.any(b.data & (b.data >> 1) & 0x55):
            raise ValueError("ternary data holds the unused 2-bit code 3; the weight is corrupt - re-quantize it")
        return b


register("host-int", lambda **options: HostIntBackend(**options))
