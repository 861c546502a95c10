"""A strict fake of the ``pyxrt`` module, stricter than the hardware (docs/device.md: "pyxrt" for the
binding it mirrors, "What the fake proves, and what only an NPU can").

``FakePyxrt()`` is passed where the module would be: ``XrtBackend(xrt=FakePyxrt(...))``. It mirrors
the names the backend uses (``device``, ``xclbin``, ``hw_context``, ``kernel``, ``run``, ``bo``,
``xclBOSyncDirection``, ``ert_cmd_state``, ``xrt_info_device``) and enforces:

* **device**: ``device(i)`` raises when configured absent or for scripted ENODEV failures; a
  second open handle in the process is a violation (real XRT: ENODEV on reopen).
* **xclbin / context**: ``xclbin(path)`` reads a JSON stand-in (uuid, kernels, compiled design);
  ``register_xclbin`` must precede ``hw_context(dev, uuid)``; the driver's context limit (6 on npu1,
  16 on npu2, minus ``other_contexts`` held by other processes) raises ``RuntimeError``.
* **kernel ABI**: the argument count must equal the xclbin's ``num_args`` (real XRT segfaults on
  extra BOs); opcode 3; every argument a plain ``int`` or a ``bo`` of this fake (real pyxrt silently
  drops anything else); the instruction BO's device bytes must hash to the design's insts sha256 and
  ``ninstr`` must match its unit (words or bytes) - a mismatch hangs real hardware.
* **buffers**: only ``host_only`` and ``cacheable`` flags (the shim rejects the rest); host bytes
  and a separate device shadow that start different; ``sync`` copies a range between them, and the
  kernel reads and writes only the shadow, so a missing sync gives wrong bytes, deterministically.
  ``write`` refuses non-contiguous buffers (real pyxrt uploads garbage); offsets are bounds-checked;
  sub-buffers only of a root BO.
* **runs** complete at ``wait()`` (never at launch), so reading outputs before waiting reads stale
  bytes. Its output is computed by ``onebit_engine.gemm.npu.emulator`` from the shadow bytes.
* **faults**, scripted per dispatch with ``inject(...)`` or for every dispatch with ``persistent``:
  ``timeout``, ``timeout_late`` (times out, then writes plausible garbage into its C buffer during
  a later run's wait), ``abort``, ``error``, ``raise`` (``wait`` raises), ``noop`` (COMPLETED, nothing
  written), ``partial`` (half the rows written), ``garbage`` (random int32), ``slow`` (takes
  ``slow_ms``: ``wait(timeout_ms)`` with a shorter timeout returns TIMEOUT).

Violations of the ABI raise :class:`FakeXrtViolation` (an ``AssertionError``, which the backend never
catches); device failures behave as pyxrt reports them (states, ``RuntimeError``). Counters in
``stats`` let tests hold budgets (dispatches, syncs and bytes per BO role, allocations).
"""
from __future__ import annotations

import enum
import hashlib
import json
import uuid as uuidlib
from collections import Counter, deque
from pathlib import Path
from typing import Any

import numpy as np

from onebit_engine.gemm.npu import emulator as npu_emulator
from onebit_engine.gemm.npu.layout import generation_of as engine_generation_of

FAULTS = ("ok", "timeout", "timeout_late", "abort", "error", "raise", "noop", "partial", "garbage", "slow")
HWCTX_LIMIT = {"npu1": 6, "npu2": 16}


class FakeXrtViolation(AssertionError):
    """The caller broke a rule real XRT would punish with a crash, a hang or silent corruption."""


class xclBOSyncDirection(enum.Enum):  # noqa: N801 - pyxrt's names
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class ert_cmd_state(enum.Enum):  # noqa: N801
    ERT_CMD_STATE_NEW = 1
    ERT_CMD_STATE_QUEUED = 2
    ERT_CMD_STATE_RUNNING = 3
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5
    ERT_CMD_STATE_ABORT = 6
    ERT_CMD_STATE_SUBMITTED = 7
    ERT_CMD_STATE_TIMEOUT = 8
    ERT_CMD_STATE_NORESPONSE = 9


class xrt_info_device(enum.Enum):  # noqa: N801
    name = "name"
    bdf = "bdf"
    max_clock_frequency_mhz = "max_clock_frequency_mhz"


class bo_flags(enum.Enum):  # noqa: N801
    normal = 0
    cacheable = 1
    device_only = 2
    host_only = 3
    p2p = 4
    svm = 5


def generation_of(name: str) -> str:
    return engine_generation_of(name) or "npu1"


class FakePyxrt:
    """The module stand-in. Configure, then hand it to the backend."""

    def __init__(self, *, device_name: str = "RyzenAI-npu4", present: bool = True, enodev_failures: int = 0,
                 other_contexts: int = 0, slow_ms: int = 0, seed: int = 0):
        self.device_name = device_name
        self.present = present
        self.enodev_failures = enodev_failures
        self.other_contexts = other_contexts
        self.slow_ms = slow_ms
        self.hwctx_limit = HWCTX_LIMIT[generation_of(device_name)]
        self.faults: deque[str] = deque()
        self.persistent: str | None = None
        self.stats: Counter = Counter()
        self.open_devices = 0
        self.live_contexts = 0
        self.live_kernels = 0
        self.released: list[str] = []
        self.violations: list[str] = []  # found in destructors, where raising is impossible
        self.fault_log: list[str] = []
        self._late: list["_Run"] = []
        self._rng = np.random.default_rng(seed)
        fake = self
        # The pyxrt names, bound to this instance.
        self.xclBOSyncDirection = xclBOSyncDirection
        self.ert_cmd_state = ert_cmd_state
        self.xrt_info_device = xrt_info_device
        self.device = type("device", (_Device,), {"_fake": fake})
        self.xclbin = type("xclbin", (_Xclbin,), {"_fake": fake})
        self.hw_context = type("hw_context", (_HwContext,), {"_fake": fake})
        self.kernel = type("kernel", (_Kernel,), {"_fake": fake})
        self.run = type("run", (_Run,), {"_fake": fake})
        self.bo = type("bo", (_Bo,), {"_fake": fake, **{f.name: f for f in bo_flags}, "flags": bo_flags})

    def inject(self, *outcomes: str) -> None:
        """Script the outcomes of the next dispatches, in order (then ``persistent`` or ok)."""
        for o in outcomes:
            if o not in FAULTS:
                raise ValueError(f"fault {o!r} is unknown; choose from {FAULTS}")
        self.faults.extend(outcomes)

    def _next_outcome(self) -> str:
        if self.faults:
            return self.faults.popleft()
        return self.persistent or "ok"


class _Device:
    _fake: FakePyxrt

    def __init__(self, index: int | str):
        f = self._fake
        self._open = False
        if not isinstance(index, (int, str)) or isinstance(index, bool):
            raise FakeXrtViolation(f"device(index) takes an int or a BDF string, got {type(index).__name__}")
        if not f.present:
            raise RuntimeError("No devices found")
        if f.enodev_failures > 0:
            f.enodev_failures -= 1
            raise RuntimeError("open /dev/accel/accel0 failed: No such device (ENODEV)")
        if f.open_devices >= 1:
            raise FakeXrtViolation("a second pyxrt.device in one process: keep one handle (real XRT: ENODEV on reopen)")
        f.open_devices += 1
        f.stats["device_opens"] += 1
        self._open = True
        self._registered: dict[str, _Xclbin] = {}

    def register_xclbin(self, xb: "_Xclbin"):
        if not isinstance(xb, _Xclbin):
            raise FakeXrtViolation("register_xclbin takes a pyxrt.xclbin")
        self._registered[xb._uuid.to_string()] = xb
        return xb._uuid

    def load_xclbin(self, *_):
        raise RuntimeError("load_xclbin is not supported on this device; use register_xclbin + hw_context")

    def get_info(self, key: xrt_info_device) -> str:
        if not isinstance(key, xrt_info_device):
            raise FakeXrtViolation(f"get_info takes a pyxrt.xrt_info_device, got {key!r}")
        return {"name": self._fake.device_name, "bdf": "0000:c5:00.1", "max_clock_frequency_mhz": "1800"}[key.value]

    def __del__(self):
        f = self._fake
        if getattr(self, "_open", False):
            f.open_devices -= 1
            f.released.append("device")
            if f.live_contexts or f.live_kernels:
                f.violations.append("device released while contexts or kernels are alive")


class _Uuid:
    def __init__(self, s: str):
        self._s = s

    def to_string(self) -> str:
        return self._s


class _KernelInfo:
    def __init__(self, d: dict):
        self._d = d

    def get_name(self) -> str:
        return self._d["name"]

    def get_num_args(self) -> int:
        return int(self._d["num_args"])


class _Xclbin:
    _fake: FakePyxrt

    def __init__(self, path: str):
        if not isinstance(path, str):
            raise FakeXrtViolation(f"xclbin(path) takes a str, got {type(path).__name__}")
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"failed to load xclbin {path}: {exc}") from None
        if d.get("fake_xclbin") != 1:
            raise RuntimeError(f"{path} is not an xclbin (fake stand-in)")
        self._uuid = _Uuid(d["uuid"])
        self._kernels = [_KernelInfo(k) for k in d["kernels"]]
        self._design = d["design"]

    def get_uuid(self) -> _Uuid:
        return self._uuid

    def get_kernels(self) -> list[_KernelInfo]:
        return list(self._kernels)

    def get_xsa_name(self) -> str:
        return "fake-xsa"


class _HwContext:
    _fake: FakePyxrt

    def __init__(self, device: _Device, uid: _Uuid):
        f = self._fake
        self._live = False
        if not isinstance(device, _Device) or not isinstance(uid, _Uuid):
            raise FakeXrtViolation("hw_context(device, uuid) takes a pyxrt.device and the uuid of a registered xclbin")
        if uid.to_string() not in device._registered:
            raise FakeXrtViolation("hw_context before register_xclbin: register the xclbin on this device first")
        if f.live_contexts + f.other_contexts >= f.hwctx_limit:
            raise RuntimeError(f"CREATE_HWCTX failed: MGMT_ERT_NOAVAIL (limit {f.hwctx_limit} contexts)")
        self._device, self._uuid = device, uid
        self._xclbin = device._registered[uid.to_string()]
        f.live_contexts += 1
        f.stats["contexts_created"] += 1
        self._live = True

    def __del__(self):
        f = self._fake
        if getattr(self, "_live", False):
            f.live_contexts -= 1
            f.released.append("hw_context")
            if f.live_kernels:
                f.violations.append("hw_context released while kernels are alive")


class _Kernel:
    _fake: FakePyxrt

    def __init__(self, ctx: _HwContext, name: str):
        self._live = False
        if not isinstance(ctx, _HwContext):
            raise FakeXrtViolation("kernel(hw_context, name): the legacy kernel(device, uuid, name) form is deprecated")
        xb = ctx._xclbin
        names = [k.get_name() for k in xb._kernels]
        if name not in names:
            raise RuntimeError(f"No such compute unit '{name}' in the xclbin (has {names})")
        self._ctx, self._name = ctx, name
        self._num_args = next(k.get_num_args() for k in xb._kernels if k.get_name() == name)
        self._design = xb._design
        self._fake.live_kernels += 1
        self._live = True

    def group_id(self, i: int) -> int:
        if not isinstance(i, int) or not 0 <= i < self._num_args:
            raise FakeXrtViolation(f"group_id({i!r}): the kernel has {self._num_args} arguments")
        return 0x10000 + i if i >= 3 else i

    def __call__(self, *args):
        r = self._fake.run(self)
        if len(args) != self._num_args:
            raise FakeXrtViolation(f"kernel called with {len(args)} arguments, the xclbin declares {self._num_args} "
                                   f"(real XRT segfaults on extra BOs and leaves missing ones unset)")
        for i, a in enumerate(args):
            r.set_arg(i, a)
        r.start()
        return r

    def __del__(self):
        if getattr(self, "_live", False):
            self._fake.live_kernels -= 1
            self._fake.released.append("kernel")


class _Run:
    _fake: FakePyxrt

    def __init__(self, kernel: _Kernel):
        if not isinstance(kernel, _Kernel):
            raise FakeXrtViolation("run(kernel) takes a pyxrt.kernel")
        self._kernel = kernel
        self._args: dict[int, Any] = {}
        self._state = ert_cmd_state.ERT_CMD_STATE_NEW
        self._outcome = "ok"

    def set_arg(self, i: int, value) -> None:
        if type(value) is not int and not isinstance(value, _Bo):  # noqa: E721 - bool, float, numpy ints refused
            raise FakeXrtViolation(f"argument {i} is a {type(value).__name__}: pass a plain int or a pyxrt.bo "
                                   f"(real pyxrt silently leaves the slot unset)")
        if isinstance(value, _Bo) and value._fake is not self._fake:
            raise FakeXrtViolation(f"argument {i} is a BO of another device")
        self._args[i] = value

    def start(self) -> None:
        k, f = self._kernel, self._fake
        if self._state is not ert_cmd_state.ERT_CMD_STATE_NEW:
            raise FakeXrtViolation("run started twice")
        missing = [i for i in range(k._num_args) if i not in self._args]
        if missing:
            raise FakeXrtViolation(f"arguments {missing} were never set")
        d = k._design
        opcode, instr, ninstr = self._args[0], self._args[1], self._args[2]
        if type(opcode) is not int or opcode != d["opcode"]:  # noqa: E721
            raise FakeXrtViolation(f"opcode {opcode!r}: this design runs with opcode {d['opcode']}")
        if not isinstance(instr, _Bo) or instr._flags is not bo_flags.cacheable:
            raise FakeXrtViolation("argument 1 must be the instruction BO, allocated cacheable")
        raw = bytes(instr._shadow)
        words = len(raw) // 4
        want = words if d["insts_len_unit"] == "words" else len(raw)
        if ninstr != want:
            raise FakeXrtViolation(f"ninstr = {ninstr}, the design counts its stream in {d['insts_len_unit']}: expected {want}")
        if hashlib.sha256(raw).hexdigest() != d["insts_sha256"]:
            raise FakeXrtViolation("the instruction BO's device bytes do not hash to the design's insts: not written, "
                                   "not synced, or from another build (real hardware hangs or no-ops)")
        for i, need in zip((3, 4, 5), (d["M"] * d["K"], d["K"] * d["N"], 4 * d["M"] * d["N"])):
            bo = self._args[i]
            if not isinstance(bo, _Bo) or bo._flags is not bo_flags.host_only:
                raise FakeXrtViolation(f"argument {i} must be a host_only data BO")
            if bo._size < need:
                raise FakeXrtViolation(f"argument {i}: BO of {bo._size} bytes, the design reads/writes {need}")
        self._outcome = f._next_outcome()
        f.fault_log.append(self._outcome)
        f.stats["dispatches"] += 1
        self._state = ert_cmd_state.ERT_CMD_STATE_RUNNING

    def state(self) -> ert_cmd_state:
        return self._state

    def wait(self, timeout_ms: int = 0) -> ert_cmd_state:
        f = self._fake
        if type(timeout_ms) is not int:  # noqa: E721
            raise FakeXrtViolation(f"wait(timeout_ms) takes an int, got {type(timeout_ms).__name__}")
        if self._state is not ert_cmd_state.ERT_CMD_STATE_RUNNING:
            return self._state
        o = self._outcome
        if o == "raise":
            self._state = ert_cmd_state.ERT_CMD_STATE_ERROR
            raise RuntimeError("EXEC_CMD IOCTL failed (err=2): No such file or directory")
        if o in ("timeout", "timeout_late") or (o == "slow" and 0 < timeout_ms < f.slow_ms):
            if o == "timeout_late":
                f._late.append(self)
            return ert_cmd_state.ERT_CMD_STATE_TIMEOUT  # still in flight
        if o in ("abort", "error"):
            self._state = ert_cmd_state.ERT_CMD_STATE_ABORT if o == "abort" else ert_cmd_state.ERT_CMD_STATE_ERROR
            return self._state
        self._execute(o)
        self._state = ert_cmd_state.ERT_CMD_STATE_COMPLETED
        for late in [r for r in f._late if r is not self]:  # a timed-out run lands now, on its own buffers
            f._late.remove(late)
            late._execute("late")
            late._state = ert_cmd_state.ERT_CMD_STATE_COMPLETED
        return self._state

    def _execute(self, outcome: str) -> None:
        d, f = self._kernel._design, self._fake
        a, b, c = self._args[3], self._args[4], self._args[5]
        out = npu_emulator.run_launch(d, bytes(a._shadow), bytes(b._shadow))
        n = len(out)
        if outcome == "noop":
            return
        if outcome == "partial":
            out = out[: n // 2]
        elif outcome == "garbage":
            out = f._rng.integers(-(2**31), 2**31, n // 4, dtype=np.int64).astype("<i4").tobytes()
        elif outcome == "late":
            out = np.full(n // 4, 7, "<i4").tobytes()  # in range: only fresh buffers protect the caller
        c._shadow[: len(out)] = out


class _Bo:
    _fake: FakePyxrt
    flags = bo_flags

    def __init__(self, *args):
        f = self._fake
        self._root = None
        if len(args) == 3 and isinstance(args[0], _Bo):  # sub-buffer: bo(parent, size, offset)
            parent, size, offset = args
            if parent._root is not None:
                raise FakeXrtViolation("sub-buffer of a sub-buffer: create every sub-buffer from the root BO")
            if not (type(size) is int and type(offset) is int and 0 <= offset and offset + size <= parent._size):  # noqa: E721
                raise FakeXrtViolation(f"sub-buffer [{offset}, +{size}) outside its parent of {parent._size} bytes")
            self._root, self._flags, self._group, self._size = parent, parent._flags, parent._group, size
            self._host = memoryview(parent._host)[offset : offset + size]
            self._shadow = memoryview(parent._shadow)[offset : offset + size]
            return
        if len(args) != 4:
            raise FakeXrtViolation("bo(device, size, flags, group) or bo(parent_bo, size, offset)")
        device, size, flags, group = args
        if not isinstance(device, _Device):
            raise FakeXrtViolation("bo(device, ...) needs a pyxrt.device")
        if type(size) is not int or size <= 0:  # noqa: E721
            raise FakeXrtViolation(f"BO size {size!r} must be a positive int")
        if not isinstance(flags, bo_flags):
            raise FakeXrtViolation(f"BO flags {flags!r} must be pyxrt.bo.flags")
        if flags not in (bo_flags.host_only, bo_flags.cacheable):
            raise RuntimeError(f"unsupported buffer type: {flags.name} flag (amdxdna takes host_only or cacheable)")
        if type(group) is not int:  # noqa: E721
            raise FakeXrtViolation(f"BO group {group!r} must be an int (use kernel.group_id(i))")
        self._flags, self._group, self._size = flags, group, size
        self._host = bytearray(size)
        self._shadow = bytearray(b"\xcd" * size)  # the device side starts different from the host side
        f.stats["bo_allocs"] += 1
        f.stats["bo_bytes"] += size

    def size(self) -> int:
        return self._size

    def address(self) -> int:
        return 0x4000_0000 + id(self) % 0x1000_0000

    def write(self, buf, offset: int = 0) -> None:
        mv = memoryview(buf)
        if not mv.c_contiguous:
            raise FakeXrtViolation("bo.write of a non-contiguous buffer: pyxrt ignores strides and uploads garbage; "
                                   "pass np.ascontiguousarray(...)")
        raw = mv.cast("B")
        if type(offset) is not int or offset < 0 or offset + raw.nbytes > self._size:  # noqa: E721
            raise FakeXrtViolation(f"bo.write of {raw.nbytes} bytes at {offset} overruns a BO of {self._size}")
        self._host[offset : offset + raw.nbytes] = raw
        self._fake.stats["bytes_written"] += raw.nbytes

    def read(self, size: int, offset: int = 0) -> np.ndarray:
        if type(size) is not int or type(offset) is not int or offset < 0 or offset + size > self._size:  # noqa: E721
            raise FakeXrtViolation(f"bo.read of {size!r} bytes at {offset!r} overruns a BO of {self._size}")
        return np.frombuffer(bytes(self._host[offset : offset + size]), dtype=np.int8).copy()

    def map(self) -> memoryview:
        return memoryview(self._host)

    def sync(self, direction: xclBOSyncDirection, size: int | None = None, offset: int = 0) -> None:
        f = self._fake
        if not isinstance(direction, xclBOSyncDirection):
            raise FakeXrtViolation(f"sync direction {direction!r} must be pyxrt.xclBOSyncDirection")
        size = self._size if size is None else size
        if type(size) is not int or type(offset) is not int or offset < 0 or offset + size > self._size:  # noqa: E721
            raise FakeXrtViolation(f"sync of {size!r} bytes at {offset!r} overruns a BO of {self._size}")
        role = {0: "insts", 1: "insts", 0x10003: "A", 0x10004: "B", 0x10005: "C"}.get(self._group, str(self._group))
        if direction is xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
            self._shadow[offset : offset + size] = self._host[offset : offset + size]
            f.stats["syncs_to_device"] += 1
            f.stats[f"bytes_to_device_{role}"] += size
        else:
            self._host[offset : offset + size] = self._shadow[offset : offset + size]
            f.stats["syncs_from_device"] += 1
            f.stats[f"bytes_from_device_{role}"] += size

    def __del__(self):
        if getattr(self, "_root", 1) is None and hasattr(self, "_group"):
            self._fake.released.append("bo_insts" if self._flags is bo_flags.cacheable else "bo")


# -- artifacts -----------------------------------------------------------------------------------------
def write_fake_artifact(folder: Path | str, *, name: str = "fake_gemm", generation: str = "npu2", m: int = 8, k: int = 16,
                        n: int = 8, n_cols: int = 1, M_cap: int = 32, K: int = 64, N: int = 32,
                        b_layout: str = "row_major_KN", insts_len_unit: str = "words", kernel: str = "MLIR_AIE",
                        num_args: int = 6, seed: int = 0) -> Path:
    """Write an xclbin stand-in, an instruction stream and their manifest; return the manifest path.

    The stand-in is JSON (uuid, kernels, compiled design); the backend only hashes it and hands its
    path to ``pyxrt.xclbin``, so the fake can read the design the way real XRT reads kernels.json.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    insts = np.random.default_rng(seed).integers(0, 2**32, 64 + seed, dtype=np.uint64).astype(np.uint32)
    (folder / f"{name}.insts.bin").write_bytes(insts.tobytes())
    uid = str(uuidlib.UUID(int=np.random.default_rng(seed + 1).integers(0, 2**62) << 64 | 0xF00D))
    design = {"M": M_cap, "K": K, "N": N, "b_layout": b_layout, "c_layout": "row_major_MN", "opcode": 3,
              "insts_len_unit": insts_len_unit, "insts_sha256": hashlib.sha256(insts.tobytes()).hexdigest()}
    xclbin = {"fake_xclbin": 1, "uuid": uid, "kernels": [{"name": kernel, "num_args": num_args}], "design": design}
    (folder / f"{name}.xclbin").write_text(json.dumps(xclbin))
    manifest = {
        "schema": 1, "name": name, "generation": generation,
        "abi": {"kernel": kernel, "opcode": 3, "args": ["opcode", "instr", "ninstr", "A", "B", "C"],
                "num_host_bos": 3, "insts_len_unit": insts_len_unit},
        "design": {"tile": {"m": m, "k": k, "n": n}, "n_cols": n_cols, "M_cap": M_cap, "K": K, "N": N,
                   "a_layout": "row_major_MK", "b_layout": b_layout, "c_layout": "row_major_MN",
                   "dtype_in": "i8", "dtype_out": "i32", "source": "tests/fakes"},
        "numerics": "exact int32 sum of int8 products, shift 0, acc32 wrap",
        "artifacts": {
            "xclbin": {"file": f"{name}.xclbin", "sha256": hashlib.sha256((folder / f"{name}.xclbin").read_bytes()).hexdigest()},
            "insts": {"file": f"{name}.insts.bin", "sha256": hashlib.sha256(insts.tobytes()).hexdigest()},
        },
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(manifest, indent=1))
    return path

