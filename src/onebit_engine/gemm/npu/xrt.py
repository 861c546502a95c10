"""The ``xrt`` backend: the device numerics contract on an AMD XDNA NPU through pyxrt.

Same numbers as ``host-int``, bit for bit: activations are quantized and results dequantized by the
very functions host-int uses (``quant/activations.py``); only the exact int32 product
``acc = xq @ Wq.T`` runs on the device, as fixed-size launches of one kernel artifact
(``kernels/``, described by a :class:`~.layout.KernelManifest`). Integer sums are exact, so
padding, splitting and summing K blocks on the host change nothing.

The launch sequence is the canonical one (docs/device.md, "The launch"): one ``pyxrt.device`` per process
(shared by every backend instance), ``register_xclbin``, one ``hw_context`` and ``kernel`` per
artifact, the instruction stream in a ``cacheable`` BO, data in ``host_only`` BOs; per launch
``kernel(3, insts, ninstr, A, B, C)`` then ``run.wait(timeout_ms)`` checked against COMPLETED.
Weights are uploaded once, at ``pack``, into resident B BOs; the A and C BOs are allocated once per
launch shape and reused.

Faults never corrupt the engine's state: the C BO is filled with a sentinel no valid output can
hold before every launch, and the output is range-checked after it, so timeouts, aborts, errors,
silent no-ops and partial or garbage writes are all detected. A faulty launch is retried (on fresh
buffers if the run may still be in flight); when the retries are spent the whole call is computed
by the host integer kernel from the same codes - identical output - and the event is counted in
``events`` and reported by ``describe()``. ``pyxrt`` is imported only when a backend is built
without an explicit module, so importing this file needs no XRT.

Nothing here has run on a real NPU yet: it is written against pyxrt's documented API and tested
through the strict fake in ``tests/fakes/fake_pyxrt.py`` and the bit-exact emulator
(``emulator.py``). See ``docs/device.md``.
"""
from __future__ import annotations

import gc
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailable, OnebitError
from ...quant.activations import dequantize_acc, quantize_rows
from ...quant.formats import FORMATS, QuantWeight
from ...quant.rows import as_rows, quantize_source
from ..host_int import int_kernels
from ..host_int.backend import NUMERICS, WEIGHT_CODES, kernel_hash
from ..registry import register
from .layout import (
    GENERATIONS,
    KernelManifest,
    WeightPlan,
    c_block,
    generation_of,
    m_blocks,
    pack_a_block,
    pack_weight_blocks,
    plan_weight,
)

log = logging.getLogger(__name__)

KERNELS_DIR = Path(__file__).resolve().parents[4] / "kernels"
SENTINEL = np.int32(-(2**31))  # |valid output| <= K * 127^2 < 2^31 - 1, so no launch can produce it
FALLBACKS = ("host-int", None)
OPEN_ATTEMPTS = 3
OPEN_BACKOFF_S = 0.02


class DeviceFault(OnebitError, RuntimeError):
    """A launch failed on every attempt and the backend was built with ``fallback=None``."""



def default_manifest(generation: str) -> Path:
    path = KERNELS_DIR / "manifests" / f"gemm_i8i32_{generation}.json"
    if not path.is_file():
        raise BackendUnavailable(f"no kernel manifest for {generation} at {path}; pass manifest= explicitly")
    return path


# -- the process-wide device session ---------------------------------------------------------------
@dataclass
class _Loaded:
    """One artifact on the device: its context, kernel and resident instruction stream."""

    xclbin: Any
    ctx: Any
    kernel: Any
    insts_bo: Any
    insts_len: int


@dataclass
class _Session:
    """The one ``pyxrt.device`` of a process (per XRT module and index), shared by every backend."""

    xrt: Any
    index: int
    device: Any
    name: str
    generation: str | None
    refs: int = 0
    loaded: dict[str, _Loaded] = field(default_factory=dict)

    def load(self, man: KernelManifest) -> _Loaded:
        key = man.digest()
        if key in self.loaded:
            return self.loaded[key]
        xrt = self.xrt
        xb = xrt.xclbin(str(man.artifact_path("xclbin")))
        names = {k.get_name(): k.get_num_args() for k in xb.get_kernels()}
        if man.kernel not in names:
            raise BackendUnavailable(f"kernel {man.kernel!r} is not in {man.artifact_path('xclbin')} (it has {sorted(names)})")
        if names[man.kernel] - 3 != man.num_host_bos:
            raise BackendUnavailable(
                f"{man.kernel} declares {names[man.kernel]} arguments, the manifest expects 3 + {man.num_host_bos}; "
                f"calling it with the wrong count crashes XRT - rebuild the manifest with the artifact"
            )
        self.device.register_xclbin(xb)
        try:
            ctx = xrt.hw_context(self.device, xb.get_uuid())
        except RuntimeError as exc:
            raise BackendUnavailable(
                f"cannot create a hardware context for {man.name}: {exc} (the driver allows a few per machine - "
                f"6 on npu1, 16 on npu2 - and other processes may hold them)"
            ) from None
        kernel = xrt.kernel(ctx, man.kernel)
        words = np.fromfile(man.artifact_path("insts"), dtype=np.uint32)
        raw = np.ascontiguousarray(words).view(np.uint8)
        bo = xrt.bo(self.device, int(raw.nbytes), xrt.bo.cacheable, kernel.group_id(1))
        bo.write(raw, 0)
        bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, int(raw.nbytes), 0)
        self.loaded[key] = _Loaded(xb, ctx, kernel, bo, man.insts_len(int(raw.nbytes)))
        return self.loaded[key]

    def close(self) -> None:
        # XRT's release order: instruction BOs, kernels, contexts, then the device.
        for ld in self.loaded.values():
            ld.insts_bo = None
        for ld in self.loaded.values():
            ld.kernel = None
        for ld in self.loaded.values():
            ld.ctx = None
        self.loaded.clear()
        self.device = None


_SESSIONS: dict[tuple[int, int], _Session] = {}


def _acquire(xrt: Any, index: int) -> _Session:
    key = (id(xrt), index)
    s = _SESSIONS.get(key)
    if s is None:
        device = None
        for attempt in range(OPEN_ATTEMPTS):
            try:
                device = xrt.device(index)
                break
            except RuntimeError as exc:  # ENODEV right after another handle closed is transient
                if attempt + 1 == OPEN_ATTEMPTS:
                    raise BackendUnavailable(f"cannot open NPU device {index}: {exc} (after {OPEN_ATTEMPTS} attempts; "
                                             f"is /dev/accel/accel{index} there and is the amdxdna driver loaded?)") from None
                gc.collect()
                time.sleep(OPEN_BACKOFF_S * (attempt + 1))
        try:
            name = str(device.get_info(xrt.xrt_info_device.name))
        except Exception:  # noqa: BLE001 - an old XRT without the query: the manifest check will say so
            name = "unknown"
        s = _SESSIONS[key] = _Session(xrt, index, device, name, generation_of(name))
    s.refs += 1
    return s


def _release(s: _Session) -> None:
    s.refs -= 1
    if s.refs <= 0:
        _SESSIONS.pop((id(s.xrt), s.index), None)
        s.close()


# -- buffers ----------------------------------------------------------------------------------------
@dataclass
class _Buffers:
    """The A and C BOs of one launch shape, with the host staging of A and the C sentinel."""

    a: Any
    c: Any
    a_host: np.ndarray
    sentinel: np.ndarray
    a_on_device: bool = False  # a_host has been written and synced since it last changed


@dataclass
class XrtWeight:
    """A packed weight: the quantized codes (for the host fallback) and its resident B BOs."""

    qw: QuantWeight
    plan: WeightPlan
    bos: dict[tuple[int, int], Any] | None
    name: str = ""

    @property
    def shape(self) -> tuple[int, int]:
        return self.qw.shape

    @property
    def scale(self) -> np.ndarray:
        return self.qw.scale


class _Fault(Exception):
    def __init__(self, kind: str, detail: str, *, in_flight: bool, run: Any = None):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail, self.in_flight, self.run = kind, detail, in_flight, run


# -- the backend ------------------------------------------------------------------------------------
class XrtBackend:
    """GEMM on the NPU through an injected XRT module (``pyxrt`` or the fake).

    ``manifest``: a :class:`KernelManifest`, a path to one, or None for the shipped manifest of the
    device's generation. ``retries``: extra attempts per launch after a fault. ``fallback``:
    ``"host-int"`` (compute a failed call on the host, same bits) or None (raise :class:`DeviceFault`;
    for bring-up only - a raise mid-forward leaves the model state half advanced). After
    ``disable_after`` consecutive failed calls the device is left alone for the rest of the run.
    ``verify=True`` also checks every device product against the host kernel (slow; bring-up).
    """

    name = "xrt"
    exact = True
    streams_rows = True  # pack reads a row source a block at a time

    def __init__(self, xrt: Any = None, manifest: "KernelManifest | str | Path | None" = None, *, device_index: int = 0,
                 retries: int = 1, fallback: str | None = "host-int", weight_format: str = "int8",
                 timeout_ms: int = 2000, disable_after: int = 3, verify: bool = False, threads: int = 1):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback {fallback!r} is unknown; choose one of {FALLBACKS}")
        if weight_format not in FORMATS:
            raise ValueError(f"weight_format {weight_format!r} is unknown; choose one of {FORMATS}")
        if retries < 0 or timeout_ms < 1 or disable_after < 1 or threads < 1:
            raise ValueError(f"retries={retries} >= 0, timeout_ms={timeout_ms} >= 1, disable_after={disable_after} >= 1 "
                             f"and threads={threads} >= 1 are required")
        self.weight_format, self.retries, self.fallback = weight_format, retries, fallback
        self.timeout_ms, self.disable_after, self.verify, self.threads = int(timeout_ms), disable_after, verify, threads
        self.host_kernel = "numba" if int_kernels.HAVE_NUMBA else "numpy"
        self.events: Counter = Counter()
        self.fault_log: list[str] = []
        self._consecutive_failures = 0
        self._disabled_reason: str | None = None
        self._buffers: dict[tuple[int, int, int], _Buffers] = {}
        self._stale: list[tuple[Any, _Buffers]] = []  # timed-out runs may still write their buffers
        self._weights: list[XrtWeight] = []
        self._session: _Session | None = None

        self.xrt = xrt if xrt is not None else import_pyxrt()
        self.man = manifest if isinstance(manifest, KernelManifest) or manifest is None else KernelManifest.load(manifest)
        self._session = _acquire(self.xrt, device_index)
        try:
            self.generation = self._session.generation
            if self.man is None:
                if self.generation is None:
                    raise BackendUnavailable(f"device {self._session.name!r} is not a known XDNA NPU; pass manifest= explicitly")
                self.man = KernelManifest.load(default_manifest(self.generation))
            if self.generation is not None and self.man.generation != self.generation:
                raise BackendUnavailable(f"kernel {self.man.name!r} is built for {self.man.generation}, the device "
                                         f"{self._session.name!r} is {self.generation}; use the {self.generation} manifest")
            self.man.verify_artifacts()
            self._loaded = self._session.load(self.man)
        except BaseException:
            self.close()
            raise
        sync = self.xrt.xclBOSyncDirection
        self._to_dev, self._from_dev = sync.XCL_BO_SYNC_BO_TO_DEVICE, sync.XCL_BO_SYNC_BO_FROM_DEVICE
        self._completed = self.xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED

    # -- GemmBackend ---------------------------------------------------------------------------------
    def pack(self, weight: Any, *, name: str = "") -> XrtWeight:
        qw = weight if isinstance(weight, QuantWeight) else quantize_source(as_rows(weight), self.weight_format)
        int_kernels.check_k(qw.shape[1])
        w = XrtWeight(qw, plan_weight(qw.shape[0], qw.shape[1], self.man), None, name)
        if self._disabled_reason is None:
            try:
                w.bos = self._upload(qw)
            except RuntimeError as exc:  # BO allocation (memlock) or sync failed: this weight stays on the host
                self._event("upload_failed", f"{name}: {exc}")
        self._weights.append(w)
        return w

    def matmul(self, x: np.ndarray, packed: XrtWeight) -> np.ndarray:
        if x.ndim != 2 or x.shape[1] != packed.shape[1]:
            raise ValueError(f"x must be [M, {packed.shape[1]}], got {x.shape}")
        if self._session is None:
            raise BackendUnavailable("this xrt backend is closed; build a new one")
        xq, sa = quantize_rows(x)
        return dequantize_acc(self._product(xq, packed), sa, packed.scale)

    def describe(self) -> dict[str, Any]:
        man = self.man
        return {
            "backend": self.name,
            "numerics": NUMERICS.format(codes=WEIGHT_CODES[self.weight_format]),
            "weight_format": self.weight_format,
            "kernel_set": f"xrt:{man.name}",
            "manifest": man.name,
            "manifest_hash": man.digest(),
            "tile": [man.m, man.k, man.n], "n_cols": man.n_cols, "launch": [man.M_cap, man.K, man.N],
            "generation": self.generation,
            "device": self._session.name if self._session else None,
            "xrt_module": getattr(self.xrt, "__name__", type(self.xrt).__name__),
            "fallback": self.fallback,
            "fallback_kernel": int_kernels.KERNEL_SETS[self.host_kernel],
            "device_enabled": self._disabled_reason is None,
            "disabled_reason": self._disabled_reason,
            "events": dict(self.events),
            "hash": kernel_hash(),
        }

    def close(self) -> None:
        """Release every BO, then this backend's share of the device session."""
        for w in self._weights:
            w.bos = None
        self._weights.clear()
        self._buffers.clear()
        self._stale.clear()
        self._loaded = None
        if self._session is not None:
            s, self._session = self._session, None
            _release(s)

    # -- the integer product -------------------------------------------------------------------------
    def _product(self, xq: np.ndarray, w: XrtWeight) -> np.ndarray:
        if self._disabled_reason is not None or w.bos is None:
            self.events["host_calls"] += 1
            return self._host_product(xq, w)
        try:
            acc = self._device_product(xq, w)
        except _Fault as f:
            self._consecutive_failures += 1
            if self.fallback is None:
                raise DeviceFault(f"NPU launch failed after {1 + self.retries} attempts ({f}); built with fallback=None") from None
            self._event("fallbacks", f"{w.name}: {f}")
            if self._consecutive_failures >= self.disable_after:
                self._disabled_reason = f"{self._consecutive_failures} consecutive calls failed, last: {f}"
                self._event("device_disabled", self._disabled_reason)
            return self._host_product(xq, w)
        self._consecutive_failures = 0
        if self.verify and not np.array_equal(acc, self._host_product(xq, w)):
            self._event("verify_mismatch", f"{w.name}: device product differs from the host kernel")
            return self._host_product(xq, w)
        return acc

    def _host_product(self, xq: np.ndarray, w: XrtWeight) -> np.ndarray:
        return int_kernels.matmul_int(xq, w.qw.fmt, w.qw.data, threads=self.threads, kernel=self.host_kernel)

    def _device_product(self, xq: np.ndarray, w: XrtWeight) -> np.ndarray:
        man, p = self.man, w.plan
        mbs = m_blocks(xq.shape[0], man)
        acc = np.zeros((mbs * man.M_cap, p.nb * man.N), np.int64)
        for mb in range(mbs):
            rows = slice(mb * man.M_cap, (mb + 1) * man.M_cap)
            for kb in range(p.kb):
                bufs = self._buffer_set()
                pack_a_block(xq, mb, kb, man, bufs.a_host)
                bufs.a_on_device = False
                for nb in range(p.nb):
                    acc[rows, nb * man.N : (nb + 1) * man.N] += self._launch(w.bos[kb, nb])
        return acc[: xq.shape[0], : p.Nw].astype(np.int32)  # |acc| <= K * 127^2 < 2^31 (check_k at pack)

    def _launch(self, bo_b: Any) -> np.ndarray:
        """One checked launch with retries; returns C as int32 ``[M_cap, N]`` or raises ``_Fault``."""
        last: _Fault | None = None
        for attempt in range(1 + self.retries):
            bufs = self._buffer_set()
            if attempt:
                self.events["retries"] += 1
                bufs.a_on_device = False  # re-upload A: cheap, and nothing is assumed about a failed run
            try:
                return self._launch_once(bufs, bo_b)
            except _Fault as f:
                self._event(f.kind, f.detail)
                if f.in_flight:  # the run may still land: never hand its buffers to another launch
                    self._stale.append((f.run, bufs))
                    self._buffers.pop(self._shape_key(), None)
                    self.events["buffers_quarantined"] += 1
                    self._buffer_set().a_host[:] = bufs.a_host
                last = f
        assert last is not None
        raise last

    def _launch_once(self, bufs: _Buffers, bo_b: Any) -> np.ndarray:
        man, ld = self.man, self._loaded
        if not bufs.a_on_device:  # one upload of A serves every N block of this (M, K) block
            bufs.a.write(bufs.a_host, 0)
            bufs.a.sync(self._to_dev, man.a_bytes, 0)
            bufs.a_on_device = True
        bufs.c.write(bufs.sentinel, 0)
        bufs.c.sync(self._to_dev, man.c_bytes, 0)
        self.events["dispatches"] += 1
        run = ld.kernel(3, ld.insts_bo, ld.insts_len, bufs.a, bo_b, bufs.c)
        try:
            state = run.wait(self.timeout_ms)
        except RuntimeError as exc:
            raise _Fault("error", str(exc), in_flight=True, run=run) from None
        if state != self._completed:
            kind = {"ERT_CMD_STATE_TIMEOUT": "timeout", "ERT_CMD_STATE_ABORT": "abort"}.get(_state_name(state), "error")
            raise _Fault(kind, f"run.wait returned {_state_name(state)}", in_flight=True, run=run)
        bufs.c.sync(self._from_dev, man.c_bytes, 0)
        c = c_block(bufs.c.read(man.c_bytes, 0), man)
        untouched = c == SENTINEL
        if untouched.all():
            raise _Fault("noop", "COMPLETED but the output still holds the sentinel (no instruction stream ran?)", in_flight=False)
        if untouched.any():
            raise _Fault("partial", f"{int(untouched.sum())} of {c.size} outputs unwritten", in_flight=False)
        if np.abs(c.astype(np.int64)).max() > man.max_abs_out:
            raise _Fault("bad_output", f"outputs beyond |{man.max_abs_out}| (garbage)", in_flight=False)
        return c

    # -- buffers and uploads -------------------------------------------------------------------------
    def _shape_key(self) -> tuple[int, int, int]:
        return (self.man.M_cap, self.man.K, self.man.N)

    def _buffer_set(self) -> _Buffers:
        """The A/C BOs of the launch shape, allocated on first use and then reused."""
        key = self._shape_key()
        bufs = self._buffers.get(key)
        if bufs is None:
            man, xrt, k = self.man, self.xrt, self._loaded.kernel
            dev = self._session.device
            a = xrt.bo(dev, man.a_bytes, xrt.bo.host_only, k.group_id(3))
            c = xrt.bo(dev, man.c_bytes, xrt.bo.host_only, k.group_id(5))
            self.events["bo_allocs"] += 2
            sentinel = np.full(man.M_cap * man.N, SENTINEL, "<i4").view(np.uint8)
            bufs = self._buffers[key] = _Buffers(a, c, np.zeros(man.a_bytes, np.uint8), sentinel)
        return bufs

    def _upload(self, qw: QuantWeight) -> dict[tuple[int, int], Any]:
        man, xrt = self.man, self.xrt
        dev, group = self._session.device, self._loaded.kernel.group_id(4)
        bos = {}
        for key, raw in pack_weight_blocks(qw.codes(), man).items():
            bo = xrt.bo(dev, man.b_bytes, xrt.bo.host_only, group)
            bo.write(raw, 0)
            bo.sync(self._to_dev, man.b_bytes, 0)
            bos[key] = bo
        self.events["weight_uploads"] += 1
        self.events["weight_upload_bytes"] += man.b_bytes * len(bos)
        self.events["bo_allocs"] += len(bos)
        return bos

    def _event(self, kind: str, detail: str) -> None:
        if self.events[kind] == 0:
            log.warning("xrt backend: %s (%s); further %s events are counted in describe()['events']", kind, detail, kind)
        self.events[kind] += 1
        if len(self.fault_log) < 256:
            self.fault_log.append(f"{kind}: {detail}")


def _state_name(state: Any) -> str:
    return getattr(state, "name", str(state)).split(".")[-1]


def import_pyxrt() -> Any:
    """The ``pyxrt`` module: the one place the engine imports it (lazily: XRT is optional and heavy)."""
    try:
        import pyxrt  # noqa: PLC0415
    except Exception as exc:  # ImportError, or a broken XRT build raising anything else
        raise BackendUnavailable(
            f"GEMM backend 'xrt' needs pyxrt, which ships with XRT and is not on PyPI (the PyPI package 'xrt' is "
            f"unrelated): `source /opt/xilinx/xrt/setup.sh` or put $XILINX_XRT/python on PYTHONPATH; see "
            f"docs/device.md (import failed: {exc})"
        ) from None
    return pyxrt


def _make(**options: Any) -> XrtBackend:
    return XrtBackend(**options)


register("xrt", _make)

__all__ = ["XrtBackend", "XrtWeight", "DeviceFault", "GENERATIONS", "generation_of", "import_pyxrt", "default_manifest"]
