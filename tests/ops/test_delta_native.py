"""delta.c (gemm/host_int, the delta rule's heads in C) against numba's ``gated_delta_fast._heads``, its
twin: the same bits of the state and of every read-out, on each path this machine can run (AVX2, AVX-512)
and on the AVX-512 source built against the scalar emulation (so a CPU without AVX-512 still checks it).
NaN payloads are not part of the claim (a compiler may swap an add's operands): where a value is NaN on
one side it must be NaN on the other; every other value is compared bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onebit_engine.ops.gated_delta_fast import gdn_token_fast

pytestmark = pytest.mark.skipif(gdn_token_fast is None, reason="numba is not installed (the fast extra)")


def _library(variant):
    from onebit_engine.gemm.host_int import native

    try:
        return native.load(variant)
    except native.NativeUnavailable as e:
        pytest.skip(f"the host-int library does not build here: {e}")


PATHS = [("main", "avx2"), ("main", "avx512"), ("emulated", "avx512")]  # every path, and the emulated 16 lanes


def _same(a, b):
    na, nb = np.isnan(a), np.isnan(b)
    return np.array_equal(na, nb) and np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32))


@pytest.mark.parametrize("variant,path", PATHS)
@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 3]), st.sampled_from([1, 5, 16]),
       st.sampled_from([1, 7, 8, 16, 20, 37, 40, 48, 80, 128]), st.integers(0, 9), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from([1, 2, 3]), st.booleans(), st.integers(0, 2**16))
def test_native_heads_are_numbas_bitwise(variant, path, hk, r, dk, dv, n, read_out, apart, nonfinite, threads, by_pointer,
                                         seed):
    """Every head and read-out as numba gives it, on 1 to 3 threads of the pool (the heads are independent jobs),
    the arrays passed by object address or (``by_pointer``, where the object layout check fails) by pointer."""
    from onebit_engine.ops.gated_delta_fast import _heads

    from onebit_engine.gemm.host_int.native import DELTA_PATHS

    lib = _library(variant)
    pid = DELTA_PATHS[path]
    if not lib.delta_path_ok(pid):
        pytest.skip(f"delta path {path} does not run on this CPU ({variant} library)")
    rng = np.random.default_rng(seed)
    hv = hk * r
    v0 = 2 * hk * dk
    C = v0 + hv * dv + int(rng.integers(0, 3))  # a wider row than the heads use: the row stride is C
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    S0, ks, qs, xs = f(hv, dk, dv), f(n, hk, dk), f(n, hk, dk), f(n, C)
    alphas, betas = rng.uniform(0.01, 1, (n, hv)).astype(np.float32), rng.uniform(0, 1, (n, hv)).astype(np.float32)
    if nonfinite:
        S0[rng.random(S0.shape) < 0.03] = np.nan
        ks[rng.random(ks.shape) < 0.03] = np.inf
    a, o_a = S0.copy(), np.zeros((n, hv, dv), np.float32)
    _heads(a, alphas, betas, ks, qs, xs, o_a if read_out else np.empty((0, hv, dv), np.float32), r, v0, read_out, a)
    src = S0.copy()
    b = f(hv, dk, dv) if apart else src  # apart: written from a start state it must leave as it was
    o_b = np.zeros((n, hv, dv), np.float32)
    off = lib.data_off
    lib.data_off = -1 if by_pointer else off
    try:
        lib.delta_heads(b, src, alphas, betas, ks, qs, xs, o_b if read_out else None, v0, pid, threads)
    finally:
        lib.data_off = off
    assert _same(a, b)
    if read_out:
        assert _same(o_a, o_b)
    if apart:
        assert _same(src, S0)


def test_native_heads_refuse_what_describes_no_call():
    from onebit_engine.gemm.host_int.native import DELTA_PATHS

    lib = _library("main")
    S = np.zeros((2, 4, 4), np.float32)
    ok = dict(alphas=np.ones((1, 2), np.float32), betas=np.ones((1, 2), np.float32), ks=np.ones((1, 1, 4), np.float32),
              qs=np.ones((1, 1, 4), np.float32), xs=np.ones((1, 16), np.float32))
    with pytest.raises(ValueError, match="do not describe one call"):
        lib.delta_heads(S, S.astype(np.float64), ok["alphas"], ok["betas"], ok["ks"], ok["qs"], ok["xs"], None, 8,
                        DELTA_PATHS["avx2"])
    with pytest.raises(ValueError, match="code -2"):  # v0 + HV dv past the row
        lib.delta_heads(S, S, ok["alphas"], ok["betas"], ok["ks"], ok["qs"], ok["xs"], None, 12, DELTA_PATHS["avx2"])
    with pytest.raises(ValueError, match="code -3"):
        lib.delta_heads(S, S, ok["alphas"], ok["betas"], ok["ks"], ok["qs"], ok["xs"], None, 8, 7)
    with pytest.raises(ValueError, match="code -2"):  # no thread to run on
        lib.delta_heads(S, S, ok["alphas"], ok["betas"], ok["ks"], ok["qs"], ok["xs"], None, 8, DELTA_PATHS["avx2"], 0)


@pytest.mark.parametrize("variant,path", PATHS)
@settings(max_examples=8, deadline=None)
@given(st.integers(1, 8), st.booleans(), st.sampled_from([16, 20]), st.integers(0, 2**16))
def test_native_heads_on_the_pool_are_one_threads_bitwise(variant, path, n, apart, hv, seed):
    """A 0.8B layer's heads (16 of 128 x 128), big enough that the work rule hands them to the pool: 2 and 3
    threads give the bits of 1 and of numba, state and read-out; small calls stay on one thread. A job runs a run
    of contiguous heads (delta.c): 20 heads on 2 threads end in a shorter run (3 a job, the last 2), on 3 in
    even ones (2 a job); a head run twice or never changes the state. A head of a run computes with the next one's
    states prefetched (AVX-512 path), on 128-wide heads in 8 blocks at once: neither may change a bit."""
    from onebit_engine.ops.gated_delta_fast import _heads

    from onebit_engine.gemm.host_int.native import DELTA_PATHS

    lib = _library(variant)
    pid = DELTA_PATHS[path]
    if not lib.delta_path_ok(pid):
        pytest.skip(f"delta path {path} does not run on this CPU ({variant} library)")
    dk, dv = 128, 128
    assert lib.delta_threads(n, hv, dk, dv, 2) == 2 and lib.delta_threads(n, 2, 64, 64, 2) == 1
    rng = np.random.default_rng(seed)
    v0, C = 2 * hv * dk, 3 * hv * dk
    f = lambda *s: (rng.standard_normal(s) / 8).astype(np.float32)  # noqa: E731
    S0, ks, qs, xs = f(hv, dk, dv), f(n, hv, dk), f(n, hv, dk), f(n, C)
    alphas, betas = rng.uniform(0.5, 1, (n, hv)).astype(np.float32), rng.uniform(0, 1, (n, hv)).astype(np.float32)
    a, o_a = S0.copy(), np.zeros((n, hv, dv), np.float32)
    _heads(a, alphas, betas, ks, qs, xs, o_a, 1, v0, True, a)
    for threads in (1, 2, 3):
        src = S0.copy()
        b, o_b = (np.empty_like(S0) if apart else src), np.zeros((n, hv, dv), np.float32)
        lib.delta_heads(b, src, alphas, betas, ks, qs, xs, o_b, v0, pid, threads)
        assert _same(a, b) and _same(o_a, o_b), threads
