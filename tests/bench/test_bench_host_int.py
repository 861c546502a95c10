"""host-int benchmarks (run by `nox -s bench`; numbers only, no timed asserts).

Groups ``host-int-<fmt>-4096x4096-t<threads>`` hold rows 1, 8 and 16: the verify(8)/step ratio is
rows=8 over rows=1. ``memory-bandwidth`` holds a read stream of 128 MiB on 1 and 2 threads (the
roofline of a kernel that only reads its weights; ``onebit_engine.membw``) and a numpy copy of
256 MiB (read + write bytes counted); the 1-row bandwidth fraction is
``packed_weight_bytes / time(rows=1)`` over them. tools/host_int_report.py interleaves the same
measurements, which is what docs/benchmarks.md quotes. The figures and
the commands are in docs/host-int.md. With benchmarks disabled (the host suite) every test runs
once on a small shape, so the setup stays light.
"""
import numpy as np
import pytest

from onebit_engine.gemm import int_kernels
from onebit_engine.gemm.host_int import HostIntBackend
from onebit_engine.membw import ReadStream
from onebit_engine.quant import FORMATS

THREADS = [1, 2]  # explicit: the native kernel starts its own threads; numba needs NUMBA_NUM_THREADS >= 2


@pytest.fixture(scope="module")
def size(pytestconfig):
    return 256 if pytestconfig.getoption("benchmark_disable", False) else 4096


@pytest.fixture(scope="module")
def weight(size):
    return np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)


@pytest.mark.benchmark(group="memory-bandwidth")
def test_numpy_copy_bandwidth(benchmark, size):
    src = np.ones((256 if size == 4096 else 1) * 2**20, np.uint8)
    dst = np.empty_like(src)
    benchmark(np.copyto, dst, src)
    benchmark.extra_info["bytes_moved"] = 2 * src.nbytes


@pytest.mark.benchmark(group="memory-bandwidth")
@pytest.mark.parametrize("threads", THREADS)
def test_read_stream_bandwidth(benchmark, size, threads):
    stream = ReadStream(nbytes=(128 if size == 4096 else 1) * 2**20, threads=threads)
    try:
        benchmark(stream.parts_max)
    finally:
        stream.close()
    benchmark.extra_info["bytes_read"] = stream.nbytes


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("rows", [1, 8, 16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_host_int_matmul(benchmark, weight, size, fmt, rows, threads):
    b = HostIntBackend(weight_format=fmt, threads=threads)
    if b.kernel == "numba" and threads > int_kernels.numba.config.NUMBA_NUM_THREADS:
        pytest.skip(f"numba was started with NUMBA_NUM_THREADS < {threads}")
    benchmark.group = f"host-int-{fmt}-{size}x{size}-t{threads}"
    packed = b.pack(weight)
    x = np.random.default_rng(rows).standard_normal((rows, size)).astype(np.float32)
    b.matmul(x, packed)  # build / load the kernel outside the timing
    benchmark(b.matmul, x, packed)
    benchmark.extra_info.update(packed_weight_bytes=int(packed.data.nbytes), kernel=b.kernel)


@pytest.mark.parametrize("rows", [1, 8])
def test_reference_matmul(benchmark, weight, size, rows):
    benchmark.group = f"float32-reference-{size}x{size}"
    wt = np.ascontiguousarray(weight.T)
    x = np.random.default_rng(rows).standard_normal((rows, size)).astype(np.float32)
    benchmark(np.matmul, x, wt)
