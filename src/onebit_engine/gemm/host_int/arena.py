"""Where packed weights live: large anonymous mappings marked for transparent huge pages, carved in order.

Why: a MoE token streams 8-10 experts of ~1.5 MiB each per layer, every one from a different place. In 4 KiB
pages every expert is 384 TLB misses and 384 page boundaries the hardware prefetcher stops at; numpy asks for
huge pages only for arrays of 4 MiB and more, so small weights never got them. Measured on a Zen 4 (int4 experts
of a 35B-A3B layer, 9 at a time, cold): 23.7 -> 27.0 GB/s at 2 threads, 17.3 -> 22.1 GB/s at 1 thread.

Nothing here changes a bit: a weight's tiles are the same bytes wherever they sit. Where the OS has no
``MADV_HUGEPAGE`` (or transparent huge pages are off) the chunks are plain memory. Chunks are freed when the
last weight in them is; the arena keeps only the chunk it is carving (untouched pages of it are not resident,
but for the rest of a huge page ``settle`` collapsed).
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import sys

import numpy as np

HUGE = 2 << 20  # a transparent huge page on x86-64
CHUNK = 64 << 20
ALIGN = 64  # a cache line: every weight starts on one
MADV_COLLAPSE = getattr(mmap, "MADV_COLLAPSE", 25)  # Linux 6.1+; Python 3.11's mmap module does not name it
# a kernel without MADV_COLLAPSE (EINVAL), THP off or no huge page to be had now (EAGAIN, ENOMEM): the pages
# stay as they are, same bits
_COLLAPSE_REFUSED = (errno.EINVAL, errno.EAGAIN, errno.ENOMEM, errno.EPERM, errno.EBUSY)


def huge_buffer(nbytes: int) -> np.ndarray:
    """uint8 [nbytes], starting on a huge-page boundary, asked to be backed by huge pages."""
    size = -(-max(nbytes, 1) // HUGE) * HUGE
    m = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(m, np.uint8)  # keeps the mapping alive as long as any view of it
    off = (-whole.ctypes.data) % HUGE
    if hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE, off, size)
        except OSError:  # THP not built into this kernel: ordinary pages, same bits
            pass
    return whole[off : off + nbytes]


def _libc_madvise():
    if not sys.platform.startswith("linux"):  # advice 25 is MADV_COLLAPSE on Linux only
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    fn = getattr(libc, "madvise", None)
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


def settle(tiles: np.ndarray) -> bool:
    """Ask the kernel to move a written weight's pages into huge pages now (``MADV_COLLAPSE``), over the huge
    pages it touches. Why: a fault only gets a huge page if 2 MiB of free memory lie together, and after a
    model's file has gone through the page cache they mostly do not: a 27B-shaped int4 target had 7-9 of its
    ~14 GB in huge pages, and its GEMMs on 4 KiB pages ran 1.17x (1 row) to 1.20x (8 rows) slower (Zen 4,
    cold 34816 x 5120 int4). The collapse compacts memory as it goes. Huge pages the span shares with its
    neighbours are collapsed too: their other bytes are this arena's, kept as they are (written or not yet).
    Returns whether the kernel did it; refusals (no such advice, none to be had) leave the pages as they are."""
    if _MADVISE is None or tiles.nbytes == 0:
        return False
    lo = tiles.ctypes.data // HUGE * HUGE
    hi = -(-(tiles.ctypes.data + tiles.nbytes) // HUGE) * HUGE
    if _MADVISE(lo, hi - lo, MADV_COLLAPSE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _COLLAPSE_REFUSED:
        return False
    raise OSError(err, f"madvise(MADV_COLLAPSE) of {hi - lo} bytes at {lo:#x}: {errno.errorcode.get(err, err)}")


class TileArena:
    """Hands out C-contiguous uint8 arrays for tiles; requests above a quarter chunk get a mapping of their own."""

    def __init__(self, chunk: int = CHUNK):
        self.chunk_bytes = chunk
        self._chunk: "np.ndarray | None" = None
        self._used = 0

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        if n > self.chunk_bytes // 4:
            return huge_buffer(n).reshape(shape)
        lo = -(-self._used // ALIGN) * ALIGN
        if self._chunk is None or lo + n > self._chunk.size:
            self._chunk, lo = huge_buffer(self.chunk_bytes), 0
        self._used = lo + n
        return self._chunk[lo : lo + n].reshape(shape)
