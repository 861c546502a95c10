"""The compiled twins (numba) of ``ops.moe``: the whole routing of a sparse block's rows, and the combine
that adds every routed (row, expert) output into its row.

Why: a 35B-A3B token routes in each of 40 layers; numpy's ten calls a routing (softmax, a stable argsort,
``route_plan``'s sort and unique) cost ~85 us each, ~3.4 ms of a ~50 ms step, against ~5 us here. And a
verify of 8 rows reaches ~57 distinct experts a layer; a numpy fancy-index add per expert cost ~18 ms of
a ~300 ms verify (and 2.5 ms of a step).

``combine``: each element is ``out + w * y``, one float32 multiply then one add, pairs in the order given:
the same bits as the twin (tests/ops/test_moe_plan.py). ``route_rows``: the same rule (softmax in float32,
top k by probability, ties to the lowest id, optional renormalisation, pairs expert by expert and rows
ascending), but its exp is ``exp_fast.expf`` and its sums run in order, so its weights agree with the
numpy twin's to rounding, not bitwise (``ROUTE_RTOL`` in tests/hybrid/test_target_ops_twins.py); a row's
result depends on that row alone, as in the twin.
"""
from __future__ import annotations

import numpy as np

from .exp_fast import expf

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "cfdbf45a8c12f42c"


def _combine(out, y, rows, ranks, weights):
    """In place. Shapes: out [R, D]; y [P, D]; rows, ranks int64 [P]; weights float32 [R, top_k]."""
    D = out.shape[1]
    for p in range(rows.shape[0]):
        r = rows[p]
        w = weights[r, ranks[p]]
        for d in range(D):
            out[r, d] = out[r, d] + w * y[p, d]


def _route_rows(logits, n, top_k, norm):
    """``ops.moe.route_rows_numpy`` compiled. Shapes: logits float32 [R, E] (finite; the first n rows are
    routed), 1 <= top_k <= E -> weights float32 [n, top_k], ids int64 [m] (distinct experts, ascending),
    offsets [m + 1], rows and ranks int64 [n * top_k] (expert by expert, rows ascending)."""
    E = logits.shape[1]
    experts = np.empty((n, top_k), np.int64)
    weights = np.empty((n, top_k), np.float32)
    p = np.empty(E, np.float32)
    taken = np.zeros(E, np.bool_)
    counts = np.zeros(E, np.int64)
    for t in range(n):
        z = logits[t]
        m = z[0]
        for e in range(1, E):
            m = z[e] if z[e] > m else m
        s = np.float32(0.0)
        for e in range(E):
            v = expf(z[e] - m)
            p[e] = v
            s += v
        for e in range(E):
            p[e] = p[e] / s
            taken[e] = False
        ws = np.float32(0.0)
        for j in range(top_k):  # the largest untaken probability; strict '>' keeps the lowest id of a tie
            best = -1
            for e in range(E):
                if not taken[e] and (best < 0 or p[e] > p[best]):
                    best = e
            taken[best] = True
            experts[t, j] = best
            weights[t, j] = p[best]
            ws += p[best]
            counts[best] += 1
        if norm:
            for j in range(top_k):
                weights[t, j] = weights[t, j] / ws
    m = 0
    for e in range(E):
        m += counts[e] > 0
    ids = np.empty(m, np.int64)
    offsets = np.zeros(m + 1, np.int64)
    slot = np.empty(E, np.int64)  # the next free pair of each expert
    j = 0
    for e in range(E):
        if counts[e]:
            ids[j] = e
            slot[e] = offsets[j]
            offsets[j + 1] = offsets[j] + counts[e]
            j += 1
    rows = np.empty(n * top_k, np.int64)
    ranks = np.empty(n * top_k, np.int64)
    for t in range(n):  # rows ascending, so each expert's pairs come rows ascending
        for r in range(top_k):
            q = slot[experts[t, r]]
            rows[q] = t
            ranks[q] = r
            slot[experts[t, r]] = q + 1
    return weights, ids, offsets, rows, ranks


if nb is not None:
    _jit = nb.njit(cache=True, nogil=True, error_model="numpy")
    combine = _jit(_combine)
    route_rows = _jit(_route_rows)
else:
    combine = route_rows = None
