"""The ``reference`` backend: float32 weights, numpy (BLAS) ``x @ W.T``.

Exact in the engine's sense because of one measured fact, pinned by
``tests/gemm/test_gemm_invariance.py``: inside an OpenBLAS sgemm call of exactly ``BLAS_ROWS`` (8) rows,
a row's result does not depend on its position or on the other rows. Other row counts do not all have
that property (here 5-7 and 9-16 rows did not, and 3 rows did not when N == 1), so every multi-row call
is run as 8-row blocks; a 1-row call is a single gemv and trivially row-independent.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..quant.rows import as_rows, load

BLAS_ROWS = 8


class ReferenceBackend:
    name = "reference"
    exact = True
    streams_rows = True  # pack reads a row source a block at a time

    def pack(self, weight: Any, *, name: str = "") -> np.ndarray:
        """float32 ``[K, N]``: the reference holds 4 bytes per parameter, by design (docs/architecture.md)."""
        if not isinstance(weight, np.ndarray) and not hasattr(weight, "dequantize"):
            weight = load(as_rows(weight))  # a row source: read whole (float32, or its QuantWeight)
        if not isinstance(weight, np.ndarray) and hasattr(weight, "dequantize"):
            weight = weight.dequantize()  # a pre-quantized checkpoint runs as its float dequantization
        # Stored transposed and contiguous [K, N] so every call is the same sgemm layout.
        return np.ascontiguousarray(np.asarray(weight, dtype=np.float32).T)

    def matmul(self, x: np.ndarray, packed: np.ndarray) -> np.ndarray:
        m = x.shape[0]
        if m == 1 or m == BLAS_ROWS:
            return x @ packed
        blocks = -(-m // BLAS_ROWS)
        xp = np.zeros((blocks * BLAS_ROWS, x.shape[1]), np.float32)
        xp[:m] = x
        out = np.concatenate([xp[b * BLAS_ROWS : (b + 1) * BLAS_ROWS] @ packed for b in range(blocks)])
        return out[:m]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "numerics": "float32 numpy matmul in 8-row blocks", "kernel_set": "numpy-blas"}
