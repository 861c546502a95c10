"""Steps 1, 2 and 4 of the device numerics contract (``docs/CONTRACTS.md``), shared by every exact
integer backend so host-int and the device agree bit for bit.

Shapes: ``x [M, K]`` float32 -> ``xq [M, K]`` int8, ``sa [M]`` float32; ``acc [M, N]`` int32 ->
``y [M, N]`` float32.
"""
from __future__ import annotations

import numpy as np

from ..errors import NonFiniteActivations

QMAX = np.float32(127)


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: ``sa = amax / 127`` (1.0 for an all-zero row), round half to even,
    clip to [-127, 127]."""
    x = np.asarray(x)
    if x.dtype != np.float32 or x.ndim != 2:
        raise ValueError(
            f"activations must be float32 [M, K], got {x.dtype} {x.shape}; cast with "
            f"np.asarray(x, dtype=np.float32) and pass one row set at a time"
        )
    amax = np.max(np.abs(x), axis=1) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    if not np.all(np.isfinite(amax)):
        bad = np.flatnonzero(~np.isfinite(amax)).tolist()
        raise NonFiniteActivations(
            f"activation rows {bad} hold NaN or inf before an int8 GEMM (an exact backend refuses rather than "
            f"emit garbage): the forward overflowed - check the checkpoint's weights (values near float32's "
            f"limit, 3.4e38, overflow) or NaN inputs"
        )
    sa = np.where(amax > 0, amax / QMAX, np.float32(1.0)).astype(np.float32)
    xq = np.clip(np.rint(x / sa[:, None]), -127, 127).astype(np.int8)
    return xq, sa


def dequantize_acc(acc: np.ndarray, sa: np.ndarray, sw: np.ndarray) -> np.ndarray:
    """``(acc.astype(float32) * sa[:, None]) * sw[None, :]`` in float32, in that order."""
    return (acc.astype(np.float32) * sa[:, None]) * sw[None, :]
