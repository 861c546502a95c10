"""Facts the Linux kernel reports about this machine and process in ``/proc`` (no project imports, so every
measuring module may read them)."""
from __future__ import annotations

from pathlib import Path


def kib_field(path: str, key: str) -> "int | None":
    """Bytes of the ``key: N kB`` line of a ``/proc`` file, or None where the file or the line is absent."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def huge_page_bytes() -> "int | None":
    """This process's anonymous memory in transparent huge pages. A benchmark records it: weights streamed
    through 4 KiB pages run slower (a memory-bound plain step most), so runs that differ in it differ."""
    return kib_field("/proc/self/smaps_rollup", "AnonHugePages")
