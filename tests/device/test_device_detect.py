"""NPU discovery on fake filesystems and a fake XRT; ``device_check`` fails without an NPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from onebit_engine.gemm.npu.probe import detect_npu, main
from tests.fakes.fake_pyxrt import FakePyxrt


def fake_host(tmp_path: Path, *, driver: str | None = "amdxdna", vbnv: str = "RyzenAI-npu5") -> tuple[str, Path]:
    node = tmp_path / "dev" / "accel" / "accel0"
    node.parent.mkdir(parents=True)
    node.write_text("")
    dev = tmp_path / "sys" / "class" / "accel" / "accel0" / "device"
    dev.mkdir(parents=True)
    (dev / "vbnv").write_text(vbnv + "\n")
    (dev / "fw_version").write_text("1.5.2.380\n")
    if driver:
        drv = tmp_path / "sys" / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True)
        os.symlink(drv, dev / "driver")
        mod = tmp_path / "sys" / "module" / "amdxdna"
        mod.mkdir(parents=True)
        (mod / "version").write_text("2.19.0\n")
    return str(tmp_path / "dev" / "accel" / "accel*"), tmp_path / "sys"


def test_no_node(tmp_path):
    s = detect_npu(accel_glob=str(tmp_path / "none*"))
    assert not s.present and "no device node" in s.reason


def test_other_platform():
    assert "Linux-only" in detect_npu(platform="win32").reason


def test_wrong_driver(tmp_path):
    g, sysfs = fake_host(tmp_path, driver=None)
    s = detect_npu(accel_glob=g, sysfs=sysfs, import_xrt=False)
    assert not s.present and "not amdxdna" in s.reason


def test_present_with_versions_and_fake_xrt(tmp_path):
    g, sysfs = fake_host(tmp_path)
    x = FakePyxrt(device_name="RyzenAI-npu5")
    s = detect_npu(accel_glob=g, sysfs=sysfs, xrt=x)
    assert s.present, s.reason
    assert (s.generation, s.model, s.driver, s.driver_version, s.firmware_version) == ("npu2", "RyzenAI-npu5", "amdxdna", "2.19.0", "1.5.2.380")
    assert x.open_devices == 0  # the probe does not keep a handle


def test_pyxrt_missing_and_open_failure(tmp_path, monkeypatch):
    g, sysfs = fake_host(tmp_path)
    monkeypatch.setitem(sys.modules, "pyxrt", None)
    s = detect_npu(accel_glob=g, sysfs=sysfs)
    assert not s.present and "import pyxrt" in s.reason and "not on PyPI" in s.reason
    s = detect_npu(accel_glob=g, sysfs=sysfs, xrt=FakePyxrt(present=False))
    assert not s.present and "pyxrt.device(0) failed" in s.reason


def test_unknown_generation(tmp_path):
    g, sysfs = fake_host(tmp_path, vbnv="SomethingElse")
    s = detect_npu(accel_glob=g, sysfs=sysfs, xrt=FakePyxrt(device_name="SomethingElse"))
    assert not s.present and "not a known XDNA" in s.reason


def test_device_check_exits_nonzero_without_an_npu(capsys):
    if os.path.exists("/dev/accel"):
        pytest.skip("this machine has accel nodes")
    assert main([]) == 1
    assert "needs an NPU" in capsys.readouterr().err
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "tools" / "device_check.py")], capture_output=True, text=True)
    assert r.returncode == 1 and "no NPU" in r.stderr


def test_import_has_no_side_effects():
    code = "import sys, onebit_engine.gemm.npu.probe as d; assert 'pyxrt' not in sys.modules and 'resource' not in dir(d)"
    subprocess.run([sys.executable, "-c", code], check=True)
