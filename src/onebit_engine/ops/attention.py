"""Causal attention for one query row against its own key prefix (GQA)."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def attend_row(q: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float) -> np.ndarray:
    """Softmax attention of one query position over every key it may see.

    Shapes: q [H, hd]; keys, values [HKV, n, hd] (contiguous, n = position + 1); returns [H, hd].
    Query head j reads KV head j // (H / HKV).
    """
    n_kv, n, hd = keys.shape
    g = q.shape[0] // n_kv
    qg = q.reshape(n_kv, g, hd)
    scores = np.matmul(qg, keys.transpose(0, 2, 1).copy()) * F32(scale)  # [HKV, g, n]
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True, dtype=F32)
    return np.matmul(p, values).reshape(n_kv * g, hd)
