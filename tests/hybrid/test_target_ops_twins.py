"""The target's two op tables (``hybrid/ops.py``), op by op: each compiled op against its numpy twin.

Bitwise where the compiled op only moves values (the conv window, the recorded pre-conv rows, the
values written to the KV cache); within a named tolerance where it sums in float32 loops instead of
numpy's pairwise reductions or takes exp from ``ops/exp_fast``. ``test_target_fast.py`` pins the whole
model on either table; the exact claims (verify == steps, every commit path) run on both tables in
``test_batch_invariance.py``.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from onebit_engine.errors import ConfigError, StateError
from onebit_engine.hybrid import ops as target_ops
from onebit_engine.hybrid.ops import NUMBA_OPS, NUMPY_OPS, TargetOps, resolve_ops
from onebit_engine.hybrid.state import VerifyRecord
from onebit_engine.hybrid.synthetic import random_target, tiny_config
from onebit_engine.ops import op_sets
from onebit_engine.ops.kv_cache import KVCache

numba_only = pytest.mark.skipif(not op_sets.numba_installed(), reason="numba is not installed (the fast extra)")

F32 = np.float32
R = 8  # one row set
NORM_RTOL = 1e-6  # zero-centred RMSNorm rows: a sequential vs pairwise float32 mean, then one division (measured 2.3e-7)
SILU_RTOL = 5e-7  # silu(g) * u: the compiled exp within 1.5 ulp of exp, numpy's within ~1 ulp (measured 5.5e-8)
GDN_RTOL = 2e-6  # mixer output and states over <= 8 rows, relative to max(1, max |x|) (measured 7.1e-7, 9.5e-7)
GATE_ATOL = 5e-7  # alpha, beta in (0, 1]: sigmoid and exp(-A softplus) with the compiled exp (measured 1.2e-7)
ROUTE_RTOL = 1e-6  # routing weights: the compiled exp and an in-order sum of E probabilities (measured 2.0e-7)
ATTN_ATOL = 2e-6  # attention rows (|o| <= max |v| ~ 4) and normed, rotated keys (measured 6.0e-7, 4.8e-7)


def _layers(seed: int, kv_heads: int, conv_k: int, v_heads: int):
    cfg = tiny_config(num_key_value_heads=kv_heads, linear_conv_kernel_dim=conv_k, linear_num_value_heads=v_heads)
    t = random_target(cfg, seed, ops="numpy")
    gdn = next(layer.mixer for layer in t.layers if layer.kind == "linear_attention")
    attn = next(layer.mixer for layer in t.layers if layer.kind == "full_attention")
    return cfg, gdn, attn


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(a))))) if a.size else 0.0


def _gdn_case(seed: int, n: int, v_heads: int, conv_k: int):
    """A delta-net layer, one row set of in_proj output (n real rows) and a warm state."""
    rng = np.random.default_rng(seed)
    _, gdn, _ = _layers(seed, 2, conv_k, v_heads)
    p = gdn.params
    proj = (2 * rng.standard_normal((R, p.splits[-1] + p.n_v_heads))).astype(F32)
    st0 = gdn.new_state()
    st0.conv[:] = rng.standard_normal(st0.conv.shape)
    st0.recurrent[:] = 0.3 * rng.standard_normal(st0.recurrent.shape)
    return gdn, proj, st0


@numba_only
@given(st.integers(0, 2**16), st.integers(1, R), st.sampled_from([2, 4]), st.sampled_from([2, 4]), st.booleans())
def test_gdn_rows_twins_agree(seed, n, v_heads, conv_k, checkpoints):
    """The mixer between its projections: output, advanced state and, in a verify, every recorded row."""
    gdn, proj, st0 = _gdn_case(seed, n, v_heads, conv_k)
    out, states, records = [], [], []
    for table in (NUMPY_OPS, NUMBA_OPS):
        st, rec = st0.copy(), VerifyRecord.begin(40, n, {3: st0}, checkpoints)
        out.append(table.gdn_rows(proj, n, st, gdn.params, rec.rows_of(3, 40, n)))
        states.append(st)
        records.append(rec)
    (a, b), (sa, sb), (ra, rb) = out, states, records
    assert a.shape == b.shape == (R, gdn.params.n_v_heads * gdn.params.dv) and b.dtype == F32
    assert not a[n:].any() and not b[n:].any()  # padding rows give zero
    assert _rel(a, b) <= GDN_RTOL
    assert np.array_equal(sa.conv, sb.conv)  # the conv window is a shift of the inputs: exact
    assert _rel(sa.recurrent, sb.recurrent) <= GDN_RTOL
    assert np.array_equal(ra.mixed[3], proj[:n, : gdn.params.splits[1]]) and np.array_equal(rb.mixed[3], ra.mixed[3])
    for name in ("alpha", "beta"):
        np.testing.assert_allclose(getattr(rb, name)[3], getattr(ra, name)[3], rtol=0, atol=GATE_ATOL)
    assert (ra.per_row is None) == (rb.per_row is None) == (not checkpoints)
    for x, y in zip(*(r.per_row[3] if checkpoints else [] for r in (ra, rb))):
        assert np.array_equal(x.conv, y.conv) and _rel(x.recurrent, y.recurrent) <= GDN_RTOL
    if checkpoints:  # the last row's checkpoint is the state the call left
        assert np.array_equal(ra.per_row[3][-1].recurrent, sa.recurrent)


@numba_only
@given(st.integers(0, 2**16), st.integers(1, 12), st.sampled_from([2, 4]), st.sampled_from([2, 4]))
def test_gdn_replay_twins_agree(seed, rows, v_heads, conv_k):
    """A commit's replay from recorded inputs: the same state on either table."""
    rng = np.random.default_rng(seed)
    gdn, _, st0 = _gdn_case(seed, 1, v_heads, conv_k)
    mixed = rng.standard_normal((rows, gdn.params.splits[1])).astype(F32)
    alpha, beta = rng.uniform(0.05, 1, (2, rows, gdn.params.n_v_heads)).astype(F32)
    sa, sb = st0.copy(), st0.copy()
    NUMPY_OPS.gdn_replay(sa, mixed, alpha, beta, gdn.params)
    NUMBA_OPS.gdn_replay(sb, mixed, alpha, beta, gdn.params)
    assert np.array_equal(sa.conv, sb.conv) and not np.array_equal(sa.conv, st0.conv)
    assert _rel(sa.recurrent, sb.recurrent) <= GDN_RTOL


def _native_tables():
    """The compiled table with the delta rule in delta.c on each path this machine runs, and on the AVX-512
    emulation (so the wrapper is checked where the CPU lacks AVX-512)."""
    from onebit_engine.gemm.host_int import native
    from onebit_engine.hybrid.delta_native import NativeDelta

    out = []
    for variant, name in (("main", "avx2"), ("main", "avx512"), ("emulated", "avx512")):
        try:
            lib = native.load(variant)
        except native.NativeUnavailable:
            continue
        if lib.delta_path_ok(native.DELTA_PATHS[name]):
            out.append(target_ops.native_delta_ops(NativeDelta(lib, native.DELTA_PATHS[name], f"{variant}-{name}")))
    return out


@numba_only
@given(st.integers(0, 2**16), st.integers(0, R), st.sampled_from([2, 4]), st.booleans(), st.booleans(), st.integers(0, 12),
       st.sampled_from([1, 2]))
def test_native_delta_tables_are_numbas_bitwise(seed, n, v_heads, checkpoints, from_snapshot, replayed, threads):
    """The mixer (with its records and a verify's snapshot start) and the replay, on the tables whose heads run
    in delta.c (on 1 or 2 threads): the bits of ``NUMBA_OPS``, the start state left as it was."""
    tables = _native_tables()
    if not tables:
        pytest.skip("the host-int library does not build here")
    gdn, proj, st0 = _gdn_case(seed, max(n, 1), v_heads, 4)
    snap = st0.copy()
    rng = np.random.default_rng(seed)
    mixed = rng.standard_normal((replayed, gdn.params.splits[1])).astype(F32)
    alpha, beta = rng.uniform(0.05, 1, (2, replayed, gdn.params.n_v_heads)).astype(F32)
    want = None
    for table in [NUMBA_OPS] + tables:
        st = gdn.new_state() if from_snapshot else st0.copy()  # from a snapshot: st is a buffer to write
        rec = VerifyRecord.begin(40, n, {3: snap}, checkpoints)
        out = table.gdn_rows(proj, n, st, gdn.params, rec.rows_of(3, 40, n), snap if from_snapshot else None,
                             threads=threads)
        rp = st0.copy()
        table.gdn_replay(rp, mixed, alpha, beta, gdn.params, threads=threads)
        got = [out, st.conv, st.recurrent, rec.mixed[3], rec.alpha[3], rec.beta[3], rp.conv, rp.recurrent]
        got += [x.recurrent for x in rec.per_row[3]] if checkpoints else []
        if want is None:
            want = got
        else:
            assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(want, got)), table.delta
        assert np.array_equal(snap.recurrent, st0.recurrent) and np.array_equal(snap.conv, st0.conv)


def _attention_case(seed: int, kv_heads: int, cached: int):
    rng = np.random.default_rng(seed)
    cfg, _, attn = _layers(seed, kv_heads, 4, 4)
    hkv, hd = cfg.num_key_value_heads, cfg.head_dim
    qkv = (2 * rng.standard_normal((R, attn.params.splits[-1] + hkv * hd))).astype(F32)
    kv = attn.new_state()  # the target's own cache layout (keys_last)
    if cached:
        kv.append(*rng.standard_normal((2, hkv, cached, hd)).astype(F32))
    return attn, qkv, kv


def _attention_both(attn, qkv, n, kv, pos, tables=(NUMPY_OPS, NUMBA_OPS)):
    outs, caches = [], []
    for table in tables:
        c = kv.copy()
        outs.append(table.attention_rows(qkv, n, c, pos, attn.params))
        caches.append(c)
    return outs, caches


@numba_only
def test_compiled_attention_refuses_a_positions_second_cache():
    """The compiled loop reads keys [H, hd, capacity]: a cache of the other layout is refused before any
    write (indexed the wrong way, the append would land outside the buffer)."""
    attn, qkv, _ = _attention_case(0, 2, 3)
    kv = KVCache(attn.params.n_kv_heads, attn.params.head_dim)
    with pytest.raises(StateError, match="keys_last"):
        NUMBA_OPS.attention_rows(qkv, 2, kv, 0, attn.params)
    assert kv.length == 0 and kv.capacity == 0


@numba_only
@given(st.integers(0, 2**16), st.integers(1, R), st.sampled_from([1, 2, 4]), st.integers(0, 80))
def test_attention_rows_twins_agree(seed, n, kv_heads, cached):
    """Gated attention between its projections (GQA 4:1, 2:1, 1:1), past the cache's first growth: the
    rows, and the keys and values each twin appended."""
    attn, qkv, kv = _attention_case(seed, kv_heads, cached)
    (a, b), (ca, cb) = _attention_both(attn, qkv, n, kv, cached)
    assert a.shape == b.shape == (R, attn.params.n_heads * attn.params.head_dim) and b.dtype == F32
    assert not a[n:].any() and not b[n:].any()
    np.testing.assert_allclose(b, a, rtol=0, atol=ATTN_ATOL)
    assert ca.length == cb.length == cached + n
    (ka, va), (kb, vb) = ca.prefix(ca.length), cb.prefix(cb.length)
    assert np.array_equal(va, vb) and np.array_equal(ka[:, :cached], kb[:, :cached])
    np.testing.assert_allclose(kb, ka, rtol=0, atol=ATTN_ATOL)


@numba_only
@pytest.mark.parametrize("d", [1, 7, 64, 256])
def test_norm_and_silu_mul_twins_agree(d):
    rng = np.random.default_rng(d)
    x, w = (3 * rng.standard_normal((R, d))).astype(F32), rng.standard_normal(d).astype(F32)
    a, b = NUMPY_OPS.norm(x, w, 1e-6), NUMBA_OPS.norm(x, w, 1e-6)
    assert np.max(np.abs(a - b)) <= NORM_RTOL * np.max(np.abs(a))
    y = (4 * rng.standard_normal((R, 2 * d))).astype(F32)
    a, b = NUMPY_OPS.silu_mul(y), NUMBA_OPS.silu_mul(y)
    assert a.shape == b.shape == (R, d) and np.max(np.abs(a - b)) <= SILU_RTOL * np.max(np.abs(a))


@numba_only
@pytest.mark.parametrize("seed", range(4))
def test_moe_combine_twins_agree(seed):
    """Bitwise: each element is one float32 multiply and one add, pairs in the given order."""
    from onebit_engine.ops.moe import route, route_plan
    rng = np.random.default_rng(seed)
    experts, weights = route(rng.standard_normal((9, 16)).astype(F32) * 3, 4, seed % 2 == 0)
    _, _, rows, ranks = route_plan(experts, 7 + seed % 3)
    y = (rng.standard_normal((rows.shape[0], 40)) * 10.0 ** rng.integers(-4, 5, (rows.shape[0], 1))).astype(F32)
    start = rng.standard_normal((9, 40)).astype(F32)
    a, b = start.copy(), start.copy()
    NUMPY_OPS.moe_combine(a, y, rows, ranks, weights)
    NUMBA_OPS.moe_combine(b, y, rows, ranks, weights)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@numba_only
@pytest.mark.parametrize("experts,top_k,rows,n", [(16, 4, 9, 7), (256, 8, 8, 8), (512, 10, 3, 1), (5, 5, 4, 4), (64, 1, 6, 0)])
@pytest.mark.parametrize("norm", [True, False])
def test_moe_route_twins_agree(experts, top_k, rows, n, norm):
    """The same experts, pairs and order (the selection is exact where no two probabilities of a row are
    within rounding of each other, as here); the weights within ROUTE_RTOL."""
    rng = np.random.default_rng(experts + top_k + n)
    logits = (rng.standard_normal((rows, experts)) * 3).astype(F32)
    a, b = NUMPY_OPS.moe_route(logits, n, top_k, norm), NUMBA_OPS.moe_route(logits, n, top_k, norm)
    for x, y in zip(a[1:], b[1:]):  # ids, offsets, rows, ranks
        assert x.dtype == y.dtype == np.int64 and np.array_equal(x, y)
    assert a[0].shape == b[0].shape == (n, top_k) and b[0].dtype == F32
    assert np.max(np.abs(a[0] - b[0]), initial=0.0) <= ROUTE_RTOL * np.max(a[0], initial=0.0)


@numba_only
def test_moe_route_twins_break_ties_alike_and_renormalise():
    """Equal logits give bitwise equal probabilities in either table: both take the lowest ids; power: the
    weights of a renormalised and an unnormalised routing differ."""
    logits = np.array([[1.0, 3.0, 3.0, 0.5, 3.0, 3.0], [2.0] * 6], F32)
    for table in (NUMPY_OPS, NUMBA_OPS):
        w, ids, offsets, rows, ranks = table.moe_route(logits, 2, 3, True)
        assert ids.tolist() == [0, 1, 2, 4] and offsets.tolist() == [0, 1, 3, 5, 6]
        assert rows.tolist() == [1, 0, 1, 0, 1, 0] and ranks.tolist() == [0, 0, 1, 1, 2, 2]
        assert np.allclose(w.sum(axis=1), 1.0) and not np.allclose(table.moe_route(logits, 2, 3, False)[0].sum(axis=1), 1.0)


PINNED = {"norm": test_norm_and_silu_mul_twins_agree, "silu_mul": test_norm_and_silu_mul_twins_agree,
          "gdn_rows": test_gdn_rows_twins_agree, "gdn_replay": test_gdn_replay_twins_agree,
          "attention_rows": test_attention_rows_twins_agree, "moe_combine": test_moe_combine_twins_agree,
          "moe_route": test_moe_route_twins_agree}


def test_every_op_of_the_table_has_a_twin_test():
    """An op added to ``TargetOps`` without a twin test here fails this test."""
    ops = {f.name for f in dataclasses.fields(TargetOps)} - {"name", "delta"}  # labels, not ops
    assert ops == set(PINNED), f"ops without a twin test: {sorted(ops - set(PINNED))}"
    assert NUMPY_OPS.name == "numpy" and NUMBA_OPS.name == "numba"
    assert all(getattr(NUMPY_OPS, op) is not getattr(NUMBA_OPS, op) for op in ops)


@numba_only
def test_the_twin_tests_see_a_one_position_rope_slip_and_a_wrong_gate():
    """Power: a compiled attention a position late and a delta-net op with beta shrunk, each far outside
    the tolerance the twin tests allow."""
    attn, qkv, kv = _attention_case(3, 2, 20)
    (a, b), _ = _attention_both(attn, qkv, 4, kv, 20)
    c = NUMBA_OPS.attention_rows(qkv, 4, kv.copy(), 21, attn.params)
    assert np.max(np.abs(a - b)) <= ATTN_ATOL < np.max(np.abs(a - c)) / 100
    gdn, proj, st0 = _gdn_case(5, 6, 4, 4)
    a = NUMPY_OPS.gdn_rows(proj, 6, st0.copy(), gdn.params, None)
    halved = proj.copy()
    halved[:, gdn.params.splits[2] : gdn.params.splits[3]] -= F32(2.0)  # b -> b - 2: beta = sigmoid(b) shrinks
    b = NUMBA_OPS.gdn_rows(halved, 6, st0.copy(), gdn.params, None)
    assert _rel(a, b) > 100 * GDN_RTOL


def test_ops_names_resolve_once_with_one_error_each(monkeypatch):
    assert resolve_ops("numpy") is NUMPY_OPS and resolve_ops(NUMBA_OPS) is NUMBA_OPS
    assert resolve_ops("auto") is (target_ops.compiled_ops() if op_sets.numba_installed() else NUMPY_OPS)
    if op_sets.numba_installed():  # the compiled table: numba's, or the same with its delta rule's heads in delta.c
        assert resolve_ops("numba") is target_ops.compiled_ops() and resolve_ops("numba").name == "numba"
        assert resolve_ops("numba").delta in ("numba", "native-avx2", "native-avx512")
    with pytest.raises(ConfigError, match=r"target ops 'fast' is not one of \('auto', 'numpy', 'numba'\); pass ops='auto'"):
        resolve_ops("fast")
    monkeypatch.setattr(op_sets, "nb", None)
    assert resolve_ops("auto") is NUMPY_OPS
    with pytest.raises(ConfigError, match=r"target ops 'numba' needs the numba package .*; or use ops='numpy'"):
        resolve_ops("numba")
    assert target_ops.resolve_ops is resolve_ops


def test_a_target_runs_the_table_it_was_given_and_says_which():
    from onebit_engine.measure.provenance import run_provenance

    t = random_target(tiny_config(), 1, ops="numpy")
    assert t.ops is NUMPY_OPS and all(layer.mixer.ops is NUMPY_OPS for layer in t.layers)
    assert run_provenance(t)["ops"] == "numpy"
