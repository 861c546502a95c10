"""Tests that need a real NPU (``-m device``; skipped with the reason without one, an error with
``--specverify-require-device``). They need the built artifacts (``nox -s kernels``) too: on a
device runner an unbuilt artifact is a failure, not a skip. None of these has run yet."""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.gemm.host_int.backend import HostIntBackend

pytestmark = pytest.mark.device


@pytest.fixture(scope="module")
def npu():
    from onebit_engine.gemm.npu.xrt import XrtBackend

    b = XrtBackend(fallback=None, retries=0, verify=False)  # real pyxrt, the shipped manifest of this device
    yield b
    b.close()


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (8, 2048, 2048), (16, 3000, 5000), (64, 4096, 1024), (70, 100, 33)])
def test_real_npu_bit_exact_with_host_int(npu, m, k, n):
    rng = np.random.default_rng(m + k + n)
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    h = HostIntBackend()
    assert np.array_equal(npu.matmul(x, npu.pack(w)).view(np.uint32), h.matmul(x, h.pack(w)).view(np.uint32))
    assert not any(npu.events[k] for k in ("timeout", "abort", "error", "noop", "partial", "bad_output"))


def test_real_npu_is_deterministic_and_weights_stay_resident(npu):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 1024)).astype(np.float32)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    pw = npu.pack(w)
    uploads = npu.events["weight_uploads"]
    outs = {npu.matmul(x, pw).tobytes() for _ in range(5)}
    assert len(outs) == 1 and npu.events["weight_uploads"] == uploads


def test_real_npu_emulator_goldens_hold(npu):
    from onebit_engine.gemm.npu import emulator as npu_emulator

    man, ld, xrt = npu.man, npu._loaded, npu.xrt
    design = {"M": man.M_cap, "K": man.K, "N": man.N, "b_layout": man.b_layout, "c_layout": man.c_layout}
    a, b = npu_emulator.golden_inputs(0, "extremes", design)
    bufs = npu._buffer_set()
    bo_b = xrt.bo(npu._session.device, man.b_bytes, xrt.bo.host_only, ld.kernel.group_id(4))
    bo_b.write(np.frombuffer(b, np.uint8), 0)
    bo_b.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, man.b_bytes, 0)
    bufs.a_host[:] = np.frombuffer(a, np.uint8)
    bufs.a_on_device = False
    c = npu._launch(bo_b)
    assert c.astype("<i4").tobytes() == npu_emulator.run_launch(design, a, b)


def test_bench_real_npu_decode_gemm(npu, benchmark):
    """pytest-benchmark: one 8-row call of a 4096 x 4096 int8 GEMM on the NPU (dispatch-bound)."""
    rng = np.random.default_rng(1)
    pw = npu.pack(rng.standard_normal((4096, 4096)).astype(np.float32))
    x = rng.standard_normal((8, 4096)).astype(np.float32)
    benchmark(npu.matmul, x, pw)
