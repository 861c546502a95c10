"""Draft round benchmarks on the built-in trained pair (figures only, no timed asserts).

Skipped unless benchmarks are asked for: ``--benchmark-enable`` or ``ONEBIT_BENCH=1``.

Groups (every test runs on a draft state holding ``CONTEXT`` committed rows):

* ``draft-propose-<backend>``: ``Draft.propose(state, anchor, n)`` for n = 7 (the loop's k) and 3, on
  both op sets (``ops="numpy"``: the readable twins; ``"numba"``: the compiled kernels), beside one
  plain target step (1 row, row set 1), the yardstick of issue 15 (a round at <= 0.3 steps).
* ``draft-append-<backend>``: ``Draft.append_context`` of 1, 3 and 8 accepted rows' taps.

``tools/draft_report.py`` interleaves the same calls against an older draft; docs/draft.md ("Cost of a
round") quotes it.

    PYTHONPATH=src OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m pytest tests/bench/test_bench_draft.py \
        -p no:xdist -p no:cacheprovider --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from onebit_engine.default_model import builtin_paths
from onebit_engine.draft import kernels, load_draft
from onebit_engine.gemm import get_backend
from onebit_engine.hybrid import load_target

BACKENDS = ["reference", "host-int"]
OPS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(kernels.nb is None, reason="numba is not installed"))]
CONTEXT = 128  # committed rows before the timed calls (a prompt plus a few rounds)


@pytest.fixture(scope="module", autouse=True)
def _only_when_asked(request):
    if not (request.config.getoption("benchmark_enable", False) or os.environ.get("ONEBIT_BENCH") == "1"):
        pytest.skip("draft benchmarks run only with --benchmark-enable or ONEBIT_BENCH=1")


@pytest.fixture(scope="module")
def pair():
    """{backend: (target at row set 8, target at row set 1)}."""
    tdir, _, _ = builtin_paths()
    return {b: (load_target(tdir, backend=get_backend(b), row_set=8), load_target(tdir, backend=get_backend(b), row_set=1))
            for b in BACKENDS}


def _draft(pair, backend, ops):
    target = pair[backend][0]
    draft = load_draft(builtin_paths()[1], target, backend=target.backend, row_set=8, ops=ops)
    state = draft.new_state()
    taps = (2 * np.random.default_rng(0).standard_normal((CONTEXT, target.config.num_hidden_layers, target.config.hidden_size)))
    draft.append_context(state, taps.astype(np.float32))
    return draft, state


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [7, 3])
@pytest.mark.parametrize("ops", OPS)
def test_propose(benchmark, pair, backend, n, ops):
    benchmark.group = f"draft-propose-{backend}"
    draft, state = _draft(pair, backend, ops)
    draft.propose(state, 5, n)  # compile / load the kernels outside the timing
    benchmark(draft.propose, state, 5, n)
    benchmark.extra_info.update(kind="draft-propose", backend=backend, ops=ops, n_draft=n, context=CONTEXT)


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_target_step(benchmark, pair, backend):
    """One plain decode step at row set 1, on a scratch copy of a state holding CONTEXT tokens."""
    benchmark.group = f"draft-propose-{backend}"
    target = pair[backend][1]
    state = target.new_state()
    target.forward(list(range(1, CONTEXT + 1)), state)

    target.forward([7], state.copy())
    benchmark.pedantic(target.forward, setup=lambda: (([7], state.copy()), {}), rounds=200)
    benchmark.extra_info.update(kind="plain-step", backend=backend, row_set=1, context=CONTEXT)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("ops", OPS)
def test_append_context(benchmark, pair, backend, rows, ops):
    benchmark.group = f"draft-append-{backend}"
    draft, state = _draft(pair, backend, ops)
    t = pair[backend][0].config
    taps = (2 * np.random.default_rng(rows).standard_normal((rows, t.num_hidden_layers, t.hidden_size))).astype(np.float32)

    def append():
        draft.append_context(state, taps)
        state.truncate(CONTEXT)

    append()
    benchmark(append)
    benchmark.extra_info.update(kind="draft-append", backend=backend, ops=ops, rows=rows, context=CONTEXT)
