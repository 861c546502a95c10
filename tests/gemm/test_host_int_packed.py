"""Several products in one pooled call on flat buffers (``HostIntBackend.matmul_packed``, ``gemm.base.run_packed``):
the bits of one call each, on every native path, format, row count and thread count; errors as a call each gives them."""
import numpy as np
import pytest

from onebit_engine.gemm import Linear
from onebit_engine.gemm.base import flat_rows, run_packed
from onebit_engine.gemm.host_int import int_kernels, native
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.quant import FORMATS

from .host_int_paths import native_params

NATIVE = native_params()


def products(rng, fmt, backend, count):
    """Weights of mixed shapes (partial tiles, K not a whole step) and inputs of 1..16 rows, the inputs back to
    back in one flat x (a gap of a few elements between them, so no offset is a whole row of the one before).
    -> (x, offs, counts, weights)."""
    cpb = int_kernels.CODES_PER_BYTE[fmt]
    ws, parts, offs, counts, at = [], [], [], [], 0
    for _ in range(count):
        n, k = int(rng.integers(1, 300)), int(rng.integers(1, 120)) * cpb + int(rng.integers(0, 3))
        ws.append(backend.pack(rng.standard_normal((n, k)).astype(np.float32)))
        m, gap = int(rng.integers(1, 17)), int(rng.integers(0, 5))
        parts.append((rng.standard_normal(m * k + gap) * 10.0 ** rng.integers(-3, 3)).astype(np.float32))
        offs.append(at)
        counts.append(m)
        at += m * k + gap
    return np.concatenate(parts), offs, counts, ws


def each(b, x, offs, counts, ws):
    """The twin: a call each on its rows, outputs raveled back to back."""
    return np.concatenate([b.matmul(flat_rows(x, o, c, w.shape[1]), w).ravel() for o, c, w in zip(offs, counts, ws)])


@pytest.mark.parametrize("kernel", NATIVE)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_packed_equals_a_call_each(kernel, fmt, threads):
    rng = np.random.default_rng(11)
    b = HostIntBackend(weight_format=fmt, threads=threads, kernel=kernel)
    x, offs, counts, ws = products(rng, fmt, b, 9)
    # one big product too, so 2 and 3 threads split tiles of several products over the pool
    big = b.pack(rng.standard_normal((1500, 1024 * int_kernels.CODES_PER_BYTE[fmt])).astype(np.float32))
    x = np.concatenate([x, rng.standard_normal(3 * big.shape[1]).astype(np.float32)])
    offs, counts, ws = offs + [x.size - 3 * big.shape[1]], counts + [3], ws + [big]
    # the same rows and weight twice; rows read by several weights of their K (quantized once); a prefix of
    # those rows at the same address (fewer rows: quantized on its own)
    offs.insert(4, offs[2]), counts.insert(4, counts[2]), ws.insert(4, ws[2])
    k0 = ws[0].shape[1]
    for c in (counts[0], 1, counts[0]):
        offs.append(offs[0]), counts.append(c)
        ws.append(b.pack(rng.standard_normal((int(rng.integers(1, 300)), k0)).astype(np.float32)))
    got = b.matmul_packed(x, offs, counts, ws)
    assert got.dtype == np.float32 and got.shape == (sum(c * w.shape[0] for c, w in zip(counts, ws)),)
    assert np.array_equal(got, each(b, x, offs, counts, ws))


@pytest.mark.parametrize("kernel", NATIVE)
def test_more_products_than_one_call_takes(kernel):
    rng = np.random.default_rng(12)
    b = HostIntBackend(kernel=kernel, threads=2)
    x, offs, counts, ws = products(rng, "int8", b, native.MAX_MANY + 5)
    assert np.array_equal(b.matmul_packed(x, offs, counts, ws), each(b, x, offs, counts, ws))


@pytest.mark.parametrize("kernel", NATIVE)
def test_packed_refuses_non_finite_rows_like_a_call(kernel):
    b = HostIntBackend(kernel=kernel)
    w = b.pack(np.ones((5, 40), np.float32))
    x = np.ones(200, np.float32)
    x[80 + 2 * 40 + 7] = np.nan  # row 2 of the second product
    with pytest.raises(ValueError, match=r"rows \[2\] hold NaN or inf"):
        b.matmul_packed(x, [0, 80], [2, 3], [w, w])


@pytest.mark.parametrize("kernel", NATIVE)
def test_packed_takes_what_a_call_takes(kernel):
    """More than 16 rows, zero rows, a strided or float64 x: the twin's path, the same bits (or the call's own
    refusal); a range outside x and mismatched lists are refused."""
    rng = np.random.default_rng(13)
    b = HostIntBackend(kernel=kernel)
    w = b.pack(rng.standard_normal((30, 64)).astype(np.float32))
    x = rng.standard_normal(64 * 24).astype(np.float32)
    for offs, counts in (([0, 64], [20, 3]), ([0, 128], [0, 2])):
        assert np.array_equal(b.matmul_packed(x, offs, counts, [w, w]), each(b, x, offs, counts, [w, w]))
    strided = np.repeat(x, 2)[::2]
    assert np.array_equal(b.matmul_packed(strided, [0], [2], [w]), each(b, x, [0], [2], [w]))
    with pytest.raises(ValueError, match="float32"):
        b.matmul_packed(x.astype(np.float64), [0], [2], [w])
    with pytest.raises(ValueError, match=r"rows \[3, 64\] at element 1472 do not lie inside"):
        b.matmul_packed(x, [64 * 23], [3], [w])
    with pytest.raises(ValueError, match="2 offsets and 1 counts for 2 weights"):
        b.matmul_packed(x, [0, 64], [1], [w, w])


@pytest.mark.parametrize("backend", ["reference", "host-int"])
def test_run_packed_equals_each_linear(backend):
    """Through Linear: one call where it may be, the twin where a row set must be padded or split."""
    from onebit_engine.gemm import get_backend

    rng = np.random.default_rng(14)
    b = get_backend(backend)
    lins = [Linear.from_weight(rng.standard_normal((n, 48)).astype(np.float32), b, 8) for n in (5, 17, 40)]
    for rows in (1, 8, 11):  # within a row set, and past it (the twin runs)
        x = rng.standard_normal(3 * rows * 48 + 5).astype(np.float32)
        offs = [5, 5 + rows * 48, 5 + 2 * rows * 48]
        want = np.concatenate([lin(x[o : o + rows * 48].reshape(rows, 48)).ravel() for lin, o in zip(lins, offs)])
        assert np.array_equal(run_packed(lins, x, offs, [rows] * 3), want)
    assert run_packed([], x, [], []).shape == (0,)
    with pytest.raises(ValueError, match="1 offsets and 2 counts for 3 linears"):
        run_packed(lins, x, [0], [1, 1])
