"""host-int benchmarks (run by `nox -s bench`; numbers only, no timed asserts).

Compare ``host-int-<fmt>`` rows=8 against rows=1 (the verify/step ratio) and bytes/s of the packed
weight against ``memory-bandwidth`` (a numpy copy of 256 MiB, read + write bytes counted).
"""
import numpy as np
import pytest

from onebit_engine.gemm import int_kernels
from onebit_engine.gemm.host_int import HostIntBackend
from onebit_engine.quant import FORMATS

N = K = 4096
THREADS = [1, 2] if int_kernels.HAVE_NUMBA and int_kernels.numba.config.NUMBA_NUM_THREADS >= 2 else [1]


@pytest.fixture(scope="module")
def weight():
    return np.random.default_rng(0).standard_normal((N, K)).astype(np.float32)


@pytest.mark.benchmark(group="memory-bandwidth")
def test_numpy_copy_bandwidth(benchmark):
    src = np.ones(256 * 2**20, np.uint8)
    dst = np.empty_like(src)
    benchmark(np.copyto, dst, src)
    benchmark.extra_info["bytes_moved"] = 2 * src.nbytes


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows", [1, 8, 16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_host_int_matmul(benchmark, weight, fmt, rows, threads):
    benchmark.group = f"host-int-{fmt}-4096x4096-t{threads}"
    b = HostIntBackend(weight_format=fmt, threads=threads)
    packed = b.pack(weight)
    x = np.random.default_rng(rows).standard_normal((rows, K)).astype(np.float32)
    b.matmul(x, packed)  # compile / load the numba cache outside the timing
    benchmark(b.matmul, x, packed)
    benchmark.extra_info.update(packed_weight_bytes=int(packed.data.nbytes), kernel=b.kernel)


@pytest.mark.benchmark(group="float32-reference-4096x4096")
@pytest.mark.parametrize("rows", [1, 8])
def test_reference_matmul(benchmark, weight, rows):
    wt = np.ascontiguousarray(weight.T)
    x = np.random.default_rng(rows).standard_normal((rows, K)).astype(np.float32)
    benchmark(np.matmul, x, wt)
