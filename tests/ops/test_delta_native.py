"""The host-int library's delta rule (``delta.c``) against its compiled twin ``gated_delta_fast._heads``:
bitwise, on every head layout, row count, column tail (dv not a multiple of 8) and thread count."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onebit_engine.ops.gated_delta_fast import gdn_token_fast

pytestmark = pytest.mark.skipif(gdn_token_fast is None, reason="numba is not installed (the fast extra)")


@pytest.fixture(scope="module")
def lib():
    from onebit_engine.gemm.host_int import native

    try:
        return native.load()
    except native.NativeUnavailable as e:
        pytest.skip(f"the native host-int library cannot be built here: {e}")


def _case(rng, n, hk, r, dk, dv):
    hv = hk * r
    v0 = 2 * hk * dk
    C = v0 + hv * dv
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    S = f(hv, dk, dv) * np.float32(0.3)
    alphas = rng.uniform(0.05, 1.0, (n, hv)).astype(np.float32)
    betas = rng.uniform(0.0, 1.0, (n, hv)).astype(np.float32)
    return S, alphas, betas, f(n, hk, dk), f(n, hk, dk), f(n, C), v0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(1, 3), st.sampled_from([1, 2, 3]), st.sampled_from([1, 5, 16, 32]),
       st.sampled_from([1, 7, 8, 13, 32]), st.sampled_from([1, 2, 3]), st.booleans(), st.integers(0, 2**16))
def test_native_delta_heads_are_bitwise_the_compiled_twin(lib, n, hk, r, dk, dv, threads, read_out, seed):
    from onebit_engine.ops.gated_delta_fast import _heads

    S, alphas, betas, ks, qs, xs, v0 = _case(np.random.default_rng(seed), n, hk, r, dk, dv)
    S_twin, S_nat = S.copy(), S.copy()
    o_twin = np.zeros((n, hk * r, dv) if read_out else (0, hk * r, dv), np.float32)
    _heads(S_twin, alphas, betas, ks, qs, xs, o_twin, r, v0, read_out)
    o_nat = np.full((n, hk * r, dv), np.nan, np.float32) if read_out else None
    lib.delta_heads(S_nat, alphas, betas, ks, qs, xs, o_nat, v0, threads)
    assert S_nat.tobytes() == S_twin.tobytes()
    if read_out:
        assert o_nat.tobytes() == o_twin.tobytes()


def test_native_delta_heads_refuse_what_does_not_fit(lib):
    S, alphas, betas, ks, qs, xs, v0 = _case(np.random.default_rng(0), 2, 2, 2, 8, 8)
    with pytest.raises(ValueError, match="shapes do not agree"):
        lib.delta_heads(S, alphas[:1], betas, ks, qs, xs, None, v0, 1)
    with pytest.raises(ValueError, match="float32 C-contiguous"):
        lib.delta_heads(S.astype(np.float64), alphas, betas, ks, qs, xs, None, v0, 1)
    with pytest.raises(ValueError, match="code -2"):
        lib.delta_heads(S, alphas, betas, ks, qs, xs, None, v0 + 1, 1)  # head 3's v would run past the row
