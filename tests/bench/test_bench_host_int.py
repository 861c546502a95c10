"""host-int benchmarks (run by `nox -s bench`; numbers only, no timed asserts).

Groups ``host-int-<path>-<fmt>-4096x4096-t<threads>`` hold rows 1, 8 and 16, one group per kernel path
(``avx512vnni``, ``avx2``: each one the CPU supports; a path it lacks is a skip naming the missing cpuid
flag; the emulated VNNI path is a test aid and is not benchmarked): the verify(8)/step ratio is rows=8
over rows=1. ``host-int-<path>-layers-<model>`` times one step's GEMMs of the built-in pair's shapes
(``tools/host_int_report.py layers``) at 1 and 8 rows. ``memory-bandwidth`` holds a read stream of 128 MiB on 1 and 2 threads (the
roofline of a kernel that only reads its weights; ``onebit_engine.measure.membw``) and a numpy copy of
256 MiB (read + write bytes counted); the 1-row bandwidth fraction is
``packed_weight_bytes / time(rows=1)`` over them. tools/host_int_report.py interleaves the same
measurements, which is what docs/benchmarks.md quotes. The figures and
the commands are in docs/host-int.md. With benchmarks disabled (the host suite) every test runs
once on a small shape, so the setup stays light.
"""
import numpy as np
import pytest

from onebit_engine.gemm.host_int import native
from onebit_engine.gemm.host_int.backend import DISPATCH, HostIntBackend
from onebit_engine.measure.membw import ReadStream
from onebit_engine.quant import FORMATS

THREADS = [1, 2]  # explicit: the native kernel starts its own threads; numba needs NUMBA_NUM_THREADS >= 2
PATHS = [pytest.param(p, marks=pytest.mark.skipif(bool(native.path_unavailable(p)), reason=native.path_unavailable(p) or "-"))
         for p in DISPATCH]
# one step's GEMMs (N x K) of the built-in pair, as in tools/host_int_report.py layers
LAYERS = {
    "target": [(584, 192)] * 3 + [(192, 192)] * 3 + [(576, 192), (192, 192)] + [(1024, 192)] * 4 + [(192, 512)] * 4
    + [(4096, 192)],
    "draft": [(192, 192), (96, 192), (512, 192), (192, 512), (48, 192), (192, 576), (32, 192), (4096, 192)],
}


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
@pytest.mark.parametrize("path", PATHS)
def test_host_int_matmul(benchmark, weight, size, path, fmt, rows, threads):
    b = HostIntBackend(weight_format=fmt, threads=threads, kernel=path)
    benchmark.group = f"host-int-{path}-{fmt}-{size}x{size}-t{threads}"
    packed = b.pack(weight)
    x = np.random.default_rng(rows).standard_normal((rows, size)).astype(np.float32)
    b.matmul(x, packed)  # build / load the kernel outside the timing
    benchmark(b.matmul, x, packed)
    benchmark.extra_info.update(packed_weight_bytes=int(packed.tiles.nbytes), kernel=b.kernel)


@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("model", sorted(LAYERS))
@pytest.mark.parametrize("path", PATHS)
def test_host_int_layers(benchmark, path, model, rows):
    """One step's GEMMs of the built-in pair (int8, 1 thread): dominated by per-call and per-channel costs."""
    b = HostIntBackend(threads=1, kernel=path)
    benchmark.group = f"host-int-{path}-layers-{model}"
    rng = np.random.default_rng(0)
    packed = [b.pack(rng.standard_normal(s).astype(np.float32)) for s in LAYERS[model]]
    xs = {k: rng.standard_normal((rows, k)).astype(np.float32) for k in {k for _, k in LAYERS[model]}}

    def step():
        for p in packed:
            b.matmul(xs[p.shape[1]], p)

    step()
    benchmark(step)
    benchmark.extra_info.update(kernel=b.kernel, gemms=len(packed), rows=rows)


@pytest.mark.parametrize("rows", [1, 8])
def test_reference_matmul(benchmark, weight, size, rows):
    benchmark.group = f"float32-reference-{size}x{size}"
    wt = np.ascontiguousarray(weight.T)
    x = np.random.default_rng(rows).standard_normal((rows, size)).astype(np.float32)
    benchmark(np.matmul, x, wt)
