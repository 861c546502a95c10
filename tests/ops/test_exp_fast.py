"""The vectorizable float32 exp of the compiled paths against float64 exp: error bound and edge values."""
import numpy as np
import pytest

from onebit_engine.ops.exp_fast import FLUSH_BELOW, LN_FLT_MAX, expf_array

pytestmark = pytest.mark.skipif(expf_array is None, reason="numba is not installed (the fast extra)")

EXPF_MAX_ULP = 1.5  # Cephes expf: measured 1.354 ulp (relative error / 2^-24) on the grid below


def _exp(x):
    out = np.empty_like(x)
    expf_array(x, out)
    return out


def test_relative_error_within_bound_over_the_normal_range():
    x = np.linspace(FLUSH_BELOW, LN_FLT_MAX, 2_000_001, dtype=np.float64).astype(np.float32)
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(200_000).astype(np.float32)])
    ref = np.exp(x.astype(np.float64))
    ulp = np.abs(_exp(x).astype(np.float64) - ref) / ref / 2.0**-24
    assert ulp.max() <= EXPF_MAX_ULP, f"max error {ulp.max():.3f} ulp at x = {x[np.argmax(ulp)]!r}"


def test_edges_nan_inf_overflow_and_flush():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, LN_FLT_MAX, np.nextafter(np.float32(LN_FLT_MAX), 100),
                  100.0, FLUSH_BELOW, np.nextafter(np.float32(FLUSH_BELOW), -100), -1e4], np.float32)
    got = _exp(x)
    assert np.isnan(got[0])
    assert got[1] == np.inf and got[2] == 0.0
    assert got[3] == got[4] == got[5] == 1.0
    assert np.isfinite(got[6]) and got[6] > 3.4e38  # the largest finite result
    assert got[7] == got[8] == np.inf
    assert got[9] > 0 and got[10] == 0.0 and got[11] == 0.0  # below exp(-87) (~ the smallest normal): 0


def test_same_bits_in_vector_lanes_and_scalar_tails():
    """A value's result must not depend on where it sits in the array (vector body vs remainder loop)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(1000) * 20).astype(np.float32)
    whole = _exp(x)
    for n in (1, 3, 7, 9, 17):
        for start in range(0, 40, 7):
            assert np.array_equal(_exp(x[start:start + n].copy()), whole[start:start + n])
