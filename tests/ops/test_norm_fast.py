"""mean_square (the norms' fast path) == its obviously correct twin, np.mean in float32, bit for bit."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from onebit_engine.ops.norm import mean_square


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 9), heads=st.integers(0, 3), d=st.integers(1, 2100), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1e-20, 1e-3, 1.0, 1e3, 1e18]))
def test_mean_square_is_np_mean_bitwise(rows, heads, d, seed, scale):
    rng = np.random.default_rng(seed)
    shape = (rows, heads, d) if heads else (rows, d)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    with np.errstate(over="ignore"):  # 1e18 squared is inf in float32: both sides must say so
        want = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        got = mean_square(x)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)
