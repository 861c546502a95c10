"""Row-independent ops on the host-int pool (``ops.row_jobs``) give the bits of their one-thread functions:

* each op, forced onto 2 and 3 threads (the work rule set to take any call), against the function the
  one-thread path runs, for 2..9 rows; the delta-net's prep also from a random conv state (rows 0..2 read it)
  and with and without recorded rows; its conv state after the call;
* the whole target: a verify and a step on the delta.c table with the row jobs forced, bitwise against the
  numba table on one thread;
* the work rule: one row, one thread or little work stay on the caller's thread.
A pool that ran only half the jobs fails these tests (checked by hand when they were written).
"""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.ops import row_jobs

pytestmark = pytest.mark.skipif(not row_jobs.row_jobs_ready(), reason="needs numba (the fast extra)")

F32 = np.float32


def same(a, b):
    return a.shape == b.shape and np.array_equal(np.asarray(a, F32).view(np.int32), np.asarray(b, F32).view(np.int32))


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("R", [2, 3, 8, 9])
def test_silu_and_norm_on_the_pool_are_their_one_thread_bits(pool_jobs, threads, R):
    from onebit_engine.ops.norm_fast import rms_norm_rows, silu_mul

    rng = np.random.default_rng(R)
    y = rand(rng, R, 2 * 300, scale=4.0)
    ref = np.empty((R, 300), F32)
    silu_mul(y, ref)
    assert same(pool_jobs.silu_mul(y, threads), ref)
    x, w = rand(rng, R, 257), rand(rng, 257)
    for centred in (True, False):
        ref = np.empty_like(x)
        rms_norm_rows(x, w, F32(1e-6), centred, ref)
        assert same(pool_jobs.norm(x, w, 1e-6, centred, threads), ref)
    assert len(pool_jobs.calls) == 3


def _prep_case(rng, n, R, nk=2, dk=16, dv=8, HV=4):
    C = 2 * nk * dk + HV * dv
    proj = rand(rng, R, C + HV * dv + 2 * HV, scale=2.0)
    conv, w = rand(rng, C, 3), rand(rng, C, 4)
    return proj, conv, w, -rng.random(HV).astype(F32), rand(rng, HV), nk, dk, dv, HV


@pytest.mark.parametrize("record", [False, True])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_the_delta_nets_prep_and_finish_on_the_pool_are_the_row_loops_bits(pool_jobs, n, record):
    from onebit_engine.ops.gated_delta_fast import gdn_mixer_finish, gdn_mixer_prep

    rng = np.random.default_rng(10 * n + record)
    R = n + 2  # padded rows past n, as a row set gives
    proj, conv, w, neg_A, dt_bias, nk, dk, dv, HV = _prep_case(rng, n, R)
    C = conv.shape[0]
    recs = [(np.zeros((n if record else 0, C), F32), np.zeros((n if record else 0, HV), F32),
             np.zeros((n if record else 0, HV), F32)) for _ in range(2)]
    c_ref, c_got = conv.copy(), conv.copy()
    ref = gdn_mixer_prep(proj, n, c_ref, w, neg_A, dt_bias, nk, dk, dv, HV, *recs[0], np.zeros((0, C, 3), F32))
    got = pool_jobs.mixer_prep(proj, n, c_got, w, neg_A, dt_bias, nk, dk, dv, HV, *recs[1], 2)
    assert got is not None and len(pool_jobs.calls) == 1
    assert all(same(a, b) for a, b in zip(got, ref))
    assert same(c_got, c_ref)  # the conv state advanced by the n rows
    assert all(same(a, b) for a, b in zip(recs[0], recs[1]))
    o, norm_w = rand(rng, n, HV, dv), rand(rng, dv)
    out_ref, out_got = np.full((R, HV * dv), 7.0, F32), np.full((R, HV * dv), 7.0, F32)
    gdn_mixer_finish(proj, n, o, norm_w, F32(1e-6), C, out_ref)
    pool_jobs.mixer_finish(proj, n, o, norm_w, F32(1e-6), C, out_got, 2)
    assert same(out_got, out_ref) and len(pool_jobs.calls) == 2  # rows past n zeroed


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("n,length,heads,kv_heads", [(1, 0, 4, 2), (1, 37, 6, 1), (3, 5, 4, 4), (8, 20, 6, 2)])
def test_attention_pairs_on_the_pool_are_the_one_thread_bits(pool_jobs, threads, n, length, heads, kv_heads):
    """Every (row, head) pair a job: the output (rows past n zeroed), the appended keys and values and the cache
    before them, bit for bit the one-thread function's; a row attends up to its own key, not past it."""
    from onebit_engine.ops.attention_fast import attention_rows

    rng = np.random.default_rng(100 * n + length + heads)
    hd, cap, R = 16, length + n + 3, n + 2
    qkv = rand(rng, R, heads * 2 * hd + 2 * kv_heads * hd, scale=2.0)
    keys, values = rand(rng, kv_heads, hd, cap), rand(rng, kv_heads, cap, hd)
    q_norm, k_norm = rand(rng, hd, scale=0.3), rand(rng, hd, scale=0.3)
    freqs = (1.0 / 10000.0 ** (np.arange(hd // 4) / (hd // 4))).astype(F32)
    pos, eps, scale = length + 2, 1e-6, hd ** -0.5
    ref_k, ref_v, ref = keys.copy(), values.copy(), np.full((R, heads * hd), 7.0, F32)
    attention_rows(qkv, n, pos, length, ref_k, ref_v, q_norm, k_norm, F32(eps), freqs, heads, F32(scale), ref)
    got_k, got_v, got = keys.copy(), values.copy(), np.full((R, heads * hd), 7.0, F32)
    pool_jobs.attention(qkv, n, pos, length, got_k, got_v, q_norm, k_norm, eps, freqs, heads, scale, got, threads)
    assert len(pool_jobs.calls) == 1 and pool_jobs.calls[0][2] == n * heads  # one pooled call, a job a pair
    assert same(got, ref) and same(got_k, ref_k) and same(got_v, ref_v)
    assert not np.all(got[:n] == 0) and np.all(got[n:] == 0)

def test_the_work_rule_keeps_small_calls_on_the_callers_thread():
    t = row_jobs.threads_for
    assert t(1, 1e9, 2) == 1 and t(8, 1e9, 1) == 1  # one row, one thread
    assert t(8, 0.9 * 2 * row_jobs.WORK_NS_PER_THREAD, 2) == 1 and t(8, 2 * row_jobs.WORK_NS_PER_THREAD, 2) == 2
    assert t(3, 1e9, 8) == 3  # at most a thread a row
    rj = row_jobs.RowJobs(lambda *a: pytest.fail("the pool was used"), data_off=-1)  # no object-address offset
    y = np.ones((8, 2 * 4096), F32)
    assert rj.silu_mul(y, 2).shape == (8, 4096)


def test_a_target_verify_with_row_jobs_is_the_numba_tables_bits(pool_jobs, monkeypatch):
    """A small hybrid target on the delta.c table, every row op forced onto 2 threads, against the numba table."""
    from onebit_engine.hybrid import ops as target_ops
    from onebit_engine.hybrid.delta_native import native_delta
    from onebit_engine.gemm import get_backend
    from onebit_engine.hybrid.synthetic import random_target

    nd = native_delta()
    if nd is None:
        pytest.skip("delta.c does not run here")
    pooled, run = [], row_jobs.RowJobs.run

    def counted(self, job, *rest):
        pooled.append(job)
        run(self, job, *rest)

    monkeypatch.setattr(row_jobs.RowJobs, "run", counted)
    outs = {}
    for name, table in (("numba", target_ops.NUMBA_OPS), ("native", target_ops.native_delta_ops(nd))):
        t = random_target(seed=3, backend=get_backend("host-int", threads=2), ops=table)
        st = t.new_state()
        t.forward([3, 1, 4, 1, 5], st)
        v = t.verify([9, 2, 6, 5, 3, 5], st)
        t.commit(st, 4)  # a partial accept: the replay
        s = t.forward([8], st)
        outs[name] = (v.logits, v.hidden, s.logits, st.layers[0].recurrent, st.layers[0].conv)
    assert all(same(a, b) for a, b in zip(outs["numba"], outs["native"]))
    assert {j.__name__ for j in pooled} >= {"_silu_job", "_norm_job", "_finish_job", "_prep_job", "_attend_job"}
