"""The compiled delta-net token (numba) against its numpy reference twin: same math to rounding."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onebit_engine.ops.gated_delta import gdn_token
from onebit_engine.ops.gated_delta_fast import gdn_token_fast

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


@given(st.integers(1, 300), st.integers(0, 2**16), st.booleans())
def test_kernel_4_conv_is_the_general_conv_bitwise(C, seed, strided):
    """The kernel-size-4 conv (one pass, taps in registers) against the general loops it stands in for:
    the same x and the same advanced window, bit for bit, over a few tokens (non-finite inputs too), on its
    flat path (C-contiguous arrays) and on its 2-d path (``strided``: the window and weight are views)."""
    from onebit_engine.ops.gated_delta_fast import _conv, _conv4

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((C, 4)).astype(np.float32)
    w[rng.random((C, 4)) < 0.02] = np.inf
    a = rng.standard_normal((C, 3)).astype(np.float32)
    b = a.copy()
    if strided:  # the first columns of wider arrays: neither is C-contiguous
        big_w, big_b = np.zeros((C, 8), np.float32), np.zeros((C, 6), np.float32)
        big_w[:, :4], big_b[:, :3] = w, b
        w4, b = big_w[:, :4], big_b[:, :3]
        assert C == 1 or not (w4.flags.c_contiguous or b.flags.c_contiguous)  # one row is contiguous any way
    else:
        w4 = w
    for _ in range(3):
        mixed = (rng.standard_normal(C) * 10.0 ** rng.integers(-30, 30, C)).astype(np.float32)
        xa, xb = np.empty(C, np.float32), np.empty(C, np.float32)
        _conv(a, mixed, w, xa)
        _conv4(b, mixed, w4, xb)
        assert np.array_equal(xa.view(np.uint32), xb.view(np.uint32))
        assert np.array_equal(a.view(np.uint32), np.ascontiguousarray(b).view(np.uint32))