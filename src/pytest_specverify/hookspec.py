"""Hooks specverify offers to other plugins and conftest files."""
from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_specverify_device_status(config):
    """Return a ``pytest_specverify.DeviceStatus`` to replace the built-in NPU detection.

    Example (a conftest.py on a runner whose NPU sits behind a different node)::

        from pytest_specverify.device_gate import detect_device

        def pytest_specverify_device_status(config):
            return detect_device("/dev/accel/npu*")
    """
