"""pytest_specverify: the hook surface (markers now; options and checks build on it)."""
from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "device: needs a real AMD XDNA NPU (skipped when absent)")
    config.addinivalue_line("markers", "host_gemm: runs the device numerics on the host emulation")
    config.addinivalue_line("markers", "replay_check: runs commits with the replay check on")
