"""The DFlash 2 selector's kernels: top-k candidates per row and the greedy walk over them."""
from __future__ import annotations

import numpy as np

from ._numba import jit

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "592b05135390c262"


@jit
def _ranks_above(a, b):
    """Does value a rank above b, a having the higher id? Larger first, NaN last (a stable sort of
    ``-logits``): a NaN never does, anything else does over a NaN."""
    return a > b or (np.isnan(b) and not np.isnan(a))


_TOPK_CHUNK = 32


@jit
def top_candidates_into(logits, k, cand, unary):
    """Top-k per row, best first, ties to the lower id: bitwise ``selector.top_candidates_slow``.

    Shapes: logits [n, V]; cand int64 [n, k], unary [n, k] (written). One pass per row keeps a sorted
    list of k; ids arrive in increasing order, so a value equal to one in the list ranks below it.
    A chunk of 32 ids is first counted against the k-th value (a vectorised loop) and skipped when
    none is larger: only the few chunks holding a new candidate are walked one id at a time.
    """
    n, v = logits.shape
    for t in range(n):
        row = logits[t]
        top_c = cand[t]
        top_u = unary[t]
        for i in range(k):  # the first k ids, insertion-sorted
            _insert(row[i], i, i, top_u, top_c)
        for c0 in range(k, v, _TOPK_CHUNK):
            ch = row[c0 : c0 + _TOPK_CHUNK]
            kth = top_u[k - 1]
            if not np.isnan(kth):  # a NaN never ranks above a number: count the numbers above kth
                above = 0
                for i in range(ch.shape[0]):
                    above += ch[i] > kth
                if above == 0:
                    continue
            for i in range(ch.shape[0]):
                if _ranks_above(ch[i], top_u[k - 1]):
                    _insert(ch[i], c0 + i, k - 1, top_u, top_c)


@jit
def _insert(x, i, pos, top_u, top_c):
    """Put (x, id i) at ``pos`` of the sorted list and move it up past everything it ranks above."""
    while pos > 0 and _ranks_above(x, top_u[pos - 1]):
        top_u[pos] = top_u[pos - 1]
        top_c[pos] = top_c[pos - 1]
        pos -= 1
    top_u[pos] = x
    top_c[pos] = i


@jit
def pair_scores(prev_row, hp_row, succ, cand_row, out):
    """``sum_r prev_row[r] * hp_row[r] * succ[cand, r]`` for each candidate, a sequential float32 sum.

    Shapes: prev_row, hp_row [r]; succ [V, r]; cand_row int64 [k]; out [k] (written, returned).
    """
    r = hp_row.shape[0]
    for j in range(cand_row.shape[0]):
        srow = succ[cand_row[j]]
        acc = np.float32(0.0)
        for i in range(r):
            acc += (prev_row[i] * hp_row[i]) * srow[i]
        out[j] = acc
    return out


@jit
def greedy_walk_into(unary, hp, pred, succ, cand, anchor, tokens):
    """The greedy selector walk (argmax, first index on ties like ``np.argmax``).

    Shapes: unary [n, k]; hp [n, r]; pred, succ [V, r]; cand int64 [n, k]; tokens int64 [n] (written).
    """
    n, k = cand.shape
    pair = np.empty(k, np.float32)
    prev = anchor
    for t in range(n):
        pair_scores(pred[prev], hp[t], succ, cand[t], pair)
        best = 0
        best_score = unary[t, 0] + pair[0]
        for j in range(1, k):
            score = unary[t, j] + pair[j]
            if score > best_score:
                best, best_score = j, score
        prev = cand[t, best]
        tokens[t] = prev
    return tokens
