"""The read-stream probe must read every byte of its buffer, on any number of threads."""
import numpy as np
import pytest

from onebit_engine.measure.membw import ReadStream, copy_seconds


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("where", [0, 4096, -1])
def test_read_stream_sees_every_byte(threads, where):
    rs = ReadStream(nbytes=3 * 2**16 + 5, threads=threads)
    try:
        assert rs.parts_max() == 1
        rs.buf[where] = 200  # a byte in the first, a middle or the last part
        assert rs.parts_max() == 200 and rs.seconds() > 0
        assert sum(p.nbytes for p in rs.parts) == rs.nbytes
    finally:
        rs.close()


def test_copy_and_errors():
    src, dst = np.arange(1000, dtype=np.uint8), np.zeros(1000, np.uint8)
    assert copy_seconds(src, dst) >= 0 and np.array_equal(src, dst)
    with pytest.raises(ValueError, match="threads = 0"):
        ReadStream(nbytes=10, threads=0)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_native_read_stream_reads_every_byte(threads):
    from onebit_engine.gemm.host_int import native

    if not native.available("avx2"):
        pytest.skip("the native host-int library does not build here")
    lib = native.load("main")
    buf = np.zeros(3 * 2**16 + 5, np.uint8)
    for where, bit in ((0, 1), (2**16 + 3, 4), (buf.size - 1, 64)):  # first byte, mid-job, the tail past 64-byte steps
        buf[where] |= bit
        rs = ReadStream(threads=threads, buf=buf, native=lib)
        assert rs.parts_max() == int(np.bitwise_or.reduce(buf)) and rs.seconds() > 0
        rs.close()


def test_rate_probe_is_the_fastest_of_its_reads():
    """The planner's probe: the fastest of its reads, as GB/s of the stream's bytes, and the time it spent."""
    import pytest

    from onebit_engine.measure.membw import rate_probe

    class Stream:
        nbytes = 64 * 2**20
        times = iter([0.004, 0.002, 0.003])

        def seconds(self):
            return next(self.times)

    rate, spent = rate_probe(Stream(), reads=2)()
    assert rate == pytest.approx(64 * 2**20 / 0.002 / 1e9) and spent >= 0.0
    with pytest.raises(ValueError, match="reads=0"):
        rate_probe(Stream(), reads=0)


def test_memory_probe_makes_its_buffer_on_first_use_and_times_only_reads(monkeypatch):
    """The CLI's probe: no buffer until the planner first probes, then the same stream every call; the time it
    reports is that of its reads, not of making and touching the buffer (else the planner would stop probing
    after one call)."""
    import time

    from onebit_engine.measure import membw

    made = []

    class Stream:
        def __init__(self, nbytes, threads, native):
            made.append((nbytes, threads, native))
            time.sleep(0.05)  # making a buffer is slow; the probe must not count it
            self.nbytes = nbytes

        def seconds(self):
            return 0.001

    monkeypatch.setattr(membw, "ReadStream", Stream)
    probe = membw.memory_probe(2, native="lib", nbytes=1000, reads=1)
    assert made == []
    rate, spent = probe()
    assert made == [(1000, 2, "lib")] and rate == 1000 / 0.001 / 1e9 and spent < 0.04
    probe()
    assert len(made) == 1


def test_host_library_is_the_backends_own_read_loop_or_none():
    """The probe reads with the host-int library the kernels run in (where the backend has one), else numpy."""
    from onebit_engine.gemm import get_backend
    from onebit_engine.gemm.host_int.backend import HostIntBackend
    from onebit_engine.measure.membw import host_library

    assert host_library(get_backend("reference")) is None
    b = HostIntBackend(kernel="numpy")  # no native library on this kernel
    assert host_library(b) is None and b.library is None
    native = HostIntBackend()  # this CPU's fastest path: the native library where it builds
    assert host_library(native) is native.library
