"""The delta rule on one head for all rows of a call (ops/gated_delta_fast._head_rows: one sweep per row,
each row's write fused with the next row's decay and read) against the one-token head (_head) run row
after row: the same bits of S and of every read-out, as its docstring claims."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onebit_engine.ops.gated_delta_fast import gdn_token_fast

pytestmark = pytest.mark.skipif(gdn_token_fast is None, reason="numba is not installed (the fast extra)")


def _bits(a):
    return a.view(np.uint32)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 3, 4, 5, 8, 11, 16]), st.sampled_from([1, 7, 16]), st.integers(1, 9), st.booleans(),
       st.booleans(), st.integers(0, 2**16))
def test_head_rows_are_the_one_token_head_bitwise(dk, dv, n, read_out, nonfinite, seed):
    from onebit_engine.ops.gated_delta_fast import _head, _head_rows

    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    S0, ks, qs, vs = f(dk, dv), f(n, dk), f(n, dk), f(n, dv)
    alphas, betas = rng.uniform(0.01, 1, n).astype(np.float32), rng.uniform(0, 1, n).astype(np.float32)
    if nonfinite:
        S0[rng.random((dk, dv)) < 0.05] = np.nan
        ks[rng.random((n, dk)) < 0.05] = np.inf
    a, o_a, mem = S0.copy(), np.zeros((n, dv), np.float32), np.empty(dv, np.float32)
    for t in range(n):
        _head(a, alphas[t], betas[t], ks[t], qs[t], vs[t], mem, o_a[t], read_out)
    b, o_b = S0.copy(), np.zeros((n, dv), np.float32)
    _head_rows(b, alphas, betas, ks, qs, vs, o_b, read_out, b)
    assert np.array_equal(_bits(a), _bits(b))
    if read_out:
        assert np.array_equal(_bits(o_a), _bits(o_b))
    # from a separate start state (a verify's snapshot): the same bits, the start left as it was
    src, c, o_c = S0.copy(), f(dk, dv), np.zeros((n, dv), np.float32)
    _head_rows(c, alphas, betas, ks, qs, vs, o_c, read_out, src)
    assert np.array_equal(_bits(a), _bits(c)) and np.array_equal(_bits(src), _bits(S0))
    if read_out:
        assert np.array_equal(_bits(o_a), _bits(o_c))
