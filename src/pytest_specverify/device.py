"""Is the NPU here? ``detect_device()`` answers with a reason string (extend it for new devices)."""
from __future__ import annotations

import glob
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceStatus:
    present: bool
    reason: str


def detect_device(accel_glob: str = "/dev/accel/accel*") -> DeviceStatus:
    """Present when an accel device node exists and ``import pyxrt`` works (pyxrt is imported only
    when a node exists, so hosts without an NPU pay nothing)."""
    nodes = sorted(glob.glob(accel_glob))
    if not nodes:
        return DeviceStatus(False, f"no NPU: no device node matches {accel_glob}")
    try:
        importlib.import_module("pyxrt")
    except Exception as exc:  # ImportError, or a broken XRT install raising anything else
        return DeviceStatus(False, f"NPU node {nodes[0]} present but `import pyxrt` failed: {exc}")
    return DeviceStatus(True, f"NPU at {', '.join(nodes)} (pyxrt importable)")
