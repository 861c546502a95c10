"""host-int: every kernel == the numpy twin bitwise, row independence, and matmul == the contract formula."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine.gemm import Linear, get_backend, known_backends
from onebit_engine.gemm.host_int import int_kernels, native
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.gemm.host_int.int_kernels import gemm_int_tiled, matmul_int, matmul_int_reference
from onebit_engine.quant import FORMATS, dequantize_acc, quantize_rows, quantize_weight
from onebit_engine.quant.formats import QMAX

from .host_int_paths import kernel_params, native_params

KERNELS = kernel_params()
NATIVE = native_params()


def contract(x, w):
    """The device numerics contract of docs/CONTRACTS.md, written out independently."""
    amax = np.max(np.abs(x), axis=1)
    sa = np.array([a / np.float32(127) if a > 0 else np.float32(1.0) for a in amax], np.float32)
    xq = np.clip(np.rint(x / sa[:, None]), -127, 127).astype(np.int8)
    wmax = np.max(np.abs(w), axis=1)
    sw = np.array([m / np.float32(127) if m > 0 else np.float32(1.0) for m in wmax], np.float32)
    wq = np.clip(np.rint(w / sw[:, None]), -127, 127).astype(np.int8)
    acc = np.zeros((x.shape[0], w.shape[0]), np.int64)
    for r in range(x.shape[0]):
        acc[r] = (wq.astype(np.int64) * xq[r].astype(np.int64)).sum(axis=1)
    return (acc.astype(np.int32).astype(np.float32) * sa[:, None]) * sw[None, :]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 16), k=st.integers(1, 40).map(lambda v: 2 * v - 1), n=st.integers(1, 20).map(lambda v: 2 * v - 1),
       seed=st.integers(0, 2**32 - 1))
def test_fast_kernel_equals_numpy_twin_bitwise(kernel, fmt, m, k, n, seed):
    rng = np.random.default_rng(seed)
    qw = quantize_weight(rng.standard_normal((n, k)).astype(np.float32), fmt)
    xq = rng.integers(-127, 128, (m, k)).astype(np.int8)
    got = matmul_int(xq, fmt, qw.data, threads=1, kernel=kernel)
    assert got.dtype == np.int32
    assert np.array_equal(got, matmul_int_reference(xq, qw.codes()))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 16), k=st.integers(1, 300), n=st.integers(1, 40), seed=st.integers(0, 2**32 - 1),
       mag=st.sampled_from([1e-30, 1e-3, 1.0, 3e4, 1e30]), zero_row=st.booleans())
def test_backend_matmul_equals_numpy_twin_bitwise(kernel, fmt, m, k, n, seed, mag, zero_row):
    """The whole contract (quantize, exact product, epilogue) of each kernel == the numpy twin, any K
    (tails of every step and chunk size), N not a multiple of a tile, any magnitude, zero rows included."""
    rng = np.random.default_rng(seed)
    b = HostIntBackend(weight_format=fmt, kernel=kernel)
    packed = b.pack(rng.standard_normal((n, k)).astype(np.float32))
    x = (rng.standard_normal((m, k)) * mag).astype(np.float32)
    x[m // 2] = np.round(x[m // 2] * 2) / 2  # half-way ties after scaling are likely in some rows
    if zero_row:
        x[m - 1] = 0.0
    xq, sa = quantize_rows(x)
    want = dequantize_acc(matmul_int_reference(xq, packed.codes()), sa, packed.scale)
    got = b.matmul(x, packed)
    assert got.dtype == np.float32 and np.array_equal(got, want)


@pytest.mark.parametrize("kernel", NATIVE)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("k", [1000, 2049, 4095, 4097])
def test_large_k_and_k_blocks_do_not_change_bits(kernel, fmt, k):
    """Large K, not a multiple of a step or of 64, in every row count of a register block and two blocks;
    K blocks of 1, 3 and 1000 steps (and the kernel's own choice) only reorder exact integer sums."""
    rng = np.random.default_rng(k)
    b = HostIntBackend(weight_format=fmt, kernel=kernel)
    tw = b.pack(rng.standard_normal((37, k)).astype(np.float32))
    xq = rng.integers(-127, 128, (16, k)).astype(np.int8)
    xq[5] = 0
    want = matmul_int_reference(xq, tw.codes())
    for m in (1, 2, 7, 8, 9, 16):
        for kb in (0, 1, 3, 1000):
            assert np.array_equal(gemm_int_tiled(xq[:m], tw, kb=kb), want[:m]), (m, kb)


def _extreme_product(kernel, fmt, m, k, first_row_sign, every):
    """Activations alternating +-127 by row (row 0 of sign ``first_row_sign``); four channels: every code
    at +q, at -q, -q at every ``every``-th k, and zero over the first half. Returns (got, q)."""
    q = QMAX[fmt]
    xq = np.full((m, k), 127 * first_row_sign, np.int8)
    xq[1::2] = -127 * first_row_sign
    w = np.full((4, k), q, np.int8)
    w[1] = -q
    w[2, ::every] = -q
    w[3, : k // 2] = 0
    qw = quantize_weight(w.astype(np.float32), fmt)
    assert np.array_equal(qw.codes(), w)
    got = matmul_int(xq, fmt, qw.data, threads=1, kernel=kernel)
    assert np.array_equal(got, matmul_int_reference(xq, w))
    return got, q


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [1, 2, 8, 16])
def test_extreme_codes_do_not_wrap(kernel, fmt, m):
    """Largest K the contract allows, every code at +-127 / +-7 / +-1 and every activation at +-127: the
    int8 sums reach +-(2^31 - 1) - 4071, and the biased sums of the native paths (code + BIAS) leave int32
    before their correction brings them back; no saturation or wrap may show."""
    k = int_kernels.MAX_K
    got, q = _extreme_product(kernel, fmt, m, k, -1, 3)
    assert got[0, 0] == -k * q * 127 and got[0, 1] == k * q * 127


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fmt", ["int4", "ternary"])
@pytest.mark.parametrize("m", [1, 8, 11])
def test_extreme_codes_do_not_saturate_int16_sums(kernel, fmt, m):
    """int4 / ternary: avx2 sums whole groups of steps in int16 (4 int4 steps, 16 ternary steps) at up to
    30480 / 32512; every code at its largest biased value with x = +-127 fills each group to that bound,
    and a group one step longer would saturate. K spans several groups plus a partial one."""
    k = 3 * 16 * 128 + 77
    got, q = _extreme_product(kernel, fmt, m, k, 1, 2)
    assert got[0, 0] == k * q * 127


@pytest.mark.parametrize("fmt", FORMATS)
def test_row_is_independent_of_neighbours_and_position(fmt):
    rng = np.random.default_rng(3)
    b = HostIntBackend(weight_format=fmt)
    packed = b.pack(rng.standard_normal((37, 65)).astype(np.float32))
    row = rng.standard_normal((1, 65)).astype(np.float32)
    alone = b.matmul(row, packed)[0]
    for m in (2, 8, 9, 16, 17, 33):
        for pos in (0, m - 1):
            x = rng.standard_normal((m, 65)).astype(np.float32) * 50
            x[pos] = row[0]
            assert np.array_equal(b.matmul(x, packed)[pos], alone)


def test_host_int_equals_the_contract_formula():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((33, 71)).astype(np.float32)
    w[5] = 0.0
    x = rng.standard_normal((8, 71)).astype(np.float32) * np.float32(3)
    x[3] = 0.0
    x[6, :7] = [0.5, -0.5, 1.5, 2.5, -2.5, 127.0, -127.0]  # exact half-way ties after scaling
    b = get_backend("host-int")
    got = b.matmul(x, b.pack(w))
    assert np.array_equal(got, contract(x, w))
    assert np.array_equal(got[3], np.zeros(33, np.float32))


def test_zero_padded_rows_give_zero_through_linear():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((16, 24)).astype(np.float32)
    lin = Linear.from_weight(w, get_backend("host-int"), row_set=8)
    x = rng.standard_normal((3, 24)).astype(np.float32)
    y = lin(x)
    assert y.shape == (3, 16)
    assert np.array_equal(y, contract(np.vstack([x, np.zeros((5, 24), np.float32)]), w)[:3])


@pytest.mark.parametrize("kernel", NATIVE)
@pytest.mark.parametrize("fmt", FORMATS)
def test_native_threads_and_row_blocks_do_not_change_bits(kernel, fmt):
    # 700 x 2100 packed bytes per row are enough for the kernel to split the tiles over 2 and 3 threads
    rng = np.random.default_rng(7)
    bs = {t: HostIntBackend(weight_format=fmt, threads=t, kernel=kernel) for t in (1, 2, 3)}
    packed = bs[1].pack(rng.standard_normal((700, 2100 * int_kernels.CODES_PER_BYTE[fmt])).astype(np.float32))
    x = rng.standard_normal((16, packed.shape[1])).astype(np.float32)
    full = bs[1].matmul(x, packed)
    assert np.array_equal(full, bs[2].matmul(x, packed)) and np.array_equal(full, bs[3].matmul(x, packed))
    for rows in (1, 7, 9):  # row blocks of 8 (avx2) / 16 (vnni): a partial block, and a second pass
        assert np.array_equal(bs[1].matmul(x[:rows], packed), full[:rows])
        assert np.array_equal(bs[2].matmul(x[:rows], packed), full[:rows])


@pytest.mark.parametrize("kernel", NATIVE)
def test_native_refuses_non_finite_like_numpy(kernel):
    b = HostIntBackend(kernel=kernel)
    x = np.ones((3, 40), np.float32)
    x[1, 37], x[2, 3] = np.nan, -np.inf
    with pytest.raises(ValueError, match=r"rows \[1, 2\] hold NaN or inf"):
        b.matmul(x, b.pack(np.ones((5, 40), np.float32)))


@pytest.mark.parametrize("kernel", NATIVE)
def test_native_takes_any_layout_and_row_count(kernel):
    """Non-contiguous x, more than 16 rows, zero rows and K = 0: the same bits as the numpy twin."""
    rng = np.random.default_rng(8)
    b, ref = HostIntBackend(kernel=kernel), HostIntBackend(kernel="numpy")
    w = rng.standard_normal((21, 50)).astype(np.float32)
    p, pr = b.pack(w), ref.pack(w)
    x = rng.standard_normal((40, 100)).astype(np.float32)[:, ::2]
    assert np.array_equal(b.matmul(x, p), ref.matmul(x, pr))
    assert b.matmul(x[:0], p).shape == (0, 21)
    z = HostIntBackend(kernel=kernel)
    empty = z.pack(np.ones((3, 0), np.float32))
    assert np.array_equal(z.matmul(np.ones((2, 0), np.float32), empty), np.zeros((2, 3), np.float32))
    assert np.array_equal(gemm_int_tiled(np.zeros((2, 0), np.int8), empty), np.zeros((2, 3), np.int32))


def test_ternary_code_3_is_refused_at_pack():
    from onebit_engine.quant import QuantWeight

    bad = QuantWeight("ternary", (1, 4), np.full((1, 1), 0b11, np.uint8), np.ones(1, np.float32))
    with pytest.raises(ValueError, match="code 3"):
        HostIntBackend().pack(bad)


def test_threads_do_not_change_bits():
    if not int_kernels.HAVE_NUMBA or int_kernels.numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs numba with 2 threads")
    rng = np.random.default_rng(6)
    qw = quantize_weight(rng.standard_normal((300, 129)).astype(np.float32), "int4")
    xq = rng.integers(-127, 128, (8, 129)).astype(np.int8)
    assert np.array_equal(matmul_int(xq, "int4", qw.data, threads=1), matmul_int(xq, "int4", qw.data, threads=2))


def test_registered_and_described():
    assert "host-int" in known_backends()
    b = get_backend("host-int", weight_format="ternary", kernel="numpy")
    d = b.describe()
    assert b.exact and d["backend"] == "host-int" and d["kernel"] == "numpy"
    assert d["kernel_set"] == int_kernels.KERNEL_SETS["numpy"] and len(d["hash"]) == 16
    assert "ternary" in d["numerics"] and "half-even" in d["numerics"]


@pytest.mark.parametrize("kernel", ["numpy"] + NATIVE)
def test_pack_accepts_a_prequantized_weight(kernel):
    qw = quantize_weight(np.random.default_rng(9).standard_normal((4, 6)).astype(np.float32), "int4")
    b = HostIntBackend(kernel=kernel)
    packed = b.pack(qw)
    if kernel == "numpy":
        assert packed is qw
    else:  # re-tiled for the path; packing it again keeps it
        assert np.array_equal(packed.codes(), qw.codes()) and b.pack(packed) is packed


def test_errors_name_value_and_fix():
    with pytest.raises(ValueError, match="'int5' is unknown"):
        HostIntBackend(weight_format="int5")
    with pytest.raises(ValueError, match="NaN or inf"):
        b = HostIntBackend()
        b.matmul(np.array([[np.inf, 1.0]], np.float32), b.pack(np.ones((2, 2), np.float32)))
    with pytest.raises(ValueError, match="split the layer along K"):
        int_kernels.check_k(int_kernels.MAX_K + 1)
    with pytest.raises(ValueError, match="'avx9' is unknown"):
        HostIntBackend(kernel="avx9")
    if int_kernels.HAVE_NUMBA:
        with pytest.raises(ValueError, match="NUMBA_NUM_THREADS"):
            matmul_int(np.zeros((1, 2), np.int8), "int8", np.zeros((1, 2), np.uint8), threads=10**4)
    if native.available("avx2"):
        b = HostIntBackend(kernel="avx2")
        with pytest.raises(ValueError, match="pack it with this backend's pack"):
            b.matmul(np.ones((1, 2), np.float32), quantize_weight(np.ones((2, 2), np.float32)))


@pytest.mark.parametrize("kernel", NATIVE)
@pytest.mark.parametrize("fmt", ["int4", "ternary"])
def test_compute_bound_calls_split_by_work_with_the_same_bits(kernel, fmt):
    """int4 / ternary 768 x 768 is too few bytes for a second thread at 1 row, but at 8 rows (avx2; 16 on the
    VNNI layout, whose MACs are counted cheaper) the work splits it; the 2-thread result is the 1-thread one,
    bit for bit."""
    rng = np.random.default_rng(11)
    b1, b2 = HostIntBackend(weight_format=fmt, threads=1, kernel=kernel), HostIntBackend(weight_format=fmt, threads=2, kernel=kernel)
    p = b1.pack(rng.standard_normal((768, 768)).astype(np.float32))
    lib = native.library_for(kernel)
    m = 8 if kernel == "avx2" else 16
    assert lib.plan(p, 1, 2)["threads"] == 1 and lib.plan(p, m, 2)["threads"] == 2
    x = rng.standard_normal((m, 768)).astype(np.float32)
    assert np.array_equal(b2.matmul(x, p), b1.matmul(x, p))


@pytest.mark.parametrize("kernel", NATIVE)
def test_guided_jobs_cover_every_tile_with_the_same_bits(kernel):
    """Jobs shrink from 1/(2t) of the tiles to MIN_JOB_TILES (4) and stay within MAX_JOBS (256) on a wide
    weight; 1, 2 and 3 threads give the same bits, including a partial last tile (N = 4100)."""
    rng = np.random.default_rng(12)
    bs = {t: HostIntBackend(threads=t, kernel=kernel) for t in (1, 2, 3)}
    p = bs[1].pack(rng.standard_normal((4100, 256)).astype(np.float32))
    lib, tiles = native.library_for(kernel), p.tiles.shape[0]
    plan = lib.plan(p, 8, 3)
    assert plan["threads"] == 3 and plan["first_job_tiles"] == tiles // 6 and plan["last_job_tiles"] <= 4
    assert plan["jobs"] <= 256 and lib.plan(p, 8, 1) == {"threads": 1, "jobs": 1, "first_job_tiles": tiles, "last_job_tiles": tiles}
    x = rng.standard_normal((8, 256)).astype(np.float32)
    want = bs[1].matmul(x, p)
    assert np.array_equal(bs[2].matmul(x, p), want) and np.array_equal(bs[3].matmul(x, p), want)


@pytest.mark.parametrize("kernel", NATIVE)
def test_many_threads_plan_few_jobs(kernel):
    """Up to 64 threads on a 152064-row weight: jobs of at least 1/128 of the tiles keep the count within MAX_JOBS
    (256), so no job is a large remainder (without that floor, jobs shrinking by 1/128 would pass 256)."""
    p = HostIntBackend(kernel=kernel).pack(np.ones((152064, 64), np.float32))
    tiles, plan = p.tiles.shape[0], native.library_for(kernel).plan(p, 16, 64)
    assert plan["threads"] > 32 and plan["jobs"] <= 256 and plan["last_job_tiles"] <= tiles // 128
