"""The compiled delta-net token (numba) against its numpy reference twin: same math to rounding."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onebit_engine.ops.gated_delta import gdn_token
from onebit_engine.ops.gated_delta_fast import gdn_mixer_rows, gdn_token_fast

pytestmark = pytest.mark.skipif(gdn_token_fast is None, reason="numba is not installed (the fast extra)")

GDN_TWIN_RTOL = 2e-6  # float32 loops vs numpy reductions: rounding only (max |diff| / max |value|)


@given(st.integers(1, 3), st.sampled_from([1, 2]), st.sampled_from([4, 16, 48]), st.sampled_from([4, 16, 32]),
       st.integers(1, 4), st.integers(0, 2**16))
def test_fast_token_matches_numpy_twin(hk, r, dk, dv, K, seed):
    rng = np.random.default_rng(seed)
    hv = hk * r
    C = 2 * hk * dk + hv * dv
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    args = (f(C, K - 1), f(hv, dk, dv), f(C), rng.uniform(0.01, 1, hv).astype(np.float32),
            rng.uniform(0, 1, hv).astype(np.float32), f(C, K), hk, dk, dv)
    S = args[1]
    for _ in range(3):  # a few tokens, so the state carries rounding forward
        a = gdn_token(*args)
        b = gdn_token_fast(*args)
        for x, y in zip(a, b):
            assert x.shape == y.shape and x.dtype == y.dtype == np.float32
            if x.size:
                assert np.max(np.abs(x - y)) <= GDN_TWIN_RTOL * max(np.max(np.abs(x)), 1.0)
        args = (a[1], a[2], *args[2:])
    assert np.array_equal(b[1], a[1])  # the conv window is a pure shift of the inputs: exact
    del S


@pytest.mark.skipif(gdn_mixer_rows is None, reason="needs numba")
def test_the_compiled_delta_rule_gives_the_same_bits_on_any_thread_count():
    from onebit_engine.ops.gated_delta_fast import set_threads

    rng = np.random.default_rng(5)
    HK, HV, d, n = 2, 6, 16, 5
    C = 2 * HK * d + HV * d
    proj = rng.standard_normal((n, C + HV * d + 2 * HV)).astype(np.float32)
    w = rng.standard_normal((C, 4)).astype(np.float32)
    outs = []
    for threads in (1, 2, 64):
        set_threads(threads)
        conv, S = np.zeros((C, 3), np.float32), np.zeros((HV, d, d), np.float32)
        out = np.empty((n, HV * d), np.float32)
        e = np.empty((0, C), np.float32)
        gdn_mixer_rows(proj, n, conv, S, w, -np.ones(HV, np.float32), np.zeros(HV, np.float32), np.ones(d, np.float32),
                       np.float32(1e-6), HK, d, d, e, e[:, :HV], e[:, :HV], np.empty((0, C, 3), np.float32),
                       np.empty((0, HV, d, d), np.float32), out)
        outs.append((out, S, conv))
    set_threads(1)
    for o in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(outs[0], o))
