"""What this machine has for a big run: memory available now (``/proc/meminfo``) and free disk, and the
memory a synthesized pair needs to be served, so a run that cannot fit is refused before it starts."""
from __future__ import annotations

import shutil
from pathlib import Path

from .procfs import kib_field

GIB = 1 << 30
WORKING_BYTES = 768 << 20  # the process itself (numpy, numba, the kernels), states and activations


def available_memory() -> "int | None":
    """Bytes the kernel says a new allocation can have (MemAvailable), or None where it does not say."""
    return kib_field("/proc/meminfo", "MemAvailable")


def free_disk(folder: Path) -> int:
    """Free bytes on the file system of ``folder`` (or of its nearest existing parent)."""
    p = Path(folder).absolute()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def serve_bytes(target_bytes: int, draft_bytes: int, extra: int = 0) -> int:
    """Memory to serve a quantized pair on host-int: its packed weights (the files' bytes: the tiles hold the
    same codes; the lookup tables, mapped, count as if read whole) and the working set."""
    return target_bytes + draft_bytes + WORKING_BYTES + extra


def gib(n: "int | None") -> str:
    """A size for a message: GiB from 1 GiB up, MiB below (a shrunk shape is not "0.0 GiB")."""
    if n is None:
        return "unknown"
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.1f} MiB"


def last_level_cache_bytes() -> "int | None":
    """The last-level cache's bytes (``regime.last_level_cache``: sysfs, else sysconf), or None."""
    from .regime import last_level_cache

    return last_level_cache().size
