"""The ``host-int`` backend: the device numerics contract (``docs/CONTRACTS.md``) computed on the
host, bit for bit, with a fast exact integer kernel (``int_kernels.py``).

``pack`` quantizes a float weight ``[N, K]`` to ``weight_format`` (int8 by default, the contract's
format) or accepts a :class:`~onebit_engine.quant.QuantWeight`; ``matmul`` quantizes each activation
row, runs one exact int32 product and applies the float32 epilogue ``(acc * sa) * sw``.

Kernels (``kernel=``): ``native`` does all three steps in one C call (``host_int_kernel.c``);
``numba`` and ``numpy`` run the numpy quantizer and epilogue of ``quant/activations.py`` around
their integer product. All are bitwise equal (tested). ``None`` picks the first available of
native, numba, numpy; ``describe()`` says which, and why native was not available.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from ..quant.activations import dequantize_acc, quantize_rows
from ..quant.formats import FORMATS, QuantWeight, quantize_weight
from . import int_kernels, native
from .registry import register

WEIGHT_CODES = {"int8": "int8 [-127,127] max/127", "int4": "int4 [-7,7] max/7", "ternary": "ternary {-1,0,1} absmean"}
NUMERICS = (
    "weights {codes} per-output-channel scale; activations per-row amax/127, rint half-even, "
    "clip +-127; exact int32 accumulate; y = (acc * sa) * sw in float32"
)


def kernel_hash() -> str:
    """sha256 (first 16 hex digits) of the sources that define the numerics."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for p in (here / "int_kernels.py", here / "host_int.py", here / "host_int_kernel.c", here / "native.py",
              here.parent / "quant" / "formats.py",
              here.parent / "quant" / "activations.py"):
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


class HostIntBackend:
    name = "host-int"
    exact = True
    row_invariant = True  # an exact integer product per row: its bits cannot depend on the other rows

    def __init__(self, *, weight_format: str = "int8", threads: int = 1, kernel: str | None = None):
        if weight_format not in FORMATS:
            raise ValueError(f"weight_format {weight_format!r} is unknown; choose one of {FORMATS}")
        self.native_unavailable = ""
        if kernel is None:
            try:
                native.load()
                kernel = "native"
            except native.NativeUnavailable as e:
                self.native_unavailable = str(e)
                kernel = "numba" if int_kernels.HAVE_NUMBA else "numpy"
        if kernel not in int_kernels.KERNEL_SETS:
            raise ValueError(f"kernel {kernel!r} is unknown; choose one of {sorted(int_kernels.KERNEL_SETS)}")
        if kernel == "numba" and not int_kernels.HAVE_NUMBA:
            raise ValueError("kernel 'numba' needs numba: pip install 'onebit-specverify[fast]', or use kernel='numpy'")
        if kernel == "native":
            self._native = native.load()  # raises NativeUnavailable with the reason
        if not 1 <= threads <= int_kernels.MAX_THREADS:
            raise ValueError(f"threads = {threads} must be in 1..{int_kernels.MAX_THREADS}")
        self.weight_format = weight_format
        self.threads = threads
        self.kernel = kernel

    def pack(self, weight: Any, *, name: str = "") -> QuantWeight:
        if isinstance(weight, QuantWeight):
            qw = weight
        else:
            qw = quantize_weight(np.asarray(weight, dtype=np.float32), self.weight_format)
        int_kernels.check_k(qw.shape[1])
        if qw.fmt == "ternary" and np.any(qw.data & (qw.data >> 1) & 0x55):
            raise ValueError("ternary data holds the unused 2-bit code 3; the weight is corrupt - re-quantize it")
        return qw

    def matmul(self, x: np.ndarray, packed: QuantWeight) -> np.ndarray:
        if x.ndim != 2 or x.shape[1] != packed.shape[1]:
            raise ValueError(f"x must be [M, {packed.shape[1]}], got {x.shape}")
        if (self.kernel == "native" and x.dtype == np.float32 and x.flags.c_contiguous and x.shape[1] > 0
                and 1 <= x.shape[0] <= int_kernels.MAX_ROWS):
            y = self._native.matmul(x, packed, self.threads)
            if isinstance(y, np.ndarray):
                return y
            quantize_rows(x)  # a non-finite row: raise the numpy quantizer's error, naming every bad row
            raise AssertionError("native kernel reported a non-finite row that numpy accepted")  # pragma: no cover
        xq, sa = quantize_rows(x)
        acc = int_kernels.matmul_int(xq, packed.fmt, packed.data, threads=self.threads, kernel=self.kernel)
        return dequantize_acc(acc, sa, packed.scale)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "numerics": NUMERICS.format(codes=WEIGHT_CODES[self.weight_format]),
            "weight_format": self.weight_format,
            "kernel": self.kernel,
            "kernel_set": int_kernels.KERNEL_SETS[self.kernel],
            "threads": self.threads,
            "native_unavailable": self.native_unavailable,
            "hash": kernel_hash(),
        }


register("host-int", lambda **options: HostIntBackend(**options))
