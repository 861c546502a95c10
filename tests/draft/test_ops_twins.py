"""The compiled op set (``draft.kernels`` via ``draft.ops.NUMBA_OPS``) against its numpy twins.

Bitwise where the kernel only moves, compares or repeats the twin's elementwise float32 steps (the
conv, top-k, the greedy walk on the same scores); within a named tolerance where it sums in another
order (norm means, attention dot products and value sums, selector scores) or evaluates exp/tanh with
its own polynomial (Cephes' method; numpy has its own SIMD polynomial).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine.draft import kernels, load_draft, write_synthetic_draft
from onebit_engine.draft.ops import NUMBA_OPS, NUMPY_OPS, resolve_ops
from onebit_engine.errors import ConfigError

from .draft_helpers import make_taps

pytestmark = pytest.mark.skipif(kernels.nb is None, reason="numba is not installed (the fast extra)")

F32 = np.float32
NORM_ATOL = 2e-6  # RMSNorm rows (|x| ~ 1-3): a sequential vs pairwise float32 mean of H squares
SILU_ATOL = 2e-5  # silu(g) * u for |g|, |u| ~ 3-10: the kernel's sigmoid (its own exp) vs numpy's, ~1 ulp each
HEADS_ATOL = 2e-6  # normed, rotated heads (|x| ~ 1-3): a sequential vs pairwise float32 mean of hd squares
ATTEND_ATOL = 2e-6  # attention outputs (|o| <= max |v| ~ 3): dot products and value sums in another order, exp 1 ulp
SOFTCAP_ATOL = 4e-6  # cap * tanh(z / cap) at cap 30: both tanhs are within ~1.4 ulp of float64, 30 * 2^-23 ~ 3.6e-6
TANH_MAX_ULP = 2.0  # the kernel's tanh / exp against float64, in float32 ulps (measured: 1.27 and 0.97)
PAIR_ATOL = 1e-5  # selector pairwise scores (|s| ~ 10): a rank-r sum in sequential vs BLAS order
DRAFT_OPS_HIDDEN_ATOL = 1e-5  # a whole proposal's final-normed rows, numba vs numpy (same GEMMs)
DRAFT_OPS_LOGITS_ATOL = 1e-4  # its logits (~10x the hidden scale), as DRAFT_LOGITS_ATOL against torch
DRAFT_OPS_Q_ATOL = 1e-5  # sampled q: softmax(score / 0.8) of scores within ~5e-6, so probabilities move < 1e-5


def _rng(seed):
    return np.random.default_rng(seed)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.sampled_from([1, 2, 4]), st.sampled_from([2, 8, 48]), st.integers(0, 2**16))
def test_heads_match_numpy(t, n, hd, seed):
    rng = _rng(seed)
    y = (2 * rng.standard_normal((t, 3 * n * hd))).astype(F32)
    w = rng.uniform(0.5, 1.5, hd).astype(F32)
    ang = rng.uniform(0, 50, (t, hd)).astype(F32)
    cos, sin = np.cos(ang), np.sin(ang)
    col0 = n * hd  # a slice in the middle, as k is in the fused q/k/v output
    a = NUMPY_OPS.heads(y, col0, n, w, cos, sin, 1e-6)
    b = NUMBA_OPS.heads(y, col0, n, w, cos, sin, 1e-6)
    assert a.shape == b.shape == (n, t, hd) and b.dtype == F32
    np.testing.assert_allclose(b, a, rtol=0, atol=HEADS_ATOL)


@pytest.mark.parametrize("t, h", [(1, 8), (8, 192), (5, 576)])
def test_rms_norm_and_silu_mul_match_numpy(t, h):
    rng = _rng(t + h)
    x = (3 * rng.standard_normal((t, h))).astype(F32)
    w = rng.uniform(0.5, 1.5, h).astype(F32)
    np.testing.assert_allclose(NUMBA_OPS.rms_norm(x, w, 1e-6), NUMPY_OPS.rms_norm(x, w, 1e-6), rtol=0, atol=NORM_ATOL)
    gu = (4 * rng.standard_normal((t, 2 * h))).astype(F32)
    gu[0, :4] = [-80.0, 80.0, 0.0, -0.0]  # far tails: sigmoid 0 / 1 exactly, no overflow
    np.testing.assert_allclose(NUMBA_OPS.silu_mul(gu, h), NUMPY_OPS.silu_mul(gu, h), rtol=0, atol=SILU_ATOL)


def _attend_inputs(rng, s, b, hq=4, hk=2, hd=16, cap_extra=5):
    q = rng.standard_normal((hq, b, hd)).astype(F32)
    kt = np.full((hk, hd, s + cap_extra), np.nan, F32)  # rows past the live context must never be read
    vc = np.full((hk, s + cap_extra, hd), np.nan, F32)
    kt[:, :, :s] = rng.standard_normal((hk, hd, s))
    vc[:, :s] = rng.standard_normal((hk, s, hd))
    kb = rng.standard_normal((hk, b, hd)).astype(F32)
    vb = rng.standard_normal((hk, b, hd)).astype(F32)
    return q, kt, vc, kb, vb


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 40), st.integers(1, 8), st.booleans(), st.sampled_from([None, 1, 3, 7, 100]), st.integers(0, 2**16))
def test_attend_matches_numpy(s, b, causal, window, seed):
    q, kt, vc, kb, vb = _attend_inputs(_rng(seed), s, b)
    a = NUMPY_OPS.attend(q, kt, vc, s, kb, vb, causal, window, 0.25)
    c = NUMBA_OPS.attend(q, kt, vc, s, kb, vb, causal, window, 0.25)
    assert np.isfinite(c).all()
    np.testing.assert_allclose(c, a, rtol=0, atol=ATTEND_ATOL)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 30), st.integers(1, 8), st.booleans(), st.sampled_from([None, 2, 50]), st.integers(0, 2**16))
def test_attention_from_qkv_matches_numpy(s, b, causal, window, seed):
    rng = _rng(seed)
    hq, hk, hd = 4, 2, 16
    _, kt, vc, _, _ = _attend_inputs(rng, s, b, hq, hk, hd)
    qkv = (2 * rng.standard_normal((b, (hq + 2 * hk) * hd))).astype(F32)
    qn, kn = (rng.uniform(0.5, 1.5, hd).astype(F32) for _ in range(2))
    ang = rng.uniform(0, 50, (b, hd)).astype(F32)
    args = (qkv, hq, hk, qn, kn, np.cos(ang), np.sin(ang), 1e-6, kt, vc, s, causal, window)
    np.testing.assert_allclose(NUMBA_OPS.attention(*args), NUMPY_OPS.attention(*args), rtol=0, atol=ATTEND_ATOL)


@pytest.mark.parametrize("window", [None, 3])
def test_attend_rows_depend_only_on_what_they_see(window):
    """Causal: the first rows of a block come out bitwise the same when the block is shorter."""
    q, kt, vc, kb, vb = _attend_inputs(_rng(4), 9, 8)
    full = NUMBA_OPS.attend(q, kt, vc, 9, kb, vb, True, window, 0.25)
    for b in range(1, 8):
        part = NUMBA_OPS.attend(q[:, :b].copy(), kt, vc, 9, kb[:, :b].copy(), vb[:, :b].copy(), True, window, 0.25)
        np.testing.assert_array_equal(part, full[:b])


@pytest.mark.parametrize("t, h, k, g", [(1, 8, 2, 4), (6, 16, 2, 4), (5, 12, 3, 3), (8, 192, 2, 16)])
def test_conv_side_is_bitwise_the_numpy_twin(t, h, k, g):
    rng = _rng(t * 100 + h)
    y = rng.standard_normal((t, h)).astype(F32)
    dyn = rng.standard_normal((t, k, h // g)).astype(F32)
    base = rng.standard_normal((k, h)).astype(F32)
    np.testing.assert_array_equal(NUMBA_OPS.conv_side(y, dyn, base, g), NUMPY_OPS.conv_side(y, dyn, base, g))


def test_softcap_matches_numpy():
    rng = _rng(0)
    z = (12 * rng.standard_normal((7, 4096))).astype(F32)
    z[0, :6] = [0.0, -0.0, 1e-30, 500.0, -500.0, 18.75]
    for mult, cap in [(1.0, 30.0), (0.6, 6.0), (1.0, None), (0.5, None)]:
        a = NUMPY_OPS.softcap(z.copy(), mult, cap)
        b = NUMBA_OPS.softcap(z.copy(), mult, cap)
        if cap is None:
            np.testing.assert_array_equal(b, a)  # only the multiply: the same step
        else:
            np.testing.assert_allclose(b, a, rtol=0, atol=SOFTCAP_ATOL * cap / 30.0)
            assert np.all(np.abs(b) <= cap)


def test_softcap_bits_do_not_depend_on_the_neighbours():
    """A chunk with one large value takes the full tanh; its small values come out with the same bits."""
    rng = _rng(3)
    small = (10 * rng.standard_normal(256)).astype(F32).clip(-18, 18)
    row = np.concatenate([small, small, small])[None].copy()
    row[0, 300] = 900.0  # the second chunk of 256 needs the exp branch
    out = NUMBA_OPS.softcap(row, 1.0, 30.0)[0]
    keep = np.arange(256) != 300 - 256
    np.testing.assert_array_equal(out[256:512][keep], out[:256][keep])
    np.testing.assert_array_equal(out[512:], out[:256])


def _ulps(got, x64):
    want = x64.astype(F32)
    return np.abs(got.astype(np.float64) - x64) / np.spacing(np.abs(want)).astype(np.float64)


def test_kernel_tanh_and_exp_are_accurate():
    x = np.concatenate([np.linspace(-12, 12, 400_001, dtype=F32), F32([0.625, 0.62499994, 9.0, 10.0, 10.000001])])
    got = kernels.softcap(x[None].copy(), F32(1.0), F32(1.0))[0]
    assert _ulps(got, np.tanh(x.astype(np.float64))).max() <= TANH_MAX_ULP
    special = F32([np.inf, -np.inf, 3e38, -3e38, 0.0, -0.0, np.nan])
    out = kernels.softcap(special[None].copy(), F32(1.0), F32(1.0))[0]
    np.testing.assert_array_equal(out[:6], F32([1, -1, 1, -1, 0, -0.0]))
    assert np.signbit(out[5]) and np.isnan(out[6])

    # the softmax's exp, for score - max <= 0 (exercised through a 1-query attention over chosen scores)
    xs = np.linspace(-87, 0, 200_001, dtype=F32)
    e = _exp_neg_all(xs)
    assert _ulps(e, np.exp(xs.astype(np.float64))).max() <= TANH_MAX_ULP
    np.testing.assert_array_equal(_exp_neg_all(F32([-87.5, -200.0, -np.inf])), 0)


def _exp_neg_all(xs):
    import numba as nb

    @nb.njit(error_model="numpy")
    def run(x, out):
        for i in range(x.shape[0]):
            out[i] = kernels.exp_neg32(x[i])
        return out

    return run(xs, np.empty_like(xs))


def test_top_candidates_bitwise_stable_sort_order():
    from onebit_engine.draft.selector import top_candidates_slow

    rng = _rng(1)
    for trial in range(300):
        n, v, k = int(rng.integers(1, 6)), int(rng.integers(1, 70)), int(rng.integers(1, 12))
        logits = rng.integers(-3, 4, (n, v)).astype(F32)  # many ties
        if trial % 3 == 1:
            logits = rng.standard_normal((n, v)).astype(F32)
        if trial % 3 == 2:  # non-finite values rank as a stable sort of -logits puts them
            logits[rng.random((n, v)) < 0.2] = np.nan
            logits[rng.random((n, v)) < 0.1] = -np.inf
            logits[rng.random((n, v)) < 0.05] = np.inf
        a, ua = NUMBA_OPS.top_candidates(logits, min(k, v))
        b, ub = top_candidates_slow(logits, min(k, v))
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ua, ub)  # NaN == NaN for assert_array_equal


@pytest.mark.parametrize("seed", range(20))
def test_selector_pieces_match_numpy(seed):
    rng = _rng(seed)
    n, k, r, v = 7, 8, 32, 300
    pred, succ = (rng.standard_normal((v, r)).astype(F32) for _ in range(2))
    hp = rng.standard_normal((n, r)).astype(F32) / 4
    cand = np.stack([rng.choice(v, k, replace=False) for _ in range(n)]).astype(np.int64)
    unary = (3 * rng.standard_normal((n, k))).astype(F32)
    for t in range(n):
        np.testing.assert_allclose(
            NUMBA_OPS.pair_scores(pred[t], hp[t], succ, cand[t]),
            NUMPY_OPS.pair_scores(pred[t], hp[t], succ, cand[t]), rtol=0, atol=PAIR_ATOL)
    np.testing.assert_array_equal(NUMBA_OPS.greedy_walk(unary, hp, pred, succ, cand, 5),
                                  NUMPY_OPS.greedy_walk(unary, hp, pred, succ, cand, 5))
    # on integer-valued inputs every sum is exact, so the walks agree bitwise, ties included
    ints = [np.round(a * 2).astype(F32) for a in (unary, hp, pred, succ)]
    np.testing.assert_array_equal(NUMBA_OPS.greedy_walk(ints[0], ints[1], ints[2], ints[3], cand, 5),
                                  NUMPY_OPS.greedy_walk(ints[0], ints[1], ints[2], ints[3], cand, 5))


CONFIGS = {
    "v1-full": dict(version=1),
    "v1-sliding": dict(version=1, num_layers=2, sliding_window=3, layer_types=["sliding_attention", "full_attention"]),
    "v2": dict(version=2, sliding_window=4, is_causal=False, layer_types=["sliding_attention"] * 2,
               final_logit_softcapping=6.0, output_multiplier=0.6),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_whole_proposals_agree(name, temperature, target, tmp_path):
    folder = write_synthetic_draft(tmp_path, target.config, seed=5, **CONFIGS[name])
    slow, fast = (load_draft(folder, target, ops=o) for o in ("numpy", "numba"))
    assert slow.ops.name == "numpy" and fast.ops.name == "numba"
    rng = _rng(2)
    states = [slow.new_state(), fast.new_state()]
    for n_ctx, n_draft in [(7, 5), (3, 5), (1, 3), (20, 5)]:
        taps = make_taps(rng, n_ctx)
        for d, s in zip((slow, fast), states):
            d.append_context(s, taps)
        anchor = int(rng.integers(0, 60))
        seed = int(rng.integers(0, 2**16))
        a, b = (d.propose(s, anchor, n_draft, temperature=temperature, rng=np.random.default_rng(seed))
                for d, s in zip((slow, fast), states))
        np.testing.assert_allclose(b.hidden, a.hidden, rtol=0, atol=DRAFT_OPS_HIDDEN_ATOL)
        np.testing.assert_allclose(b.logits, a.logits, rtol=0, atol=DRAFT_OPS_LOGITS_ATOL)
        np.testing.assert_array_equal(b.tokens, a.tokens)
        np.testing.assert_allclose(b.q, a.q, rtol=0, atol=DRAFT_OPS_Q_ATOL)
        assert np.all(b.q[np.arange(n_draft), b.tokens] > 0)


def test_ops_names_are_checked():
    from onebit_engine.draft.ops import compiled_ops

    compiled = compiled_ops()  # NUMBA_OPS, with its attention on the host-int pool where that library loads
    assert resolve_ops("numpy") is NUMPY_OPS and resolve_ops("numba") is compiled and resolve_ops("auto") is compiled
    assert compiled.name == "numba" and all(getattr(compiled, f) is getattr(NUMBA_OPS, f)
                                            for f in ("rms_norm", "heads", "attend", "silu_mul", "softcap"))
    assert resolve_ops(NUMPY_OPS) is NUMPY_OPS  # a table passes through
    with pytest.raises(ConfigError, match="'fast' is not one of"):
        resolve_ops("fast")
