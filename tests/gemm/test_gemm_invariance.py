"""Pin the fact the batch-invariance design rests on, and the row-set padding of ``Linear``.

Inside one BLAS call of a fixed row count, a row's result must not depend on its position or on the
other rows. (Between a 1-row and an 8-row call it does differ - that is why every call is padded to the
row set.) If a BLAS update ever breaks this, these tests fail before any model test does.
"""
import numpy as np
import pytest

from onebit_engine.gemm import Linear, available_backends, get_backend

REF_RTOL = 1e-5  # float32 products over K = 40 summed in BLAS's order vs numpy's: rounding only
EXACT = [b for b in available_backends() if get_backend(b).exact]


@pytest.mark.parametrize("K,N", [(64, 96), (16, 1), (24, 5), (512, 768), (1024, 1024), (4096, 64)])
def test_blas_row_result_independent_of_position_and_neighbours(K, N):
    rng = np.random.default_rng(K)
    w = rng.standard_normal((K, N)).astype(np.float32)
    rows = rng.standard_normal((8, K)).astype(np.float32)
    base = rows @ w
    for trial in range(6):
        perm = rng.permutation(8)
        other = rng.standard_normal((8, K)).astype(np.float32)
        other[perm[0]] = rows[0]
        assert np.array_equal((rows[perm] @ w)[np.argsort(perm)], base)
        assert np.array_equal((other @ w)[perm[0]], base[0])
        zero = np.zeros((8, K), np.float32)
        zero[perm[0]] = rows[0]
        assert np.array_equal((zero @ w)[perm[0]], base[0])


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("row_set", [1, 3, 4, 8, 12])
@pytest.mark.parametrize("N", [1, 48])
def test_linear_row_equals_single_row_call(backend, row_set, N):
    rng = np.random.default_rng(row_set)
    w = rng.standard_normal((N, 40)).astype(np.float32)
    lin = Linear.from_weight(w, get_backend(backend), row_set)
    x = rng.standard_normal((11, 40)).astype(np.float32)
    full = lin(x)
    singles = np.stack([lin(x[i : i + 1])[0] for i in range(11)])
    assert np.array_equal(full, singles)
    assert full.shape == (11, N)
    if backend == "reference":  # and the padded blocks still compute x @ W.T (float32 sums in another order)
        assert np.allclose(full, x @ w.T, rtol=REF_RTOL, atol=REF_RTOL)
