"""Bit-exact emulation of one launch of the int8 x int8 -> int32 NPU GEMM, from the exact BO bytes.

The input is what the device would read: the bytes of the A, B (and C) buffer objects. The
decoding here is written independently of the packer in ``layout.py`` (explicit element
addresses, no reuse of its reshapes), so a layout bug in the packer shows up as a mismatch instead
of being reproduced. What the kernel computes (``aie_kernels/aie2/mm.cc`` with ``i8_i32_ONLY``):
for each output element, the int32 sum over K of int8 products, stored in int32 after every
k-chunk with shift 0 - for int32 output that is the exact dot product, wrapping mod 2^32 (acc32 has
no saturation). Only the first ``4 * M * N`` bytes of C are written; the rest of the BO is untouched.

``design`` is any mapping or object with ``M`` (rows per launch), ``K``, ``N``, ``b_layout`` and
``c_layout`` - a ``KernelManifest`` (where ``M`` is ``M_cap``) or the design block of an xclbin
stand-in.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def _get(design: Any, key: str) -> Any:
    if isinstance(design, dict):
        return design[key]
    return getattr(design, "M_cap" if key == "M" else key)


def decode_a(a_bytes: bytes | np.ndarray, M: int, K: int) -> np.ndarray:
    """A is row-major ``[M, K]`` int8: element (i, k) at byte ``i*K + k``."""
    buf = np.frombuffer(bytes(a_bytes[: M * K]), dtype=np.int8)
    i, k = np.meshgrid(np.arange(M), np.arange(K), indexing="ij")
    return buf[i * K + k].astype(np.int64)


def decode_b(b_bytes: bytes | np.ndarray, K: int, N: int, layout: str) -> np.ndarray:
    """B as logical ``[K, N]``: ``row_major_KN`` has (k, n) at ``k*N + n``; ``col_major_NK``
    (``b_col_maj``, the nn.Linear layout) has it at ``n*K + k``."""
    buf = np.frombuffer(bytes(b_bytes[: K * N]), dtype=np.int8)
    k, n = np.meshgrid(np.arange(K), np.arange(N), indexing="ij")
    if layout == "row_major_KN":
        addr = k * N + n
    elif layout == "col_major_NK":
        addr = n * K + k
    else:
        raise ValueError(f"B layout {layout!r} is not emulated; known: row_major_KN, col_major_NK")
    return buf[addr].astype(np.int64)


def encode_c(c: np.ndarray, layout: str) -> bytes:
    """int32 ``[M, N]`` -> the bytes the kernel stores (little-endian; row-major: (i, n) at ``4*(i*N + n)``)."""
    if layout != "row_major_MN":
        raise ValueError(f"C layout {layout!r} is not emulated; known: row_major_MN")
    M, N = c.shape
    flat = np.empty(M * N, dtype="<i4")
    i, n = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    flat[(i * N + n).reshape(-1)] = c.reshape(-1)
    return flat.tobytes()


def gemm_acc32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact int64 product, then wrapped mod 2^32 to int32 (acc32 semantics)."""
    acc = a.astype(np.int64) @ b.astype(np.int64)
    return ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)


def run_launch(design: Any, a_bytes: bytes | np.ndarray, b_bytes: bytes | np.ndarray) -> bytes:
    """One launch: the C bytes (``4 * M * N``) the kernel writes for these A and B buffer bytes."""
    M, K, N = (int(_get(design, x)) for x in ("M", "K", "N"))
    if len(a_bytes) < M * K or len(b_bytes) < K * N:
        raise ValueError(f"A/B buffers of {len(a_bytes)}/{len(b_bytes)} bytes are too small for M={M} K={K} N={N}")
    a = decode_a(a_bytes, M, K)
    b = decode_b(b_bytes, K, N, _get(design, "b_layout"))
    return encode_c(gemm_acc32(a, b), _get(design, "c_layout"))


def output_digest(c_bytes: bytes) -> str:
    """sha256 of a launch's C bytes: what a golden fixture records."""
    return hashlib.sha256(bytes(c_bytes)).hexdigest()


GOLDEN_KINDS = ("random", "extremes", "one_hot", "zero_rows", "max_sum")


def golden_inputs(seed: int, kind: str, design: Any) -> tuple[bytes, bytes]:
    """Fixed-seed A and B bytes for a golden launch (docs/device.md, "Goldens"): random codes, all +-127 and
    -128, one-hot rows, zero rows, and rows whose sum reaches the largest magnitude at this K."""
    M, K, N = (int(_get(design, x)) for x in ("M", "K", "N"))
    rng = np.random.default_rng([seed, GOLDEN_KINDS.index(kind)])
    if kind == "random":
        a = rng.integers(-127, 128, (M, K))
        b = rng.integers(-127, 128, (K, N))
    elif kind == "extremes":
        a = rng.choice([-128, -127, 127], (M, K))
        b = rng.choice([-128, -127, 127], (K, N))
    elif kind == "one_hot":
        a = np.zeros((M, K), np.int64)
        a[np.arange(M), rng.integers(0, K, M)] = rng.choice([-127, 1, 127], M)
        b = rng.integers(-127, 128, (K, N))
    elif kind == "zero_rows":
        a = rng.integers(-127, 128, (M, K))
        a[rng.random(M) < 0.5] = 0
        b = rng.integers(-127, 128, (K, N))
    elif kind == "max_sum":
        a = np.full((M, K), 127)
        a[1::2] = -127
        b = np.full((K, N), 127)
        b[:, 1::2] = -128
    else:
        raise ValueError(f"golden kind {kind!r} is unknown; choose one of {GOLDEN_KINDS}")
    # A row-major [M, K]; B in the design's layout
    b_bytes = b.astype(np.int8) if _get(design, "b_layout") == "row_major_KN" else b.T.astype(np.int8)
    return np.ascontiguousarray(a.astype(np.int8)).tobytes(), np.ascontiguousarray(b_bytes).tobytes()
