"""The tile arena: weights carved in order, aligned, never overlapping; big ones apart; huge pages where the
OS gives them (checked in /proc/self/smaps, so a lost madvise cannot pass unseen); a written weight's pages
collapsed into huge pages (``settle``), its bytes kept, the kernel's refusals tolerated."""
import errno
from pathlib import Path

import numpy as np
import pytest

from onebit_engine.gemm.host_int.arena import ALIGN, HUGE, TileArena, huge_buffer, settle
from onebit_engine.gemm.host_int.backend import HostIntBackend

from .host_int_paths import native_params

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def test_carves_aligned_disjoint_arrays():
    arena = TileArena(chunk=1 << 20)
    parts = [arena.empty((int(n), 3)) for n in np.random.default_rng(0).integers(1, 20000, 60)]
    spans = sorted((p.ctypes.data, p.ctypes.data + p.nbytes) for p in parts)
    assert all(a % ALIGN == 0 for a, _ in spans)
    assert all(b0 <= a1 for (_, b0), (a1, _) in zip(spans, spans[1:]))  # no overlap
    for i, p in enumerate(parts):
        p[...] = i % 251
    assert all(np.all(p == i % 251) for i, p in enumerate(parts))
    assert all(p.dtype == np.uint8 and p.flags.c_contiguous for p in parts)
    big = arena.empty((1 << 19, 2))  # above a quarter chunk: its own mapping
    assert big.ctypes.data % HUGE == 0 and big.shape == (1 << 19, 2)


@pytest.mark.parametrize("kernel", native_params())
def test_backend_packs_into_the_arena(kernel):
    b = HostIntBackend(kernel=kernel)
    ws = [b.pack(np.ones((n, 64), np.float32)) for n in (16, 40, 3)]
    bases = {id(w.tiles.base) for w in ws}
    assert len(bases) == 1 and next(iter(bases)) is not None  # three small weights in one chunk


def _anon_huge_kb(addr: int) -> int:
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(v, 16) for v in head.split("-"))
            if lo <= addr < hi:
                for rest in lines[i + 1:]:
                    if rest.startswith("AnonHugePages:"):
                        return int(rest.split()[1])
    raise AssertionError(f"address {addr:#x} is in no mapping of /proc/self/smaps")


@pytest.mark.skipif(not THP.is_file() or "[never]" in THP.read_text(), reason="transparent huge pages are off or absent here")
def test_chunks_get_huge_pages():
    buf = huge_buffer(8 * HUGE)
    buf[:] = 1  # touch every page
    assert _anon_huge_kb(buf.ctypes.data) >= 2048, "the arena's chunk got no huge page: madvise(MADV_HUGEPAGE) was lost"


@pytest.mark.skipif(not THP.is_file() or "[never]" in THP.read_text(), reason="transparent huge pages are off or absent here")
def test_the_process_count_of_huge_pages_sees_a_new_chunk():
    from onebit_engine.measure.procfs import huge_page_bytes

    before = huge_page_bytes()
    buf = huge_buffer(8 * HUGE)
    buf[:] = 1
    assert huge_page_bytes() - before >= HUGE  # what the benchmarks record (scale_bench's huge_page_bytes)


def _small_page_buffer(nbytes: int) -> np.ndarray:
    """Memory written while not yet marked for huge pages (so in 4 KiB pages), then marked, as the arena's is."""
    import mmap

    m = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(m, np.uint8)
    off = (-whole.ctypes.data) % HUGE
    m.madvise(mmap.MADV_NOHUGEPAGE)
    buf = whole[off: off + nbytes]
    buf[:] = np.arange(nbytes, dtype=np.uint64).astype(np.uint8)  # every page written, in small pages
    m.madvise(mmap.MADV_HUGEPAGE)
    return buf


def _kernel_at_least(major: int, minor: int) -> bool:
    import platform

    try:
        return tuple(int(v) for v in platform.release().split(".")[:2]) >= (major, minor)
    except ValueError:  # a release string that is not x.y...: assume the feature is there, so the test runs
        return True


@pytest.mark.skipif(not THP.is_file() or "[never]" in THP.read_text(), reason="transparent huge pages are off or absent here")
@pytest.mark.skipif(not _kernel_at_least(6, 1), reason="MADV_COLLAPSE came in Linux 6.1")
def test_settle_moves_written_small_pages_into_huge_pages_keeping_every_byte():
    buf = _small_page_buffer(4 * HUGE)
    want = buf.copy()
    assert _anon_huge_kb(buf.ctypes.data) == 0
    assert settle(buf[HUGE // 2: HUGE // 2 + 10])  # touches the first huge page only
    assert _anon_huge_kb(buf.ctypes.data) == 2048  # the huge page the span touches, not the others
    assert settle(buf)
    assert _anon_huge_kb(buf.ctypes.data) == 4 * 2048 and np.array_equal(buf, want)


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EAGAIN, errno.ENOMEM])
def test_settle_refusals_leave_the_pages_and_other_errors_raise(monkeypatch, code):
    import ctypes

    from onebit_engine.gemm.host_int import arena

    calls = []

    def fake(addr, n, advice):
        calls.append((addr, n, advice))
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(arena, "_MADVISE", fake)
    buf = huge_buffer(3 * HUGE)
    assert settle(buf[HUGE + 5: 2 * HUGE + 1]) is False
    assert calls == [(buf.ctypes.data + HUGE, 2 * HUGE, arena.MADV_COLLAPSE)]  # whole huge pages around the span
    code = errno.EFAULT
    with pytest.raises(OSError, match="MADV_COLLAPSE.*EFAULT"):
        settle(buf)


@pytest.mark.parametrize("kernel", native_params())
def test_packing_settles_each_weight_and_makes_its_descriptor(monkeypatch, kernel):
    from onebit_engine.gemm.host_int import backend as backend_mod

    seen = []
    monkeypatch.setattr(backend_mod, "settle", lambda tiles: seen.append(tiles) or True)
    b = HostIntBackend(kernel=kernel)
    ws = [b.pack(np.ones((n, 64), np.float32)) for n in (16, 40)]
    assert [t.ctypes.data for t in seen] == [w.tiles.ctypes.data for w in ws]
    # made at load, not at a weight's first call (a MoE decode meets most experts for the first time)
    assert all("c_struct" in vars(w) for w in ws)
