"""Atomic file writes: a reader sees the old file or the whole new one, never a torn one.

The data goes to a temporary file in the destination's folder (same file system, so the rename is
atomic), is flushed and fsync'ed, then ``os.replace`` puts it in place and the folder is fsync'ed so
the rename itself survives a crash. A failed write leaves no temporary file behind.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator


@contextlib.contextmanager
def atomic_path(path: "str | Path") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit fsync it and move it onto ``path``.

    For writers that insist on a file name (``safetensors.numpy.save_file``, ``np.save``)::

        with atomic_path("out.safetensors") as tmp:
            save_file(tensors, str(tmp))
    """
    dest = Path(path)
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {str(folder)!r} for {str(dest)!r} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise
    _fsync_dir(folder)


def atomic_write_bytes(path: "str | Path", data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: "str | Path", text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: "str | Path", writer: Callable[[Path], None]) -> None:
    """``writer(tmp_path)`` writes the file; it is then moved onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
