"""Fail fast (exit 1, with the reason) unless an AMD XDNA NPU is usable; `nox -s device` runs it first.

The environment is read here, at the edge: $XILINX_XRT/python (default /opt/xilinx/xrt/python) is
where XRT installs pyxrt, so it is offered to the probe. Usage: python tools/device_check.py [--no-open]
"""
from __future__ import annotations

import os
import sys

from onebit_engine.gemm.npu.probe import main

if __name__ == "__main__":
    xrt_root = os.environ.get("XILINX_XRT", "/opt/xilinx/xrt")
    raise SystemExit(main(["--xrt-python", os.path.join(xrt_root, "python"), *sys.argv[1:]]))
