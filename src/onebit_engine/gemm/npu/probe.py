"""Is there a usable AMD XDNA NPU here? ``detect_npu()`` answers with a :class:`DeviceStatus`.

The probe runs the cheap checks first and imports XRT last (docs/device.md, "Detecting an NPU"):

1. Linux; an accel node ``/dev/accel/accel*`` that this user can read and write;
2. the driver: ``/sys/class/accel/accelN/device`` bound to ``amdxdna`` (or ``/sys/module/amdxdna``
   loaded), with the model (``vbnv``, e.g. ``RyzenAI-npu5``) and firmware version where readable;
3. the memlock limit (a low one makes large weight buffers fail to allocate; reported, not fatal);
4. ``import pyxrt`` (it ships with XRT, not PyPI), then ``pyxrt.device(i)`` opens and names itself.

Nothing happens at import. ``python -m onebit_engine.gemm.npu.probe`` (or ``tools/device_check.py``, which
``nox -s device`` runs first) prints the status and exits 1 when no NPU is usable.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import BackendUnavailable
from .layout import generation_of

MIN_MEMLOCK = 1 << 30  # below this, resident weights of a real model will not fit


@dataclass(frozen=True)
class DeviceStatus:
    """What the probe found. ``present`` means an NPU that XRT can open is here."""

    present: bool
    reason: str
    generation: str | None = None        # "npu1" (Phoenix/Hawk) or "npu2" (Strix/Strix Halo/Krackan)
    model: str | None = None             # sysfs vbnv or XRT's device name
    nodes: tuple[str, ...] = ()
    driver: str | None = None
    driver_version: str | None = None
    firmware_version: str | None = None
    memlock: str | None = None
    notes: tuple[str, ...] = field(default=())

    def lines(self) -> list[str]:
        out = [f"NPU present: {self.present} - {self.reason}"]
        for key in ("generation", "model", "driver", "driver_version", "firmware_version", "memlock"):
            out.append(f"  {key}: {getattr(self, key) if getattr(self, key) is not None else 'unknown'}")
        out.append(f"  nodes: {', '.join(self.nodes) or 'none'}")
        out += [f"  note: {n}" for n in self.notes]
        return out



def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _memlock() -> tuple[str, str | None]:
    try:
        import resource
    except ImportError:  # not Linux
        return "unknown", None
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY:
        return "unlimited", None
    note = None
    if soft < MIN_MEMLOCK:
        note = (f"memlock limit {soft} B is low: large buffer objects fail with 'Lock limit exceeded'; raise it "
                f"(ulimit -l unlimited, /etc/security/limits.d, or systemd LimitMEMLOCK)")
    return f"{soft} B", note


def detect_npu(*, accel_glob: str = "/dev/accel/accel*", sysfs: str | Path = "/sys", xrt: Any = None,
               import_xrt: bool = True, open_device: bool = True, device_index: int = 0,
               platform: str | None = None) -> DeviceStatus:
    """Probe for an NPU (see the module docstring for the order). ``xrt`` injects the XRT module
    (tests pass a fake); otherwise ``pyxrt`` is imported, only once a node and a driver are found."""
    platform = platform or sys.platform
    if not platform.startswith("linux"):
        return DeviceStatus(False, f"no NPU: platform {platform!r}; the amdxdna driver is Linux-only here")
    nodes = tuple(sorted(glob.glob(accel_glob)))
    if not nodes:
        return DeviceStatus(False, f"no NPU: no device node matches {accel_glob} (is the amdxdna driver loaded? "
                                   f"it is upstream from Linux 6.14; otherwise install amdxdna-dkms)")
    sysfs = Path(sysfs)
    node = nodes[min(device_index, len(nodes) - 1)]
    dev_dir = sysfs / "class" / "accel" / Path(node).name / "device"
    driver_link = dev_dir / "driver"
    driver = Path(os.path.realpath(driver_link)).name if driver_link.exists() else None
    module_dir = sysfs / "module" / "amdxdna"
    if driver is None and module_dir.is_dir():
        driver = "amdxdna"
    driver_version = _read(module_dir / "version") or _read(module_dir / "srcversion")
    model = _read(dev_dir / "vbnv")
    firmware = _read(dev_dir / "fw_version")
    memlock, mem_note = _memlock()
    notes = tuple(n for n in (mem_note,) if n)
    found = dict(nodes=nodes, driver=driver, driver_version=driver_version, firmware_version=firmware,
                 memlock=memlock, model=model, generation=generation_of(model), notes=notes)
    if driver != "amdxdna":
        return DeviceStatus(False, f"no NPU: {node} exists but is bound to {driver or 'no driver'}, not amdxdna", **found)
    if not os.access(node, os.R_OK | os.W_OK):
        return DeviceStatus(False, f"no NPU access: {node} is not readable and writable by this user "
                                   f"(add the user to the 'render' group or fix the udev rule)", **found)
    if not import_xrt:
        return DeviceStatus(True, f"NPU node {node} bound to amdxdna (XRT not checked)", **found)
    if xrt is None:
        from .xrt import (
            import_pyxrt,  # the xrt backend is the one importer of pyxrt
        )

        try:
            xrt = import_pyxrt()
        except BackendUnavailable as exc:
            return DeviceStatus(False, f"NPU at {node} but `import pyxrt` failed: {exc}", **found)
    if not open_device:
        return DeviceStatus(True, f"NPU at {node}, pyxrt importable", **found)
    try:
        handle = xrt.device(device_index)
        name = str(handle.get_info(xrt.xrt_info_device.name))
        del handle  # one handle per process: the backend opens its own
    except Exception as exc:  # noqa: BLE001 - pyxrt raises RuntimeError; anything else is also a "no"
        return DeviceStatus(False, f"NPU at {node} but pyxrt.device({device_index}) failed: {exc}", **found)
    found["model"] = model or name
    found["generation"] = generation_of(model) or generation_of(name)
    if found["generation"] is None:
        return DeviceStatus(False, f"device {name!r} at {node} is not a known XDNA NPU generation", **found)
    return DeviceStatus(True, f"NPU {name!r} ({found['generation']}) at {node}, opened through pyxrt", **found)


def main(argv: list[str] | None = None) -> int:
    """Print the probe's findings; exit 0 when an NPU is usable, 1 otherwise."""
    p = argparse.ArgumentParser(prog="python -m onebit_engine.gemm.npu.probe", description=main.__doc__)
    p.add_argument("--xrt-python", metavar="DIR", action="append", default=[],
                   help="directory holding pyxrt (e.g. $XILINX_XRT/python), prepended to sys.path")
    p.add_argument("--device-index", type=int, default=0, help="XRT device index. Default: %(default)r")
    p.add_argument("--no-open", action="store_true", help="do not open the device (only import pyxrt)")
    args = p.parse_args(argv)
    for d in reversed(args.xrt_python):
        if d and d not in sys.path:
            sys.path.insert(0, d)
    status = detect_npu(device_index=args.device_index, open_device=not args.no_open)
    print("\n".join(status.lines()))
    if not status.present:
        print(f"error: this session needs an NPU and none is usable: {status.reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
