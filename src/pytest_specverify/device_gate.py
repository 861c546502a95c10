"""The ``device`` marker's gate: is the NPU here? ``detect_device()`` answers with a reason string.

The probe itself is the engine's (node, amdxdna driver, access, ``import pyxrt``; the device is not
opened: the backend opens its own handle). Only the engine's xrt backend and its probe import pyxrt; this
module maps the probe's answer to the plugin's :class:`DeviceStatus`. A conftest replaces it with the
``pytest_specverify_device_status`` hook (``hookspec.py``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceStatus:
    present: bool
    reason: str


def detect_device(accel_glob: str = "/dev/accel/accel*") -> DeviceStatus:
    """Present when the engine's probe finds a usable NPU at a node matching ``accel_glob`` and
    ``import pyxrt`` works (pyxrt is imported only once a node and its driver are found, so hosts without
    an NPU pay nothing for it)."""
    from onebit_engine.gemm.npu.probe import detect_npu  # the one place the plugin names the engine's probe

    status = detect_npu(accel_glob=accel_glob, open_device=False)
    return DeviceStatus(bool(status.present), str(status.reason))
