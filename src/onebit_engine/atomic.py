"""Atomic file writes: a reader sees the old file or the whole new one, never a torn one.

The data goes to a temporary file in the destination's folder (same file system, so the rename is
atomic), is flushed and fsync'ed, then ``os.replace`` puts it in place and the folder is fsync'ed so
the rename itself survives a crash (a folder: every file and folder in it is fsync'ed before its
rename). A failed write leaves no temporary file behind; the temporary files of earlier runs that were
killed (their pid, in the name, is gone) are removed by the next write to the same path.

Only a regular file (or a new path) is ever replaced: a symlink, FIFO, device node or folder at the
destination is refused, so ``--out`` can never turn ``/dev/full`` or a link into a plain file. New files
get the permissions the umask allows (``0666 & ~umask``); a replaced file keeps its own.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from .errors import OutputError

# temporary names: ".<dest name>.<pid>-<random>.tmp" (files) / "...tmpdir" (folders)
_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[A-Za-z0-9_]+\.tmp(dir)?$")
_UNTAGGED_STALE_S = 24 * 3600  # temps of versions before the pid tag: stale after a day


def check_replaceable(path: "str | Path", *, folder_ok: bool = False) -> None:
    """Refuse a destination that is not a regular file (or, with ``folder_ok``, a folder) or a new path. The message
    asks for what the command writes: a file, or (``folder_ok``) a folder."""
    dest = Path(path)
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(f"cannot check output {str(dest)!r}: {e.strerror}; give another path") from None
    mode = st.st_mode
    if stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode)):
        return
    if folder_ok:  # the command writes a folder there: "not a regular file" would ask for the wrong thing
        raise OutputError(f"output {str(dest)!r} is {_kind(mode)}, not a folder; refusing to replace it - give a new "
                          f"folder path (or an empty folder)")
    raise OutputError(f"output {str(dest)!r} is {_kind(mode)}, not a regular file; refusing to replace it - "
                      f"give the path of a regular file (or a new one)")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def _folder_of(dest: Path) -> Path:
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"folder {str(folder)!r} for output {str(dest)!r} does not exist; create it first")
    return folder


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def temporary_of(name: str) -> str | None:
    """The destination name a temporary of this module's writes was for (``.out.123-ab.tmp`` -> ``out``), else None."""
    m = _TMP.match(name)
    return m.group("name") if m is not None else None


def probe_writable(folder: "str | Path", name: str = "probe") -> None:
    """Create a file in ``folder`` and remove it: raises the OSError where that cannot be done (os.access lies
    on read-only mounts and for root; creating a file does not)."""
    fd, probe = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}-", suffix=".tmp", dir=folder)
    os.close(fd)
    os.unlink(probe)


def sweep_stale(dest: "str | Path") -> list[Path]:
    """Remove the temporaries that killed earlier writes of ``dest`` left behind; returns them."""
    dest = Path(dest)
    folder = dest.parent if str(dest.parent) else Path(".")
    gone = []
    with contextlib.suppress(OSError):
        for p in folder.glob(f".{_glob_escape(dest.name)}.*.tmp*"):
            m = _TMP.match(p.name)
            if m is not None and m.group("name") == dest.name:
                stale = not _pid_alive(int(m.group("pid")))
            else:  # an untagged temporary of an older version (mkstemp's own random name)
                stale = time.time() - p.lstat().st_mtime > _UNTAGGED_STALE_S
            if stale:
                with contextlib.suppress(OSError):
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                    gone.append(p)
    return gone


def _glob_escape(name: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it; set straight back
    os.umask(mask)
    return mask


def _new_mode() -> int:
    return 0o666 & ~_umask()


def _write_failed(dest: Path, e: OSError) -> OutputError:
    code = errno.errorcode.get(e.errno or 0, "error")
    way = {errno.ENOSPC: "free space on that file system or write to another one",
           errno.EDQUOT: "free space within your quota or write elsewhere",
           errno.EACCES: "check the folder's permissions or write elsewhere",
           errno.EPERM: "check the folder's permissions or write elsewhere",
           errno.EROFS: "the file system is read-only; write elsewhere"}.get(e.errno or 0, "write elsewhere")
    return OutputError(f"cannot write output {str(dest)!r}: {e.strerror or e} ({code}); nothing was written - {way}")


@contextlib.contextmanager
def atomic_path(path: "str | Path") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit fsync it and move it onto ``path``.

    For writers that insist on a file name (``safetensors.numpy.save_file``, ``np.save``)::

        with atomic_path("out.safetensors") as tmp:
            save_file(tensors, str(tmp))
    """
    dest = Path(path)
    folder = _folder_of(dest)
    check_replaceable(dest)
    sweep_stale(dest)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _write_failed(dest, e) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        try:
            with open(tmp_path, "rb+") as f:
                f.flush()
                os.fsync(f.fileno())
            try:
                mode = stat.S_IMODE(os.stat(dest).st_mode)
            except FileNotFoundError:
                mode = _new_mode()
            os.chmod(tmp_path, mode)
            check_replaceable(dest)  # again: the path may have changed while the data was written
            os.replace(tmp_path, dest)
        except OutputError:
            raise
        except OSError as e:
            raise _write_failed(dest, e) from None
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise _write_failed(dest, e) from None
        raise
    _fsync_dir(folder)


@contextlib.contextmanager
def atomic_folder(path: "str | Path") -> Iterator[Path]:
    """Yield a temporary folder next to ``path``; on a clean exit its files are fsync'ed and it becomes
    ``path`` (which must be new or an empty folder). A failed or killed write leaves no half folder at ``path``."""
    dest = Path(path)
    parent = _folder_of(dest)
    check_replaceable(dest, folder_ok=True)
    if dest.is_dir() and any(dest.iterdir()):
        raise OutputError(f"output folder {str(dest)!r} is not empty; refusing to replace what it holds - give a new "
                          f"path or empty it first")
    sweep_stale(dest)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{os.getpid()}-", suffix=".tmpdir", dir=parent))
    except OSError as e:
        raise _write_failed(dest, e) from None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700
        for f in tmp.iterdir():
            os.chmod(f, _new_mode())
        _sync_tree(tmp)
        if dest.is_dir():
            dest.rmdir()
        os.replace(tmp, dest)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise _write_failed(dest, e) from None
        raise
    _fsync_dir(parent)


def atomic_write_bytes(path: "str | Path", data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: "str | Path", text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: "str | Path", writer: Callable[[Path], None]) -> None:
    """``writer(tmp_path)`` writes the file; it is then moved onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def _sync_tree(root: Path) -> None:
    """fsync every regular file under ``root``, then its folders (deepest first): the rename that follows
    must not publish a folder whose files a crash could still leave empty (a writer's big files are synced
    already and cost nothing here; a failed fsync is a failed write and raises)."""
    folders = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        folders += [Path(dirpath) / d for d in dirnames]
        for name in filenames:
            f = Path(dirpath) / name
            if f.is_symlink() or not f.is_file():
                continue
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for folder in reversed(folders):
        _fsync_dir(folder)


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
