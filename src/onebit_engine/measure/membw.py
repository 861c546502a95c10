"""Memory bandwidth probes for the benchmarks (tools/host_int_report.py, tests/bench).

``ReadStream`` is the roofline of a kernel that only reads its weights: one read of a uint8 buffer far
larger than the caches. By default the max of ``threads`` contiguous parts reduced on that many Python
threads (numpy releases the GIL inside the reduction): on the 2-vCPU Zen 3 VM as fast as a hand-written
AVX2 load loop (~13 GB/s on 1 thread, ~20 GB/s on 2, measured side by side), but on Zen 5 it stops at
~35 GB/s on 2 threads where the host-int kernel itself streams ~60. With ``native`` (the host-int
library) the read is that library's own loop on its own pool, which is the bound the kernel can reach.
``copy_seconds`` is the older yardstick, a numpy copy (read + write bytes are both counted).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


class ReadStream:
    """``seconds()`` times one read of ``nbytes``; ``parts_max()`` is the value it reduces to."""

    def __init__(self, nbytes: int = 128 * 2**20, threads: int = 1, buf: "np.ndarray | None" = None, native=None):
        """``buf``: a uint8 buffer to read (shared by streams of other thread counts), else a new one.
        ``native``: the host-int library (``NativeKernel``): read with its ``read_stream`` on its own thread
        pool, 64-byte loads with its kernels' prefetch, instead of numpy reductions on Python threads."""
        self.native = native
        nbytes = nbytes if buf is None else buf.nbytes
        if threads < 1 or nbytes < threads:
            raise ValueError(f"threads = {threads} and nbytes = {nbytes}: need 1 <= threads <= nbytes")
        self.buf = np.ones(nbytes, np.uint8) if buf is None else buf  # written once, so every page is backed
        self.threads = threads
        edges = [nbytes * i // threads for i in range(threads + 1)]
        self.parts = [self.buf[a:b] for a, b in zip(edges, edges[1:])]
        self._pool = ThreadPoolExecutor(threads) if threads > 1 and native is None else None

    @property
    def nbytes(self) -> int:
        return int(self.buf.nbytes)

    def parts_max(self) -> int:
        if self.native is not None:
            return self.native.read_stream(self.buf, self.threads)
        if self._pool is None:
            return int(self.parts[0].max())
        return int(max(self._pool.map(np.max, self.parts)))

    def seconds(self) -> float:
        t = time.perf_counter()
        self.parts_max()
        return time.perf_counter() - t

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


PROBE_BYTES = 64 * 2**20  # twice the 32 MiB last-level cache of these CPUs: the read comes from memory


def stream_gb_s(stream, reads: int) -> float:
    """The memory's rate this moment: ``stream``'s (a ``ReadStream``) bytes over the fastest of ``reads`` reads, GB/s
    (a shared VM's single reads scatter by ~20%; a bound is the best the memory does)."""
    if reads < 1:
        raise ValueError(f"reads={reads}: a rate needs at least one read")
    return stream.nbytes / min(stream.seconds() for _ in range(reads)) / 1e9


def rate_probe(stream: ReadStream, reads: int = 2):
    """A ``StagePlanner`` probe: () -> (``stream_gb_s`` of ``stream`` now, the seconds the probe took)."""
    if reads < 1:
        raise ValueError(f"reads={reads}: a rate needs at least one read")

    def probe() -> tuple[float, float]:
        t0 = time.perf_counter()
        return stream_gb_s(stream, reads), time.perf_counter() - t0

    return probe


def memory_probe(threads: int, native=None, nbytes: int = PROBE_BYTES, reads: int = 2):
    """A ``StagePlanner`` probe like ``rate_probe`` whose ``ReadStream`` (``nbytes``, ``threads``, ``native``) is made
    on its first call and kept: a run whose planner never probes holds no buffer. The first call's time is that of
    its reads only (the planner stops probing once a probe costs over ``PROBE_SHARE`` of a pass; making and
    touching the buffer once is not the probe's cost)."""
    made: list = []

    def probe() -> tuple[float, float]:
        if not made:
            made.append(rate_probe(ReadStream(nbytes, threads=threads, native=native), reads))
        return made[0]()

    return probe


def host_library(backend):
    """The host-int library behind ``backend`` (its read loop is the bound its kernels can reach), else None."""
    return getattr(backend, "library", None)


def copy_seconds(src: np.ndarray, dst: np.ndarray) -> float:
    """Time of one ``np.copyto(dst, src)``; its bandwidth is ``2 * src.nbytes / seconds``."""
    t = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t
