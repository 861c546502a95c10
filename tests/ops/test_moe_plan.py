"""The sparse block's flat routing (``ops.moe.route_plan``) against a per-expert ``np.nonzero`` reference (the
dict the block used before), and both tables' combine against the per-expert loop it replaced, bit for bit
(the twins against each other: tests/hybrid/test_target_ops_twins.py); the one SwiGLU call over every routed
pair's gate/up output against one call per expert, on both op tables."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine.hybrid.ops import NUMBA_OPS, NUMPY_OPS
from onebit_engine.ops import op_sets
from onebit_engine.ops.moe import combine_numpy, route, route_plan

numba_only = pytest.mark.skipif(not op_sets.numba_installed(), reason="numba is not installed (the fast extra)")
F32 = np.float32


def routed_rows(experts, n):
    """The reference: expert id -> (rows, top-k ranks) among the first n rows that chose it, rows ascending,
    experts in ascending id - two numpy calls per expert, obviously right."""
    return {int(e): np.nonzero(experts[:n] == e) for e in np.unique(experts[:n])}


def _experts(rng, r, e, k):
    return np.stack([rng.permutation(e)[:k] for _ in range(r)]).astype(np.int64)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 17), st.integers(1, 40), st.integers(1, 10), st.integers(0, 2**31 - 1))
def test_route_plan_is_routed_rows_flattened(rows, num_experts, top_k, seed):
    top_k = min(top_k, num_experts)
    experts = _experts(np.random.default_rng(seed), rows, num_experts, top_k)
    for n in {0, 1, rows // 2, rows}:
        ids, offsets, r, k = route_plan(experts, n)
        hits = routed_rows(experts, n)
        assert ids.tolist() == list(hits) and offsets[0] == 0 and offsets[-1] == n * top_k
        for j, (rows_e, ranks_e) in enumerate(hits.values()):
            assert r[offsets[j]:offsets[j + 1]].tolist() == rows_e.tolist()
            assert k[offsets[j]:offsets[j + 1]].tolist() == ranks_e.tolist()


def _case(seed, r=9, e=12, k=3, d=33):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((r, e)).astype(F32) * 3
    experts, weights = route(logits, k, True)
    ids, offsets, rows, ranks = route_plan(experts, r)
    y = (rng.standard_normal((rows.shape[0], d)) * 10.0 ** rng.integers(-3, 4, (rows.shape[0], 1))).astype(F32)
    return experts, weights, rows, ranks, y


def _old_combine(out, experts, weights, y, n):
    """The per-expert numpy loop the sparse block ran before."""
    p = 0
    for rows, ranks in routed_rows(experts, n).values():
        out[rows] += weights[rows, ranks][:, None] * y[p:p + rows.shape[0]]
        p += rows.shape[0]


@pytest.mark.parametrize("table", [NUMPY_OPS, pytest.param(NUMBA_OPS, marks=numba_only)], ids=lambda t: t.name)
@pytest.mark.parametrize("seed", range(6))
def test_combine_equals_the_per_expert_loop_bitwise(table, seed):
    experts, weights, rows, ranks, y = _case(seed)
    start = np.random.default_rng(seed + 100).standard_normal((experts.shape[0], y.shape[1])).astype(F32)
    want, got = start.copy(), start.copy()
    _old_combine(want, experts, weights, y, experts.shape[0])
    table.moe_combine(got, y, rows, ranks, weights)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_combine_twins_see_the_order_of_the_pairs():
    """Power: the order within a row matters in float32, and the twin is pinned to it (a reversed pair
    order gives other bits here)."""
    out = np.zeros((1, 1), F32)
    y = np.array([[1.0], [1e8], [-1e8]], F32)
    rows, ranks, w = np.zeros(3, np.int64), np.arange(3), np.ones((1, 3), F32)
    combine_numpy(out, y, rows, ranks, w)
    rev = np.zeros((1, 1), F32)
    combine_numpy(rev, y[::-1].copy(), rows, ranks[::-1].copy(), w)
    assert out[0, 0] != rev[0, 0]


@pytest.mark.parametrize("table", [NUMPY_OPS, pytest.param(NUMBA_OPS, marks=numba_only)], ids=lambda t: t.name)
def test_one_swiglu_call_over_all_pairs_equals_one_per_expert(table):
    rng = np.random.default_rng(7)
    parts = [(rng.standard_normal((m, 2 * 37)) * 6).astype(F32) for m in (1, 3, 1, 2, 8, 1, 5)]
    together = table.silu_mul(np.concatenate(parts))
    apart = np.concatenate([table.silu_mul(p) for p in parts])
    assert np.array_equal(together.view(np.uint32), apart.view(np.uint32))
