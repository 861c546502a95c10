"""Build and load the native host-int kernels (``kernel.c`` and its paths) with ctypes.

The compiler is Zig's bundled clang from the ``ziglang`` PyPI package (``python -m ziglang cc``), so
the build needs nothing outside the package registry and every machine compiles with the same
pinned compiler. Two libraries, each built on first use into ``_native/`` beside this file (or the temp
directory when that is read-only), named by the sha256 of the sources, the flags and the compiler
version, so a changed kernel never loads a stale library:

* ``main``: AVX2 baseline flags; the VNNI functions carry their own target attribute, so the build
  never needs an AVX-512 machine. Which path may run is decided at run time by cpuid and xgetbv inside
  the library (``cpu_flags``), never by build flags;
* ``emulated`` (tests only): the same sources with the VNNI intrinsics taken from the scalar
  ``avx512_emul.h``, so the VNNI kernel is checked bitwise where the CPU lacks AVX-512.

Nothing here reads the environment. ``load()`` raises :class:`NativeUnavailable` with the reason (no
ziglang, compiler error); callers fall back to numba or numpy.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import BackendUnavailable
from ..base import F32_DTYPE as _F32
from .layout import FORMAT_IDS, PATH_IDS, TiledWeight

HERE = Path(__file__).parent
SOURCES = tuple(HERE / f for f in ("kernel.c", "avx2.c", "vnni.c", "repack.c", "delta.c"))
HEADERS = tuple(HERE / f for f in ("tiles.h", "quant.h", "pool.h", "avx512_emul.h", "delta_body.h", "numpy_data.h"))
FLAGS = ("-O2", "-mavx2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-lpthread")
VARIANTS = {"main": (), "emulated": ("-DONEBIT_HI_EMULATE_AVX512",)}
ABI_VERSION = 6
DELTA_PATHS = {"avx2": 0, "avx512": 1}  # delta.c's paths: 8 or 16 float lanes (the emulated library: 16 only)
MAX_MANY = 64  # products per onebit_hi_matmul_many call (kernel.c)
_LOADED: "dict[str, NativeKernel]" = {}
_ERROR: "dict[str, str]" = {}

# cpu_flags() bits of kernel.c, with where each comes from
CPU_FLAGS = {
    "osxsave": (0, "cpuid 1 ECX bit 27"), "avx": (1, "cpuid 1 ECX bit 28"),
    "xcr0_ymm": (2, "XCR0 bits 1-2: SSE/AVX state enabled by the OS"),
    "xcr0_zmm": (3, "XCR0 bits 5-7: opmask/ZMM state enabled by the OS"),
    "avx2": (4, "cpuid 7.0 EBX bit 5"), "avx512f": (5, "cpuid 7.0 EBX bit 16"),
    "avx512bw": (6, "cpuid 7.0 EBX bit 30"), "avx512vl": (7, "cpuid 7.0 EBX bit 31"),
    "avx512_vnni": (8, "cpuid 7.0 ECX bit 11"),
}
PATH_NEEDS = {
    "avx2": ("osxsave", "avx", "xcr0_ymm", "avx2"),
    "avx512vnni": ("osxsave", "avx", "xcr0_ymm", "avx2", "xcr0_zmm", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"),
    "avx512vnni-emulated": ("osxsave", "avx", "xcr0_ymm", "avx2"),
}


class NativeUnavailable(BackendUnavailable):
    """A native path cannot be built or run here; the message says why."""


def _zig_version() -> str:
    try:
        import ziglang  # noqa: F401
    except ImportError as e:
        raise NativeUnavailable("the native kernel needs the ziglang package: pip install ziglang") from e
    out = subprocess.run([sys.executable, "-m", "ziglang", "version"], capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise NativeUnavailable(f"python -m ziglang version failed: {out.stderr.strip()}")
    return out.stdout.strip()


def build_id(variant: str = "main") -> str:
    """sha256 (16 hex digits) of the sources, headers, flags and variant (the compiler version is added at build)."""
    h = hashlib.sha256()
    for p in SOURCES + HEADERS:
        h.update(p.read_bytes())
    h.update(" ".join(FLAGS + VARIANTS[variant]).encode())
    return h.hexdigest()[:16]


def _cache_dir() -> Path:
    here = HERE / "_native"
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


def build(variant: str = "main", out_dir: "Path | None" = None) -> Path:
    """Compile one library variant (if not already built) and return its path."""
    zig = _zig_version()
    tag = hashlib.sha256(f"{build_id(variant)} zig {zig}".encode()).hexdigest()[:16]
    out_dir = Path(out_dir) if out_dir is not None else _cache_dir()
    lib = out_dir / f"onebit_host_int_{variant}_{tag}.so"
    if lib.exists():
        return lib
    tmp = out_dir / f".{lib.name}.{os.getpid()}.tmp"
    cmd = [sys.executable, "-m", "ziglang", "cc", *FLAGS, *VARIANTS[variant], "-o", str(tmp), *map(str, SOURCES)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode:
        tmp.unlink(missing_ok=True)
        raise NativeUnavailable(f"building the native kernel failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    os.replace(tmp, lib)  # atomic: concurrent builders (pytest-xdist workers) never see a partial file
    return lib


def _array_data_offset() -> int:
    """Where a numpy array object keeps its data pointer (PyArrayObject_fields.data, 16 on 64-bit
    CPython), checked on a few arrays; -1 if the check fails (then pointers are passed instead).
    Why: any per-call way to get an address from Python (``ctypes.c_char.from_buffer``, ``.ctypes.data``)
    costs 1-3 us and builds objects; ``id(x)`` plus this offset costs nothing."""
    base = np.zeros((4, 8), np.float32)
    for a in (base, base[1:], np.empty((3, 5), np.float32), np.zeros(1, np.int8)):
        if ctypes.c_void_p.from_address(id(a) + 16).value != a.ctypes.data:
            return -1
    return 16


class NativeKernel:
    """ctypes bindings of one library; ``variant`` and ``path`` go into provenance."""

    def __init__(self, path: Path, variant: str):
        self.path, self.variant = path, variant
        self.lib = lib = ctypes.CDLL(str(path))
        lib.onebit_hi_abi_version.restype = ctypes.c_int
        if lib.onebit_hi_abi_version() != ABI_VERSION:
            raise NativeUnavailable(f"{path} has ABI {lib.onebit_hi_abi_version()}, expected {ABI_VERSION}; delete it")
        lib.onebit_hi_cpu_flags.restype = ctypes.c_uint
        lib.onebit_hi_vnni_emulated.restype = ctypes.c_int
        p, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        self._matmul = lib.onebit_hi_matmul
        self._matmul.argtypes = [p, p, i64, p, c_int, i64, i64]
        self._matmul.restype = c_int
        self._matmul_many = lib.onebit_hi_matmul_many
        self._matmul_many.argtypes = [p, p, p, p, c_int, c_int, i64]
        self._matmul_many.restype = c_int
        self._gemm_int = lib.onebit_hi_gemm_int
        self._gemm_int.argtypes = [p, p, i64, p, c_int, i64]
        self._gemm_int.restype = c_int
        self._tile_block = lib.onebit_hi_tile_block
        self._tile_block.argtypes = [p, i64, i64, i64, c_int, c_int, i64, p, p]
        self._tile_block.restype = c_int
        lib.onebit_hi_read_stream.argtypes = [p, i64, c_int]
        lib.onebit_hi_read_stream.restype = c_int
        lib.onebit_hi_plan.argtypes = [p, i64, c_int, p]
        lib.onebit_hi_plan.restype = c_int
        self._delta = lib.onebit_hi_delta_heads
        self._delta.argtypes = [p] * 8 + [i64] * 7 + [c_int, c_int, c_int, i64]
        self._delta.restype = c_int
        lib.onebit_hi_delta_threads.argtypes = [i64, i64, i64, i64, c_int]
        lib.onebit_hi_delta_threads.restype = c_int
        lib.onebit_hi_delta_path_ok.argtypes = [c_int]
        lib.onebit_hi_delta_path_ok.restype = c_int
        self._team = lib.onebit_hi_team
        self._team.argtypes = [p, p, ctypes.c_size_t, c_int, c_int]
        self._team.restype = None
        self.data_off = _array_data_offset()

    def cpu_flags(self) -> dict[str, bool]:
        bits = self.lib.onebit_hi_cpu_flags()
        return {name: bool(bits >> bit & 1) for name, (bit, _) in CPU_FLAGS.items()}

    def cpu_regs(self) -> dict[str, str]:
        out = (ctypes.c_uint32 * 4)()
        self.lib.onebit_hi_cpu_regs(out)
        return {"cpuid_7_0_ebx": f"{out[0]:#010x}", "cpuid_7_0_ecx": f"{out[1]:#010x}",
                "cpuid_7_1_eax": f"{out[2]:#010x}", "xcr0": f"{out[3]:#010x}"}

    def matmul(self, x: np.ndarray, tw: TiledWeight, threads: int, kb: int = 0) -> "np.ndarray | int":
        """The fused contract for ``x`` float32 C-contiguous ``[m, k]``, 1 <= m <= 16; returns y, or the
        index of the first non-finite row (an int). No per-call ctypes objects: the weight's descriptor
        is made once, x and y go by object address (``data_off``)."""
        m = x.shape[0]
        y = np.empty((m, tw.shape[0]), _F32)
        if self.data_off >= 0:
            rc = self._matmul(tw.c_struct[1], id(x), m, id(y), threads, kb, self.data_off)
        else:
            rc = self._matmul(tw.c_struct[1], x.ctypes.data, m, y.ctypes.data, threads, kb, -1)
        if not rc:
            return y
        if -1 - m < rc <= -1:
            return -1 - rc
        raise RuntimeError(f"native host-int kernel failed with code {rc} (m={m}, shape={tw.shape}, fmt={tw.fmt}, "
                           f"path={tw.path})")

    def matmul_packed(self, x: np.ndarray, xo: Sequence[int], m: Sequence[int], tws: "list[TiledWeight]", y: np.ndarray,
                      yo: Sequence[int], threads: int) -> "int | None":
        """Several products in one pooled call (kernel.c's ``onebit_hi_matmul_many``) on flat buffers: product i
        reads ``m[i]`` rows of its K at element ``xo[i]`` of ``x`` and writes its ``[m[i], N_i]`` at element ``yo[i]``
        of ``y`` (x, y float32 C-contiguous; the caller checked every range; 1 <= len <= MAX_MANY). None, or the
        index of the first product with a non-finite row (nothing of it written)."""
        count = len(tws)
        addr = np.empty((4, count), np.int64)  # weights, x, rows, y
        addr[0] = [tw.c_struct[1] for tw in tws]
        addr[1] = xo
        addr[2] = m
        addr[3] = yo
        addr[1] *= 4
        addr[1] += x.ctypes.data
        addr[3] *= 4
        addr[3] += y.ctypes.data
        base, row = addr.ctypes.data, 8 * count
        rc = self._matmul_many(base, base + row, base + 2 * row, base + 3 * row, count, threads, -1)
        if not rc:
            return None
        if -16 - count < rc <= -16:
            return -16 - rc
        raise RuntimeError(f"native host-int matmul_many failed with code {rc} ({count} products, rows {list(m)})")

    def plan(self, tw: TiledWeight, m: int, threads: int) -> dict[str, int]:
        """The threads and jobs a call of ``m`` rows would use (tests; bits never depend on them)."""
        out = (ctypes.c_int64 * 4)()
        if self.lib.onebit_hi_plan(tw.c_struct[1], m, threads, out):
            raise ValueError(f"bad plan arguments: m={m}, threads={threads}")
        return {"threads": out[0], "jobs": out[1], "first_job_tiles": out[2], "last_job_tiles": out[3]}

    def tile_block(self, data: np.ndarray, k: int, fmt: str, path: str, tiles: np.ndarray, ccorr: "np.ndarray | None") -> None:
        """File-format codes ``data`` uint8 [rows, ceil(k / codes per byte)] -> ``tiles`` (the block's
        [ceil(rows / T), S, T, 4] slice of a TiledWeight) and, for avx2 int8, ``ccorr`` [rows]
        (``repack.c``; its numpy twin is ``layout.tile_codes``)."""
        data = np.ascontiguousarray(data, np.uint8)
        if not (tiles.flags.c_contiguous and tiles.dtype == np.uint8) or (ccorr is not None and not ccorr.flags.c_contiguous):
            raise ValueError("tile_block writes into C-contiguous uint8 tiles and int32 ccorr")
        rc = self._tile_block(data.ctypes.data, data.shape[0], data.shape[1] if data.ndim == 2 else 0, k, FORMAT_IDS[fmt],
                              PATH_IDS[path], tiles.shape[1], tiles.ctypes.data, None if ccorr is None else ccorr.ctypes.data)
        if rc:
            raise RuntimeError(f"native tile_block failed with code {rc} ({fmt}, {path}, data {data.shape}, tiles {tiles.shape})")

    def read_stream(self, buf: np.ndarray, threads: int) -> int:
        """Read every byte of ``buf`` (uint8, C-contiguous) once on ``threads`` pooled threads; the OR of the
        bytes (numpy's ``bitwise_or.reduce`` is its twin). Timed, it is the memory bandwidth this library gets."""
        if buf.dtype != np.uint8 or not buf.flags.c_contiguous:
            raise ValueError("read_stream reads a C-contiguous uint8 buffer")
        rc = self.lib.onebit_hi_read_stream(buf.ctypes.data, buf.size, threads)
        if rc < 0:
            raise ValueError(f"read_stream: bad arguments (threads={threads})")
        return rc

    def team(self, fn: int, jobs: int, njobs: int, threads: int) -> None:
        """Run ``fn(jobs + 8 * i)`` for i < njobs on ``threads`` of the pool (``fn``: a C function of one pointer,
        each job one int64 word; ``ops.row_jobs``). The caller keeps the jobs and what they point to alive."""
        if njobs < 1 or threads < 1:
            raise ValueError(f"team: {njobs} jobs on {threads} threads (both must be >= 1)")
        self._team(fn, jobs, 8, njobs, threads)

    def delta_path_ok(self, path: int) -> bool:
        """Whether delta path ``path`` (``DELTA_PATHS``) runs on this CPU (in the emulated library: its 16 lanes)."""
        return bool(self.lib.onebit_hi_delta_path_ok(path))

    def delta_threads(self, n: int, HV: int, dk: int, dv: int, threads: int) -> int:
        """The threads ``delta_heads`` takes for n rows of HV heads of dk x dv at most ``threads`` (its work rule)."""
        return int(self.lib.onebit_hi_delta_threads(n, HV, dk, dv, threads))

    def delta_heads(self, S: np.ndarray, S0: np.ndarray, alphas: np.ndarray, betas: np.ndarray, ks: np.ndarray,
                    qs: np.ndarray, xs: np.ndarray, o: "np.ndarray | None", v0: int, path: int, threads: int = 1) -> None:
        """delta.c on a layer's heads, in place: S [HV, dk, dv] from the start S0 (S itself or another array);
        alphas, betas [n, HV]; ks, qs [n, HK, dk]; xs [n, C]; o [n, HV, dv] or None (no read-out). The
        bits of ``ops.gated_delta_fast._heads``. Every array float32 and C-contiguous (checked: the C code
        trusts the shapes)."""
        HV, dk, dv = S.shape
        n, HK = ks.shape[0], ks.shape[1]
        arrays = (S, S0, alphas, betas, ks, qs, xs) + ((o,) if o is not None else ())
        if not all(a.dtype == _F32 and a.flags.c_contiguous for a in arrays) or not S.flags.writeable or (
                S0.shape != S.shape or alphas.shape != (n, HV) or betas.shape != (n, HV) or ks.shape != (n, HK, dk)
                or qs.shape != ks.shape or xs.ndim != 2 or xs.shape[0] != n or (o is not None and o.shape != (n, HV, dv))):
            raise ValueError(f"delta_heads: S {S.shape}, S0 {S0.shape}, alphas {alphas.shape}, betas {betas.shape}, ks "
                             f"{ks.shape}, qs {qs.shape}, xs {xs.shape}, o {None if o is None else o.shape} do not "
                             f"describe one call (all float32 C-contiguous, S writable)")
        off = self.data_off  # by object address where it can (numpy_data.h), as matmul
        a = id if off >= 0 else (lambda x: x.ctypes.data)
        rc = self._delta(a(S), a(S0), a(alphas), a(betas), a(ks), a(qs), a(xs), 0 if o is None else a(o), n, HV, HK, dk, dv,
                         xs.shape[1], v0, int(o is not None), path, threads, off)
        if rc:
            raise ValueError(f"delta_heads: the library refused the call (code {rc}: -2 arguments, -3 path {path} "
                             f"cannot run here)")

    def gemm_int(self, xq: np.ndarray, tw: TiledWeight, threads: int, kb: int = 0) -> np.ndarray:
        """Exact int32 ``xq [m, k] @ codes.T`` for int8 C-contiguous codes, 1 <= m <= 16."""
        m = xq.shape[0]
        acc = np.empty((m, tw.shape[0]), np.int32)
        rc = self._gemm_int(tw.c_struct[1], xq.ctypes.data, m, acc.ctypes.data, threads, kb)
        if rc:
            raise RuntimeError(f"native host-int kernel failed with code {rc} (m={m}, shape={tw.shape}, fmt={tw.fmt})")
        return acc


def load(variant: str = "main") -> NativeKernel:
    """Build (once per source/compiler) and load a library; raises NativeUnavailable with the reason."""
    if variant in _LOADED:
        return _LOADED[variant]
    if variant in _ERROR:
        raise NativeUnavailable(_ERROR[variant])
    try:
        _LOADED[variant] = NativeKernel(build(variant), variant)
    except (NativeUnavailable, OSError, subprocess.SubprocessError) as e:
        _ERROR[variant] = str(e)
        raise NativeUnavailable(_ERROR[variant]) from e
    return _LOADED[variant]


def library_for(path: str) -> NativeKernel:
    return load("emulated" if path == "avx512vnni-emulated" else "main")


def path_unavailable(path: str) -> str:
    """"" if native ``path`` can run on this CPU, else why not (each missing cpuid/xgetbv flag, named)."""
    try:
        lib = library_for(path)
    except NativeUnavailable as e:
        return f"{path}: {e}"
    flags = lib.cpu_flags()
    missing = [f"{name} ({CPU_FLAGS[name][1]})" for name in PATH_NEEDS[path] if not flags[name]]
    if missing:
        return f"{path}: cpu lacks {', '.join(missing)}"
    if not lib.lib.onebit_hi_path_ok(PATH_IDS[path]):  # the library's own check is the one that counts
        return f"{path}: the library's cpuid/xgetbv check refuses it (flags {flags})"
    return ""


def available(path: str = "avx2") -> bool:
    return path_unavailable(path) == ""
