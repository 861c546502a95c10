"""Every injected device fault: detected, retried or answered by the host with identical bits, counted."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from onebit_engine import BackendUnavailable, ConfigError
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.gemm.npu.xrt import DeviceFault, XrtBackend
from tests.fakes.fake_pyxrt import FakePyxrt, write_fake_artifact

W = np.random.default_rng(0).standard_normal((40, 50)).astype(np.float32)   # 2 N blocks, 1 K block
X = np.random.default_rng(1).standard_normal((8, 50)).astype(np.float32)


@pytest.fixture(autouse=True)
def quiet(caplog):
    caplog.set_level(logging.ERROR, logger="onebit_engine.gemm.npu.xrt")


def want() -> np.ndarray:
    h = HostIntBackend(kernel="numpy")
    return h.matmul(X, h.pack(W)).view(np.uint32)


@pytest.mark.parametrize("fault,kind", [
    ("timeout", "timeout"), ("abort", "abort"), ("error", "error"), ("raise", "error"),
    ("noop", "noop"), ("partial", "partial"), ("garbage", "bad_output"), ("timeout_late", "timeout"),
])
def test_one_fault_is_retried_and_the_output_is_exact(make_backend, fake, fault, kind):
    b = make_backend(retries=1)
    pw = b.pack(W)
    fake.inject(fault)
    assert np.array_equal(b.matmul(X, pw).view(np.uint32), want())
    assert b.events[kind] == 1 and b.events["retries"] == 1 and b.events["fallbacks"] == 0
    in_flight = fault in ("timeout", "abort", "error", "raise", "timeout_late")
    assert b.events["buffers_quarantined"] == int(in_flight)
    assert b.describe()["events"][kind] == 1
    # later calls keep using the device
    assert np.array_equal(b.matmul(X, pw).view(np.uint32), want()) and fake.fault_log[-1] == "ok"


def test_late_completion_after_timeout_cannot_corrupt_a_later_result(make_backend, fake):
    b = make_backend(retries=1)
    pw = b.pack(W)
    fake.inject("timeout_late")          # lands (with wrong but in-range values) during the retry's wait
    assert np.array_equal(b.matmul(X, pw).view(np.uint32), want())
    for _ in range(3):
        assert np.array_equal(b.matmul(X, pw).view(np.uint32), want())
    assert not fake._late                  # it did land - on the quarantined buffers


@pytest.mark.parametrize("fault", ["timeout", "abort", "noop", "garbage", "raise"])
def test_persistent_fault_falls_back_to_host_int_with_identical_output(make_backend, fake, fault):
    b = make_backend(retries=2, disable_after=3)
    pw = b.pack(W)
    fake.persistent = fault
    for call in range(1, 6):
        assert np.array_equal(b.matmul(X, pw).view(np.uint32), want())
        assert b.events["fallbacks"] == min(call, 3)
    assert b.events["device_disabled"] == 1 and b.events["host_calls"] == 2
    assert fake.stats["dispatches"] == 3 * 3  # three calls x (1 + 2 retries) on the first launch, then none
    d = b.describe()
    assert d["device_enabled"] is False and "consecutive" in d["disabled_reason"] and d["events"]["fallbacks"] == 3


def test_a_success_resets_the_consecutive_failure_count(make_backend, fake):
    b = make_backend(retries=0, disable_after=2)
    pw = b.pack(W)
    for _ in range(4):
        fake.inject("abort")
        b.matmul(X, pw)
        b.matmul(X, pw)
    assert b.events["fallbacks"] == 4 and b.events["device_disabled"] == 0


def test_fallback_none_raises(make_backend, fake):
    b = make_backend(retries=1, fallback=None)
    pw = b.pack(W)
    fake.persistent = "timeout"
    with pytest.raises(DeviceFault, match="fallback=None"):
        b.matmul(X, pw)


def test_a_run_slower_than_the_timeout_is_retried(make_backend, fake):
    fake.slow_ms = 10_000
    b = make_backend(retries=1, timeout_ms=50)
    pw = b.pack(W)
    fake.inject("slow")
    assert np.array_equal(b.matmul(X, pw).view(np.uint32), want())
    assert b.events["timeout"] == 1


def test_verify_mode_catches_in_range_corruption(make_backend, fake):
    b = make_backend(verify=True)
    pw = b.pack(W)
    fake.inject("timeout_late")  # not in range-checkable garbage, but verify compares with the host
    assert np.array_equal(b.matmul(X, pw).view(np.uint32), want())


# -- construction-time refusals ---------------------------------------------------------------------------
def test_missing_pyxrt_is_backend_unavailable_with_a_reason(monkeypatch, artifact):
    monkeypatch.setitem(__import__("sys").modules, "pyxrt", None)  # import pyxrt -> ImportError
    with pytest.raises(BackendUnavailable, match=r"needs pyxrt.*ships with XRT.*not on PyPI"):
        XrtBackend(manifest=artifact)
    from onebit_engine.gemm import get_backend

    with pytest.raises(BackendUnavailable, match="pyxrt"):
        get_backend("xrt")


def test_importing_the_backend_does_not_import_pyxrt():
    import subprocess
    import sys

    code = "import sys, onebit_engine.gemm.npu.xrt, onebit_engine.gemm.npu.probe; assert 'pyxrt' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_manifest_hash_mismatch_refused(fake, artifact):
    xclbin = artifact.with_suffix(".xclbin")
    xclbin.write_text(xclbin.read_text().replace('"M": 32', '"M": 32 '))
    with pytest.raises(BackendUnavailable, match="different builds"):
        XrtBackend(fake, artifact)
    assert fake.open_devices == 0  # the failed construction released the device


def test_missing_artifact_and_unbuilt_manifest_refused(fake, artifact, tmp_path):
    import json

    artifact.with_suffix("").with_suffix(".insts.bin").unlink()
    with pytest.raises(BackendUnavailable, match="missing"):
        XrtBackend(fake, artifact)
    d = json.loads(artifact.read_text())
    d["artifacts"]["xclbin"]["sha256"] = None
    artifact.write_text(json.dumps(d))
    with pytest.raises(BackendUnavailable, match="not built"):
        XrtBackend(fake, artifact)


def test_shipped_manifests_are_valid_but_unbuilt_and_refused(fake):
    from onebit_engine.gemm.npu.layout import KernelManifest
    from onebit_engine.gemm.npu.xrt import KERNELS_DIR

    for gen in ("npu1", "npu2"):
        man = KernelManifest.load(KERNELS_DIR / "manifests" / f"gemm_i8i32_{gen}.json")
        assert man.generation == gen and man.xclbin.sha256 is None
    with pytest.raises(BackendUnavailable, match="not built.*nox -s kernels"):
        XrtBackend(fake)  # default manifest for the device's generation (npu4 -> npu2)


def test_generation_mismatch_refused(artifact):
    with pytest.raises(BackendUnavailable, match="built for npu2.*npu1"):
        XrtBackend(FakePyxrt(device_name="RyzenAI-npu1"), artifact)


@pytest.mark.parametrize("kw,match", [
    (dict(kernel="OTHER"), "not in"),
    (dict(num_args=7), "declares 7 arguments"),
])
def test_kernel_abi_mismatch_refused(fake, tmp_path, kw, match):
    import json

    man = write_fake_artifact(tmp_path, **kw)
    d = json.loads(man.read_text())
    d["abi"]["kernel"] = "MLIR_AIE"
    man.write_text(json.dumps(d))
    with pytest.raises(BackendUnavailable, match=match):
        XrtBackend(fake, man)


@pytest.mark.parametrize("kw,match", [
    (dict(N=36), "N % 8"), (dict(m=6), "mmul tile"), (dict(n_cols=9), "usable columns"),
    (dict(K=140_000, k=16), "overflow"), (dict(K=65 * 16, k=16), "64-repeat"),
])
def test_invalid_manifest_refused(tmp_path, kw, match):
    from onebit_engine.gemm.npu.layout import KernelManifest

    with pytest.raises(ConfigError, match=match):
        KernelManifest.load(write_fake_artifact(tmp_path, **kw))


def test_device_absent_enodev_and_context_exhaustion(artifact):
    with pytest.raises(BackendUnavailable, match="cannot open NPU device 0"):
        XrtBackend(FakePyxrt(present=False), artifact)
    flaky = FakePyxrt(enodev_failures=2)  # transient ENODEV: retried with backoff
    b = XrtBackend(flaky, artifact)
    assert flaky.stats["device_opens"] == 1
    b.close()
    busy = FakePyxrt(other_contexts=16)
    with pytest.raises(BackendUnavailable, match="MGMT_ERT_NOAVAIL"):
        XrtBackend(busy, artifact)
    assert busy.open_devices == 0


def test_weight_upload_failure_keeps_that_weight_on_the_host(make_backend, fake, monkeypatch):
    b = make_backend()
    real_bo = fake.bo

    class failing(real_bo):  # weight BOs (group of argument 4) cannot be allocated
        def __init__(self, *args):
            if len(args) == 4 and args[3] == 0x10004:
                raise RuntimeError("failed to allocate BO: Lock limit exceeded")
            super().__init__(*args)

    monkeypatch.setattr(fake, "bo", failing)
    pw = b.pack(W)
    monkeypatch.setattr(fake, "bo", real_bo)
    assert pw.bos is None and b.events["upload_failed"] == 1
    assert np.array_equal(b.matmul(X, pw).view(np.uint32), want()) and b.events["host_calls"] == 1
