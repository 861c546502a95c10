"""Several products in one pooled call (``HostIntBackend.matmul_many``, ``gemm.base.run_many``): the bits of
one call each, on every native path, format, row count and thread count; errors as a call each gives them."""
import numpy as np
import pytest

from onebit_engine.gemm import Linear
from onebit_engine.gemm.base import run_many
from onebit_engine.gemm.host_int import int_kernels, native
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.quant import FORMATS

from .host_int_paths import native_params

NATIVE = native_params()


def products(rng, fmt, backend, count):
    """Weights of mixed shapes (partial tiles, K not a whole step) and inputs of 1..16 rows."""
    cpb = int_kernels.CODES_PER_BYTE[fmt]
    ws, xs = [], []
    for i in range(count):
        n, k = int(rng.integers(1, 300)), int(rng.integers(1, 120)) * cpb + int(rng.integers(0, 3))
        ws.append(backend.pack(rng.standard_normal((n, k)).astype(np.float32)))
        xs.append((rng.standard_normal((int(rng.integers(1, 17)), k)) * 10.0 ** rng.integers(-3, 3)).astype(np.float32))
    return xs, ws


@pytest.mark.parametrize("kernel", NATIVE)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_many_equals_a_call_each(kernel, fmt, threads):
    rng = np.random.default_rng(11)
    b = HostIntBackend(weight_format=fmt, threads=threads, kernel=kernel)
    xs, ws = products(rng, fmt, b, 9)
    # one big product too, so 2 and 3 threads split tiles of several products over the pool
    ws.append(b.pack(rng.standard_normal((1500, 1024 * int_kernels.CODES_PER_BYTE[fmt])).astype(np.float32)))
    xs.append(rng.standard_normal((3, ws[-1].shape[1])).astype(np.float32))
    xs.insert(4, xs[2])  # the same input and weight objects twice
    ws.insert(4, ws[2])
    # one input for several weights of its K (quantized once), and a view at its address with fewer rows (not)
    k0 = xs[0].shape[1]
    for x in (xs[0], xs[0][:1], xs[0]):
        xs.append(x)
        ws.append(b.pack(rng.standard_normal((int(rng.integers(1, 300)), k0)).astype(np.float32)))
    got = b.matmul_many(xs, ws)
    assert len(got) == len(xs)
    for x, w, y in zip(xs, ws, got):
        assert np.array_equal(y, b.matmul(x, w))


@pytest.mark.parametrize("kernel", NATIVE)
def test_more_products_than_one_call_takes(kernel):
    rng = np.random.default_rng(12)
    b = HostIntBackend(kernel=kernel, threads=2)
    xs, ws = products(rng, "int8", b, native.MAX_MANY + 5)
    assert all(np.array_equal(y, b.matmul(x, w)) for x, w, y in zip(xs, ws, b.matmul_many(xs, ws)))


@pytest.mark.parametrize("kernel", NATIVE)
def test_many_refuses_non_finite_rows_like_a_call(kernel):
    b = HostIntBackend(kernel=kernel)
    w = b.pack(np.ones((5, 40), np.float32))
    bad = np.ones((3, 40), np.float32)
    bad[2, 7] = np.nan
    with pytest.raises(ValueError, match=r"rows \[2\] hold NaN or inf"):
        b.matmul_many([np.ones((2, 40), np.float32), bad], [w, w])


@pytest.mark.parametrize("kernel", NATIVE)
def test_many_takes_what_a_call_takes(kernel):
    """More than 16 rows, a strided x, float64, zero rows: the twin's path, the same bits; a wrong K is refused."""
    rng = np.random.default_rng(13)
    b = HostIntBackend(kernel=kernel)
    w = b.pack(rng.standard_normal((30, 64)).astype(np.float32))
    xs = [rng.standard_normal((20, 64)).astype(np.float32), rng.standard_normal((4, 128)).astype(np.float32)[:, ::2],
          np.zeros((0, 64), np.float32)]
    assert all(np.array_equal(y, b.matmul(x, w)) for x, y in zip(xs, b.matmul_many(xs, [w] * 3)))
    with pytest.raises(ValueError, match=r"x must be \[M, 64\]"):
        b.matmul_many([np.ones((1, 63), np.float32)], [w])
    with pytest.raises(ValueError, match="2 inputs for 1 weights"):
        b.matmul_many([xs[0], xs[0]], [w])


@pytest.mark.parametrize("backend", ["reference", "host-int"])
def test_run_many_equals_each_linear(backend):
    """Through Linear: one call where it may be, the twin where a row set must be padded or split."""
    from onebit_engine.gemm import get_backend

    rng = np.random.default_rng(14)
    b = get_backend(backend)
    lins = [Linear.from_weight(rng.standard_normal((n, 48)).astype(np.float32), b, 8) for n in (5, 17, 40)]
    for rows in (1, 8, 11):  # within a row set, and past it (the twin runs)
        xs = [rng.standard_normal((rows, 48)).astype(np.float32) for _ in lins]
        assert all(np.array_equal(y, lin(x)) for lin, x, y in zip(lins, xs, run_many(lins, xs)))
