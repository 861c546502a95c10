"""Emulator == device, held by golden vectors captured once on a real NPU (tools/capture_npu_goldens.py).

Every ``kernels/goldens/*.json`` records a fixed-seed launch and the sha256 of the C bytes the real
device produced; the emulator must reproduce each hash. No golden has been captured yet (no NPU has
run this code), so this test collects nothing until one is committed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from onebit_engine.gemm.npu import emulator as npu_emulator
from onebit_engine.gemm.npu.emulator import GOLDEN_KINDS, golden_inputs
from onebit_engine.gemm.npu.xrt import KERNELS_DIR

GOLDENS = sorted((KERNELS_DIR / "goldens").glob("*.json"))


@pytest.mark.parametrize("path", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_emulator_reproduces_device_goldens(path: Path):
    g = json.loads(path.read_text())
    for case in g["cases"]:
        a, b = golden_inputs(case["seed"], case["kind"], g["design"])
        assert npu_emulator.output_digest(npu_emulator.run_launch(g["design"], a, b)) == case["sha256"], case


def test_golden_inputs_are_deterministic():
    design = {"M": 16, "K": 32, "N": 16, "b_layout": "row_major_KN", "c_layout": "row_major_MN"}
    for kind in GOLDEN_KINDS:
        assert golden_inputs(3, kind, design) == golden_inputs(3, kind, design)
