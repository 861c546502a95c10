"""DFlash 2 candidate-path selector (REF-NEW ``CandidateSelector.select``; docs/draft.md, "DFlash 2 additions").

For the draft rows t = 1..n (logits z[t], post-norm hidden h[t])::

    cand[t] = top-k(z[t]);   U[t, j] = z[t, cand[t, j]]
    hp[t]   = W_hp h[t]                                   # rank r
    prev    = anchor
    score_j = U[t, j] + sum_r A[prev, r] hp[t, r] Bc[cand[t, j], r]   # A predecessor, Bc successor codebook
    greedy: j* = argmax score;   T > 0: q_t = softmax(score / T) over the k candidates, j* ~ q_t
    token_t = prev = cand[t, j*]

Only this walk is sequential. The draft distribution of row t is q_t spread over the full vocabulary
(zeros outside the k candidates); at T = 0 it is the one-hot of the greedy choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..gemm import Linear
from ..ops.sampling import draw

F32 = np.float32


@dataclass(frozen=True)
class CandidateSelector:
    """``hidden_projection`` Linear H -> r; codebooks [V, r] (float32 arrays, or lookup tables kept in their
    stored form: rows widened when read); ``top_k`` candidates per row."""

    hidden_projection: Linear
    predecessor_codebook: np.ndarray
    successor_codebook: np.ndarray
    top_k: int

    def select(
        self, hidden: np.ndarray, logits: np.ndarray, anchor: int, temperature: float, rng: np.random.Generator | None,
        ops: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Walk the candidate lattice. Shapes: hidden [n, H], logits [n, V] -> (tokens int64 [n], q float32 [n, V]).

        ``ops`` supplies ``top_candidates``, ``pair_scores`` and ``greedy_walk`` (a ``draft.ops.DraftOps``);
        None means this module's numpy functions."""
        top, pair, walk = (top_candidates, pair_scores, greedy_walk) if ops is None else (
            ops.top_candidates, ops.pair_scores, ops.greedy_walk)
        cand, unary = top(logits, self.top_k)
        hp = self.hidden_projection(hidden)  # [n, r]
        n, v = logits.shape
        q = np.zeros((n, v), F32)
        # The walk reads only the anchor's and the candidates' codebook rows: gather them (a codebook may be a
        # lookup table kept in its stored form, quant.table.RowTable) and walk on local ids - the same rows,
        # the same arithmetic, the same bits as walking the whole tables.
        ids = np.unique(np.concatenate([[int(anchor)], cand.ravel()]))  # sorted
        pred, succ = _rows(self.predecessor_codebook, ids), _rows(self.successor_codebook, ids)
        local, start = np.searchsorted(ids, cand), int(np.searchsorted(ids, int(anchor)))
        if temperature <= 0:
            tokens = ids[walk(unary, hp, pred, succ, local, start)]
            q[np.arange(n), tokens] = 1.0
            return tokens, q
        tokens = np.empty(n, np.int64)
        prev = start
        for t in range(n):  # sequential: each step's candidate set is scored against the last pick
            score = unary[t] + pair(pred[prev], hp[t], succ, local[t])
            qt = softmax(score / F32(temperature))
            j = sample_index(qt, rng)
            q[t, cand[t]] = qt
            prev = int(local[t, j])
            tokens[t] = ids[prev]
        return tokens, q

    def select_slow(self, hidden: np.ndarray, logits: np.ndarray, anchor: int) -> np.ndarray:
        """Greedy twin by brute force: score every top-k candidate with explicit float64 loops.

        Shapes: hidden [n, H], logits [n, V] -> tokens int64 [n].
        """
        hp = self.hidden_projection(hidden).astype(np.float64)
        n, v = logits.shape
        tokens = np.empty(n, np.int64)
        prev = int(anchor)
        for t in range(n):
            order = sorted(range(v), key=lambda i: (-float(logits[t, i]), i))[: self.top_k]
            best, best_score = -1, -np.inf
            pred = np.asarray(self.predecessor_codebook[prev], np.float64)  # row prev, [r]
            for tok in order:
                s = float(logits[t, tok])
                succ = np.asarray(self.successor_codebook[tok], np.float64)
                for r in range(hp.shape[1]):
                    s += float(pred[r]) * hp[t, r] * float(succ[r])
                if s > best_score:
                    best, best_score = tok, s
            tokens[t] = prev = best
        return tokens


def _rows(table, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` of a codebook as float32 [len(ids), r] (an array or a ``RowTable``)."""
    return np.ascontiguousarray(table[ids], dtype=F32)


def top_candidates(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k per row, best first, ties to the lower id. Shapes: [n, V] -> (cand int64 [n, k], unary [n, k]).

    Same result as a stable full argsort (``top_candidates_slow``) at the cost of a partition: everything
    above the k-th value, then the lowest ids equal to it."""
    n, v = logits.shape
    k = min(k, v)
    kth = -np.partition(-logits, k - 1, axis=-1)[:, k - 1 : k]  # [n, 1] the k-th largest value
    cand = np.empty((n, k), np.int64)
    for t in range(n):
        above = np.flatnonzero(logits[t] > kth[t])
        ties = np.flatnonzero(logits[t] == kth[t])[: k - len(above)]
        idx = np.concatenate([above, ties])
        cand[t] = idx[np.lexsort((idx, -logits[t, idx]))]
    return cand, np.take_along_axis(logits, cand, axis=-1)


def pair_scores(prev_row: np.ndarray, hp_row: np.ndarray, succ: np.ndarray, cand_row: np.ndarray) -> np.ndarray:
    """Pairwise scores ``sum_r prev[r] * hp[r] * succ[cand, r]``. Shapes: [r], [r], [V, r], int [k] -> [k]."""
    return (prev_row * hp_row) @ succ[cand_row].T


def greedy_walk(unary: np.ndarray, hp: np.ndarray, pred: np.ndarray, succ: np.ndarray, cand: np.ndarray, anchor: int) -> np.ndarray:
    """The greedy walk (argmax per step, first index on ties).

    Shapes: unary [n, k]; hp [n, r]; pred, succ [V, r]; cand int [n, k] -> tokens int64 [n]."""
    tokens = np.empty(cand.shape[0], np.int64)
    prev = int(anchor)
    for t in range(cand.shape[0]):
        score = unary[t] + pair_scores(pred[prev], hp[t], succ, cand[t])
        prev = tokens[t] = int(cand[t, int(np.argmax(score))])
    return tokens


def top_candidates_slow(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The obviously correct twin: a stable full sort."""
    cand = np.argsort(-logits, axis=-1, kind="stable")[:, :k].astype(np.int64)
    return cand, np.take_along_axis(logits, cand, axis=-1)


def softmax(x: np.ndarray) -> np.ndarray:
    """float32 softmax over the last axis (max-subtracted)."""
    e = np.exp((x - x.max(axis=-1, keepdims=True)).astype(F32))
    return (e / e.sum(axis=-1, keepdims=True, dtype=F32)).astype(F32)


def sample_index(p: np.ndarray, rng: np.random.Generator | None) -> int:
    """One draw from the categorical ``p`` [n]: the engine's one inverse-CDF sampler (``sampling.draw``)."""
    if rng is None:
        raise ValueError("sampling at temperature > 0 needs rng=np.random.Generator; pass one (e.g. np.random.default_rng(seed))")
    return draw(p, rng)
