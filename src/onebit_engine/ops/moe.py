"""Mixture-of-experts routing and combination (transformers' ``Qwen3NextTopKRouter`` / ``...Experts``).

Exact math: ``p = softmax(router_logits)`` in float32, the ``top_k`` largest ``p`` (optionally
renormalised to sum 1), and ``y = sum_e w_e * expert_e(x)`` over the chosen experts in ascending expert
id, the order ``index_add_`` accumulates them in HF.

Ties: ``torch.topk`` on CPU leaves the order of equal values unspecified (four equal probabilities,
k = 2, give experts [2, 3]; 64 equal ones give [44, 41, 42, ...] - pinned in
``tests/oracle/test_hf_moe.py``). This engine breaks ties by the lowest expert id (a stable sort of
``-p``), a rule that depends on the row alone; with distinct probabilities both choose the same experts
in the same order.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def route(logits: np.ndarray, top_k: int, norm_topk_prob: bool) -> tuple[np.ndarray, np.ndarray]:
    """Shapes: logits [R, E] -> experts int64 [R, top_k] (descending probability, ties: lowest id
    first) and their weights float32 [R, top_k]. Each row is computed from that row alone."""
    z = np.asarray(logits, dtype=F32)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    experts = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
    w = np.take_along_axis(p, experts, axis=-1)
    if norm_topk_prob:
        w = w / w.sum(axis=-1, keepdims=True)
    return experts, w.astype(F32, copy=False)


def routed_rows(experts: np.ndarray, n: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Expert id -> (rows, top-k ranks) among the first ``n`` rows that chose it, rows ascending;
    experts in ascending id (dict order)."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for e in np.unique(experts[:n]):
        rows, ranks = np.nonzero(experts[:n] == e)
        out[int(e)] = (rows, ranks)
    return out


def routing_margins(logits: np.ndarray, top_k: int) -> np.ndarray:
    """Shapes: logits [n, E] -> float64 [n, 2]: per row, the router-logit gap between the top_k-th and the
    (top_k + 1)-th largest logit (inf when every expert is chosen; the softmax keeps the order, so this is
    how far the choice is from flipping) and the magnitude of the top_k-th logit."""
    z = -np.sort(-np.asarray(logits, np.float64), axis=-1)
    if top_k >= z.shape[-1]:
        return np.stack([np.full(z.shape[0], np.inf), np.abs(z[:, -1])], axis=-1)
    return np.stack([z[:, top_k - 1] - z[:, top_k], np.abs(z[:, top_k - 1])], axis=-1)
