"""RMSNorm flavours of the hybrid target and the draft (docs/model-math.md, "RMSNorm flavours")."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def mean_square(x: np.ndarray) -> np.ndarray:
    """``np.mean(x * x, axis=-1, keepdims=True, dtype=float32)`` bit for bit (the same pairwise
    ``add.reduce``; mean divides in float64 and rounds, which equals one float32 division since
    53 >= 2 * 24 + 2), without np.mean's ~7 us of Python per call. Pinned by tests/ops/test_norm_fast.py."""
    return np.add.reduce(x * x, axis=-1, keepdims=True, dtype=F32) / F32(x.shape[-1])


def rms_norm_zc(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Zero-centred RMSNorm ``x / rms(x) * (1 + w)`` over the last axis. Shapes: x [..., D], w [D]."""
    var = mean_square(x)
    return (x * (F32(1.0) / np.sqrt(var + F32(eps)))) * (F32(1.0) + weight)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Plain RMSNorm ``x / rms(x) * w`` (Qwen3 / DFlash draft norms). Shapes: x [..., D], w [D]."""
    var = mean_square(x)
    return weight * (x * (F32(1.0) / np.sqrt(var + F32(eps))))


def gated_rms_norm(o: np.ndarray, z: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Delta-net output norm: norm first, plain weight, then the SiLU gate.

    Shapes: o, z [..., HV, dv]; weight [dv] (shared across heads).
    """
    var = mean_square(o)
    y = weight * (o * (F32(1.0) / np.sqrt(var + F32(eps))))
    return y * silu(z)


def l2norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``x / sqrt(sum(x^2) + eps)`` over the last axis (eps inside the root, as FLA/HF)."""
    return x * (F32(1.0) / np.sqrt(np.sum(x * x, axis=-1, keepdims=True, dtype=F32) + F32(eps)))


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return F32(1.0) / (F32(1.0) + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    """PyTorch softplus (beta 1, threshold 20: x > 20 -> x)."""
    return np.where(x > F32(20.0), x, np.log1p(np.exp(np.minimum(x, F32(20.0))))).astype(F32)
