"""Exact skinny integer GEMM: int8 activation codes ``xq [M, K]`` times packed weight codes
``[N, K]`` (int8 / int4 / ternary, see ``quant/formats.py``) -> int32 ``[M, N]``.

``matmul_int_reference`` is the slow, obviously-correct numpy twin; ``matmul_int`` is the fast path:
a native path (``avx512vnni``, ``avx2``, or the test-only ``avx512vnni-emulated``: the C kernels of
``kernel.c``, built with ziglang, see ``native.py``), ``numba``, or a numpy float64-BLAS
fallback. Both are exact integer products, so
they agree bit for bit whatever the order of summation, the thread count or the other rows; the
tests pin that. No environment is read here: callers pass ``threads`` explicitly.

The native kernel's design is in the header of ``kernel.c``. Numba kernel design (for M in 1..16): ``prange`` over blocks of ``_NB`` output channels; each
channel's packed row is read from memory once and decoded into an int16 scratch row that stays in
L1, then every activation row is dotted against it. The dot is written as an int32 reduction of
int16 x int16 products, which LLVM lowers to ``vpmaddwd`` on AVX2. Exactness: |product| <= 127^2 and
|acc| <= K * 127^2 < 2^31 for K < 133 144 (checked), so int32 never wraps.
"""
from __future__ import annotations

import numpy as np

from ...quant.formats import CODES_PER_BYTE, QuantWeight, unpack_codes
from . import native
from .layout import TILE_WIDTH, TiledWeight

try:  # the `fast` extra
    import numba
    from numba import njit, prange
except ImportError:  # pragma: no cover - exercised by forcing kernel="numpy"
    numba = None

HAVE_NUMBA = numba is not None
KERNEL_SETS = {
    "avx512vnni": "c-avx512vnni-dpbusd-t16-v2",  # v2: 8 KiB prefetch distance, no K blocks
    "avx2": "c-avx2-maddubs-t8-v6",
    "avx512vnni-emulated": "c-avx512vnni-emulated-t16-v1",  # tests only: the VNNI source on scalar intrinsics
    "numba": "numba-i16madd-nb16-v1",
    "numpy": "numpy-f64blas-v1",
}
NATIVE_KERNELS = tuple(TILE_WIDTH)  # the paths with a tile layout are the native ones
MAX_K = (2**31 - 1) // (127 * 127)
MAX_ROWS = 16  # rows per call of the native kernel (Linear's row sets are 1..16)
MAX_THREADS = 64


def matmul_int_reference(xq: np.ndarray, wq: np.ndarray) -> np.ndarray:
    """``xq`` int8 ``[M, K]`` @ ``wq`` int8 ``[N, K]``.T in int64, then checked down to int32."""
    acc = xq.astype(np.int64) @ wq.astype(np.int64).T
    if acc.size and np.abs(acc).max() > 2**31 - 1:
        raise OverflowError("int32 accumulator would wrap; K is too large for the device contract")
    return acc.astype(np.int32)


def check_k(k: int) -> None:
    if k > MAX_K:
        raise ValueError(
            f"K = {k} exceeds {MAX_K}: K * 127 * 127 would overflow the int32 accumulator of the "
            f"device contract; split the layer along K into separate GEMMs"
        )


def gemm_int_tiled(xq: np.ndarray, tw: TiledWeight, *, threads: int = 1, kb: int = 0) -> np.ndarray:
    """The native integer product of a tiled weight; ``kb`` (steps per K block, 0 = the kernel's
    choice) only changes the order of exact integer sums, so the tests vary it."""
    lib = native.library_for(tw.path)
    xq = np.ascontiguousarray(xq, dtype=np.int8)
    # rows are independent, so more than MAX_ROWS rows are simply run MAX_ROWS at a time
    return np.concatenate([lib.gemm_int(xq[r:r + MAX_ROWS], tw, threads, kb)
                           for r in range(0, max(xq.shape[0], 1), MAX_ROWS)])


def matmul_int(xq: np.ndarray, fmt: str, data: np.ndarray, *, threads: int = 1, kernel: str = "numba",
               kb: int = 0) -> np.ndarray:
    """Fast exact product of ``xq`` int8 ``[M, K]`` with packed ``data`` of format ``fmt`` -> int32 ``[M, N]``."""
    k = xq.shape[1]
    check_k(k)
    if fmt not in CODES_PER_BYTE:
        raise ValueError(f"weight format {fmt!r} is unknown; choose one of {tuple(CODES_PER_BYTE)}")
    if kernel in NATIVE_KERNELS:
        if not 1 <= threads <= MAX_THREADS:
            raise ValueError(f"threads = {threads} must be in 1..{MAX_THREADS}")
        reason = native.path_unavailable(kernel)
        if reason:
            raise native.NativeUnavailable(reason)
        # the file format is tiled per call here (the backend tiles once, at pack)
        tw = TiledWeight.from_quant(QuantWeight(fmt, (data.shape[0], k), data, np.ones(data.shape[0], np.float32)), kernel)
        return gemm_int_tiled(xq, tw, threads=threads, kb=kb)
    if kernel == "numpy" or not HAVE_NUMBA:
        return _matmul_numpy(xq, fmt, data)
    if kernel != "numba":
        raise ValueError(f"kernel {kernel!r} is unknown; choose one of {sorted(KERNEL_SETS)}")
    if not 1 <= threads <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(
            f"threads = {threads} must be in 1..{numba.config.NUMBA_NUM_THREADS} (numba's launch "
            f"size, NUMBA_NUM_THREADS); pass a smaller count or raise NUMBA_NUM_THREADS at start-up"
        )
    numba.set_num_threads(threads)
    x16 = np.ascontiguousarray(xq, dtype=np.int16)
    out = np.empty((xq.shape[0], data.shape[0]), np.int32)
    if fmt == "int8":
        _gemm_int8(x16, data.view(np.int8), out)
    elif fmt == "int4":
        _gemm_int4(x16, data, out)
    else:
        _gemm_ternary(x16, data, out)
    return out


def _matmul_numpy(xq: np.ndarray, fmt: str, data: np.ndarray) -> np.ndarray:
    # float64 holds every partial sum exactly (|sum| <= K * 127^2 < 2^53), so BLAS order cannot matter.
    w = unpack_codes(fmt, data, xq.shape[1]).astype(np.float64)
    return (xq.astype(np.float64) @ w.T).astype(np.int32)


_NB = 16  # output channels per parallel task

if HAVE_NUMBA:

    @njit(cache=True, boundscheck=False, nogil=True)
    def _dot_rows(x16, scratch, out, n):
        m, k = x16.shape
        for r in range(m):
            acc = np.int32(0)
            for j in range(k):
                acc = np.int32(acc + np.int32(x16[r, j]) * np.int32(scratch[j]))
            out[r, n] = acc

    @njit(parallel=True, cache=True, boundscheck=False)
    def _gemm_int8(x16, w, out):
        k = x16.shape[1]
        n_out = w.shape[0]
        for c in prange((n_out + _NB - 1) // _NB):
            scratch = np.empty(k, np.int16)
            for n in range(c * _NB, min(n_out, c * _NB + _NB)):
                for j in range(k):
                    scratch[j] = w[n, j]
                _dot_rows(x16, scratch, out, n)

    @njit(parallel=True, cache=True, boundscheck=False)
    def _gemm_int4(x16, data, out):
        nbytes = data.shape[1]
        n_out = data.shape[0]
        for c in prange((n_out + _NB - 1) // _NB):
            scratch = np.empty(2 * nbytes, np.int16)
            for n in range(c * _NB, min(n_out, c * _NB + _NB)):
                for j in range(nbytes):
                    b = np.int16(data[n, j])
                    scratch[2 * j] = ((b & 15) ^ 8) - 8
                    scratch[2 * j + 1] = ((b >> 4) ^ 8) - 8
                _dot_rows(x16, scratch, out, n)

    @njit(parallel=True, cache=True, boundscheck=False)
    def _gemm_ternary(x16, data, out):
        nbytes = data.shape[1]
        n_out = data.shape[0]
        for c in prange((n_out + _NB - 1) // _NB):
            scratch = np.empty(4 * nbytes, np.int16)
            for n in range(c * _NB, min(n_out, c * _NB + _NB)):
                for j in range(nbytes):
                    b = np.int16(data[n, j])
                    for s in range(4):
                        code = (b >> (2 * s)) & 3
                        scratch[4 * j + s] = (code & 1) - (code >> 1)
                _dot_rows(x16, scratch, out, n)
