"""Build and load the native host-int kernel (``host_int_kernel.c``) with ctypes.

The compiler is Zig's bundled clang from the ``ziglang`` PyPI package (``python -m ziglang cc``), so
the build needs nothing outside the package registry and every machine compiles with the same
pinned compiler. The library is built on first use into ``_native/`` beside this file (or the temp
directory when that is read-only), named by the sha256 of the source, the flags and the compiler
version, so a changed kernel never loads a stale library. Nothing here reads the environment.

``load()`` returns a :class:`NativeKernel` or raises :class:`NativeUnavailable` with the reason
(no ziglang, no AVX2, compiler error); callers fall back to numba or numpy.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..quant.formats import QuantWeight

SOURCE = Path(__file__).with_name("host_int_kernel.c")
HEADERS = (Path(__file__).with_name("host_int_pool.h"),)  # included by SOURCE
FLAGS = ("-O2", "-mavx2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-lpthread")
ABI_VERSION = 1
FORMAT_IDS = {"int8": 0, "int4": 1, "ternary": 2}
_LOADED: "NativeKernel | None" = None
_ERROR: "str | None" = None


class NativeUnavailable(RuntimeError):
    """The native kernel cannot be built or run here; the message says why."""


def _zig_version() -> str:
    try:
        import ziglang  # noqa: F401
    except ImportError as e:
        raise NativeUnavailable("the native kernel needs the ziglang package: pip install ziglang") from e
    out = subprocess.run([sys.executable, "-m", "ziglang", "version"], capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise NativeUnavailable(f"python -m ziglang version failed: {out.stderr.strip()}")
    return out.stdout.strip()


def build_id() -> str:
    """sha256 (16 hex digits) of the kernel source, its headers and flags (the compiler version is added at build)."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for header in HEADERS:
        h.update(header.read_bytes())
    h.update(" ".join(FLAGS).encode())
    return h.hexdigest()[:16]


def _cache_dir() -> Path:
    here = SOURCE.parent / "_native"
    try:
        here.mkdir(exist_ok=True)
        (here / ".gitignore").write_text("*\n")  # build products, never committed
        probe = here / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return here
    except OSError:
        alt = Path(tempfile.gettempdir()) / "onebit-engine-native"
        alt.mkdir(exist_ok=True)
        return alt


def build(out_dir: "Path | None" = None) -> Path:
    """Compile the kernel (if not already built) and return the shared library's path."""
    zig = _zig_version()
    tag = hashlib.sha256(f"{build_id()} zig {zig}".encode()).hexdigest()[:16]
    out_dir = Path(out_dir) if out_dir is not None else _cache_dir()
    lib = out_dir / f"onebit_host_int_{tag}.so"
    if lib.exists():
        return lib
    tmp = out_dir / f".{lib.name}.{os.getpid()}.tmp"
    cmd = [sys.executable, "-m", "ziglang", "cc", *FLAGS, "-o", str(tmp), str(SOURCE)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode:
        tmp.unlink(missing_ok=True)
        raise NativeUnavailable(f"building the native kernel failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    os.replace(tmp, lib)  # atomic: concurrent builders (pytest-xdist workers) never see a partial file
    return lib


class NativeKernel:
    """ctypes bindings of the two entry points; ``compiler`` and ``build_id`` go into provenance."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = lib = ctypes.CDLL(str(path))
        lib.onebit_hi_abi_version.restype = ctypes.c_int
        lib.onebit_hi_cpu_ok.restype = ctypes.c_int
        if lib.onebit_hi_abi_version() != ABI_VERSION:
            raise NativeUnavailable(f"{path} has ABI {lib.onebit_hi_abi_version()}, expected {ABI_VERSION}; delete it")
        if not lib.onebit_hi_cpu_ok():
            raise NativeUnavailable("the native kernel needs AVX2, which this CPU does not report")
        p, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        self._matmul = lib.onebit_hi_matmul
        self._matmul.argtypes = [c_int, p, i64, i64, p, i64, i64, p, p, c_int]
        self._matmul.restype = c_int
        self._gemm_int = lib.onebit_hi_gemm_int
        self._gemm_int.argtypes = [c_int, p, i64, i64, p, i64, i64, p, c_int]
        self._gemm_int.restype = c_int

    def matmul(self, x: np.ndarray, qw: QuantWeight, threads: int) -> "np.ndarray | int":
        """The fused contract for ``x`` float32 C-contiguous ``[m, k]``, 1 <= m <= 16; returns y, or
        the index of the first non-finite row (an int). Per-call overhead is kept to ~3 us: the
        weight's addresses are cached on it, x's is read through the buffer protocol."""
        m, k = x.shape
        n, nbytes = qw.data.shape
        y = np.empty((m, n), np.float32)
        wp, sp = qw.addresses
        xp = ctypes.addressof(ctypes.c_char.from_buffer(x)) if x.flags.writeable else x.ctypes.data
        rc = self._matmul(FORMAT_IDS[qw.fmt], xp, m, k, wp, n, nbytes, sp,
                          ctypes.addressof(ctypes.c_char.from_buffer(y)), threads)
        if rc <= -1 and rc > -1 - m:
            return -1 - rc
        if rc:
            raise RuntimeError(f"native host-int kernel failed with code {rc} (m={m}, k={k}, n={n}, fmt={qw.fmt})")
        return y

    def gemm_int(self, fmt: str, xq: np.ndarray, data: np.ndarray, threads: int) -> np.ndarray:
        m, k = xq.shape
        n = data.shape[0]
        acc = np.empty((m, n), np.int32)
        rc = self._gemm_int(FORMAT_IDS[fmt], xq.ctypes.data, m, k, data.ctypes.data, n, data.shape[1],
                            acc.ctypes.data, threads)
        if rc:
            raise RuntimeError(f"native host-int kernel failed with code {rc} (m={m}, k={k}, n={n}, fmt={fmt})")
        return acc


def load() -> NativeKernel:
    """Build (once per source/compiler) and load the kernel; raises NativeUnavailable with the reason."""
    global _LOADED, _ERROR
    if _LOADED is not None:
        return _LOADED
    if _ERROR is not None:
        raise NativeUnavailable(_ERROR)
    try:
        _LOADED = NativeKernel(build())
    except (NativeUnavailable, OSError, subprocess.SubprocessError) as e:
        _ERROR = str(e)
        raise NativeUnavailable(_ERROR) from e
    return _LOADED


def available() -> bool:
    try:
        load()
    except NativeUnavailable:
        return False
    return True
