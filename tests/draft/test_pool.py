"""The draft block's attention on the host-int pool (``draft.pool``) gives the one-thread kernel's bits:

* the pooled call, forced onto 2 and 3 threads (the work rule set to take any call), against
  ``kernels.attention_qkv`` for 1..8 rows, empty to long contexts, causal or not, windows, and query heads per
  KV head odd (a head alone) and even (heads in pairs);
* a whole draft (the compiled table with its attention pooled, host-int GEMMs on 2 threads) against the same
  draft on ``NUMBA_OPS``: every proposal's hidden rows and logits bitwise, over rounds that grow the context;
* the work rule keeps a small block on the caller's thread.
A job that wrote only some pairs, or mapped a job to the wrong row or KV head, fails the first test.
"""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.ops import row_jobs

pytestmark = pytest.mark.skipif(not row_jobs.row_jobs_ready(), reason="needs numba (the fast extra)")

F32 = np.float32


def same(a, b):
    return a.shape == b.shape and np.array_equal(np.asarray(a, F32).view(np.int32), np.asarray(b, F32).view(np.int32))


def _case(rng, b, s, hq, hk, hd=16, spare=7):
    """A block's fused q/k/v, norms, angles and a context cache with spare capacity (NaN: never read)."""
    qkv = (2 * rng.standard_normal((b, (hq + 2 * hk) * hd))).astype(F32)
    qn, kn = (rng.uniform(0.5, 1.5, hd).astype(F32) for _ in range(2))
    ang = rng.uniform(0, 50, (b, hd)).astype(F32)
    kt = np.full((hk, hd, s + spare), np.nan, F32)
    vc = np.full((hk, s + spare + 3, hd), np.nan, F32)  # values' capacity other than the keys'
    kt[:, :, :s] = rng.standard_normal((hk, hd, s))
    vc[:, :s] = rng.standard_normal((hk, s, hd))
    return qkv, qn, kn, np.cos(ang).astype(F32), np.sin(ang).astype(F32), kt, vc


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("b,s", [(1, 0), (3, 5), (8, 0), (8, 40), (5, 130)])
@pytest.mark.parametrize("causal,window", [(False, 0), (True, 0), (False, 3), (True, 7)])
@pytest.mark.parametrize("hq,hk", [(4, 2), (6, 2), (3, 3)])
def test_pooled_attention_is_the_one_thread_kernels_bits(pool_jobs, threads, b, s, causal, window, hq, hk):
    from onebit_engine.draft import kernels
    from onebit_engine.draft.pool import pooled_attention

    rng = np.random.default_rng(b * 1000 + s + 7 * hq)
    qkv, qn, kn, cos, sin, kt, vc = _case(rng, b, s, hq, hk)
    hd, scale = qn.shape[0], F32(0.25)
    ref = kernels.attention_qkv(qkv, hq, hk, qn, kn, cos, sin, F32(1e-6), kt, vc, s, causal, window, scale,
                                np.full((b, hq * hd), np.nan, F32))
    out = pooled_attention(pool_jobs, qkv, hq, hk, qn, kn, cos, sin, F32(1e-6), kt, vc, s, causal, window, scale,
                           np.full((b, hq * hd), np.nan, F32), threads)
    assert np.isfinite(ref).all()
    assert same(out, ref)
    assert len(pool_jobs.calls) == (1 if b * hk >= 2 else 0)  # one team call of b * hk pairs (1 pair: the direct call)
    if pool_jobs.calls:
        assert pool_jobs.calls[0][2] == b * hk and pool_jobs.calls[0][3] == min(threads, b * hk)


def test_a_draft_with_pooled_attention_proposes_the_numba_tables_bits(pool_jobs, tmp_path):
    from onebit_engine.draft import load_draft, write_synthetic_draft
    from onebit_engine.draft.ops import NUMBA_OPS, pooled_ops
    from onebit_engine.gemm import get_backend

    from .draft_helpers import make_target, make_taps

    target = make_target()
    folder = write_synthetic_draft(tmp_path, target.config, version=2, seed=4, block_size=8, num_layers=2, num_heads=4,
                                   sliding_window=6, is_causal=False, layer_types=["sliding_attention", "full_attention"])
    be = get_backend("host-int", threads=2)
    drafts = {name: load_draft(folder, target, backend=be, ops=table)
              for name, table in (("numba", NUMBA_OPS), ("pooled", pooled_ops(pool_jobs)))}
    states = {name: d.new_state() for name, d in drafts.items()}
    rng = np.random.default_rng(1)
    for n_ctx, n_draft in [(5, 3), (4, 7), (9, 5), (1, 7)]:
        taps = make_taps(rng, n_ctx)
        anchor = int(rng.integers(0, 60))
        got = {}
        for name, d in drafts.items():
            d.append_context(states[name], taps)
            got[name] = d.propose(states[name], anchor, n_draft)
        assert same(got["pooled"].hidden, got["numba"].hidden) and same(got["pooled"].logits, got["numba"].logits)
        assert np.array_equal(got["pooled"].tokens, got["numba"].tokens)
    assert len(pool_jobs.calls) >= 2 * 4  # every layer of every round went to the pool


def test_the_work_rule_keeps_a_small_block_on_the_callers_thread():
    from onebit_engine.draft.pool import attention_work_ns

    small = attention_work_ns(8, 4, 32, 20, 0)  # the built-in pair's scale: ~30 us
    big = attention_work_ns(8, 32, 128, 100, 0)  # a 27B-shaped draft: ~0.7 ms
    assert row_jobs.threads_for(8 * 2, small, 2) == 1
    assert row_jobs.threads_for(8 * 8, big, 2) == 2
    assert attention_work_ns(8, 32, 128, 10_000, 64) < attention_work_ns(8, 32, 128, 10_000, 0)  # a window bounds it
