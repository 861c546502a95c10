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


def route_plan(experts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Who runs which rows, as flat arrays. Shapes: experts [R, top_k] -> ids int64 [m] (the distinct experts
    of the first ``n`` rows, ascending), offsets [m + 1], rows and ranks int64 [n * top_k]: expert ``ids[j]``'s
    (row, top-k rank) pairs are ``offsets[j]:offsets[j+1]``, rows ascending (a row never picks one expert
    twice). Pinned to a per-expert ``np.nonzero`` reference in tests/ops/test_moe_plan.py."""
    chosen = np.asarray(experts[:n]).reshape(-1)
    order = np.argsort(chosen, kind="stable")  # flat index row * top_k + rank: rows ascending within an expert
    rows, ranks = np.divmod(order, experts.shape[1])
    ids, counts = np.unique(chosen, return_counts=True)
    offsets = np.zeros(ids.shape[0] + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return ids.astype(np.int64, copy=False), offsets, rows.astype(np.int64, copy=False), ranks.astype(np.int64, copy=False)


def route_rows_numpy(logits: np.ndarray, n: int, top_k: int, norm_topk_prob: bool):
    """The sparse block's whole routing of its first ``n`` rows: :func:`route`, then :func:`route_plan`.
    Shapes: logits [R, E] -> weights float32 [n, top_k] and route_plan's ids, offsets, rows, ranks.
    The slow twin of ``moe_fast.route_rows``."""
    experts, weights = route(logits[:n], top_k, norm_topk_prob)
    return (weights, *route_plan(experts, n))


def combine_numpy(out: np.ndarray, y: np.ndarray, rows: np.ndarray, ranks: np.ndarray, weights: np.ndarray) -> None:
    """``out[rows[p]] += weights[rows[p], ranks[p]] * y[p]`` for p = 0, 1, ... in turn, in place: with the
    pairs of :func:`route_plan` each row sums its experts in ascending id. Shapes: out [R, D]; y [P, D];
    rows, ranks [P]; weights float32 [R, top_k]. The slow twin of ``moe_fast.combine``."""
    for p in range(rows.shape[0]):
        r = rows[p]
        out[r] += weights[r, ranks[p]] * y[p]


def routing_margins(logits: np.ndarray, top_k: int) -> np.ndarray:
    """Shapes: logits [n, E] -> float64 [n, 2]: per row, the router-logit gap between the top_k-th and the
    (top_k + 1)-th largest logit (inf when every expert is chosen; the softmax keeps the order, so this is
    how far the choice is from flipping) and the magnitude of the top_k-th logit."""
    z = -np.sort(-np.asarray(logits, np.float64), axis=-1)
    if top_k >= z.shape[-1]:
        return np.stack([np.full(z.shape[0], np.inf), np.abs(z[:, -1])], axis=-1)
    return np.stack([z[:, top_k - 1] - z[:, top_k], np.abs(z[:, top_k - 1])], axis=-1)
