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


def _lane_sum_squares(row: np.ndarray, lanes: int) -> np.float32:
    """The compiled RMSNorm's sum of squares, one float32 operation at a time: element i into running sum
    i % lanes, the sums halved pairwise, then the tail in order (ops/norm_fast.py)."""
    f = np.float32
    acc = [f(0.0)] * lanes
    m = len(row) - len(row) % lanes
    for i in range(m):
        acc[i % lanes] = f(acc[i % lanes] + f(row[i] * row[i]))
    w = lanes
    while w > 1:
        w //= 2
        acc = [f(acc[j] + acc[j + w]) for j in range(w)] + acc[w:]
    s = acc[0]
    for i in range(m, len(row)):
        s = f(s + f(row[i] * row[i]))
    return s


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 4), d=st.sampled_from([1, 5, 63, 64, 65, 128, 200, 1000]), seed=st.integers(0, 2**32 - 1),
       centred=st.booleans(), scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_compiled_rms_norm_sums_in_its_lane_order_bitwise(rows, d, seed, centred, scale):
    """The compiled RMSNorm (target and draft) gives, row for row, the bits of its documented order of the sum of
    squares, written out one float32 operation at a time; a serial sum (the order before) is caught at d >= 65."""
    import pytest

    from onebit_engine.ops import norm_fast

    if norm_fast.rms_norm_rows is None:
        pytest.skip("numba is not installed (the fast extra)")
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, d)) * scale).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    eps = np.float32(1e-6)
    got = np.empty_like(x)
    norm_fast.rms_norm_rows(x, w, eps, centred, got)
    one = np.float32(1.0)
    for r in range(rows):
        ss = _lane_sum_squares(x[r], norm_fast.LANES)
        inv = one / np.sqrt(ss / np.float32(d) + eps)
        want = (x[r] * inv) * ((one + w) if centred else w)
        assert np.array_equal(got[r].view(np.uint32), want.view(np.uint32)), r
