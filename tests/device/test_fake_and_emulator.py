"""The fake is strict where real XRT is silent, and the emulator decodes bytes independently of the packer."""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.gemm.npu import emulator as npu_emulator
from onebit_engine.gemm.npu.layout import KernelManifest, c_block, pack_a_block, pack_weight_blocks
from tests.fakes.fake_pyxrt import FakePyxrt, FakeXrtViolation, write_fake_artifact


@pytest.fixture
def rig(tmp_path):
    """A hand-driven launch: device, context, kernel, instruction BO and data BOs (the canonical sequence)."""
    man = KernelManifest.load(write_fake_artifact(tmp_path))
    x = FakePyxrt()
    dev = x.device(0)
    xb = x.xclbin(str(man.artifact_path("xclbin")))
    dev.register_xclbin(xb)
    ctx = x.hw_context(dev, xb.get_uuid())
    k = x.kernel(ctx, "MLIR_AIE")
    raw = np.fromfile(man.artifact_path("insts"), np.uint32).view(np.uint8)
    bi = x.bo(dev, raw.nbytes, x.bo.cacheable, k.group_id(1))
    bi.write(raw, 0)
    bi.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
    bos = [x.bo(dev, n, x.bo.host_only, k.group_id(i)) for i, n in ((3, man.a_bytes), (4, man.b_bytes), (5, man.c_bytes))]
    return x, man, k, bi, raw.nbytes // 4, bos


def test_canonical_sequence_computes_the_product(rig):
    x, man, k, bi, n, (a, b, c) = rig
    rng = np.random.default_rng(0)
    A = rng.integers(-127, 128, (man.M_cap, man.K), dtype=np.int8)
    B = rng.integers(-127, 128, (man.K, man.N), dtype=np.int8)
    a.write(A, 0), b.write(B, 0)
    a.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE), b.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
    run = k(3, bi, n, a, b, c)
    assert run.wait() == x.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    c.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    got = c.read(man.c_bytes, 0).view(np.int32).reshape(man.M_cap, man.N)
    assert np.array_equal(got, A.astype(np.int64) @ B.astype(np.int64))


def test_missing_sync_gives_wrong_bytes_not_an_error(rig):
    x, man, k, bi, n, (a, b, c) = rig
    a.write(np.ones(man.a_bytes, np.int8), 0)
    b.write(np.ones(man.b_bytes, np.int8), 0)   # neither synced: the device still sees its old bytes
    k(3, bi, n, a, b, c).wait()
    c.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    assert not np.all(c.read(man.c_bytes, 0).view(np.int32) == man.K)


def test_outputs_appear_only_after_wait_and_sync(rig):
    x, man, k, bi, n, (a, b, c) = rig
    for bo in (a, b):
        bo.write(np.ones(bo.size(), np.int8), 0)
        bo.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
    run = k(3, bi, n, a, b, c)
    c.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    assert not np.any(c.read(man.c_bytes, 0).view(np.int32) == man.K)   # not run yet
    run.wait()
    assert not np.any(c.read(man.c_bytes, 0).view(np.int32) == man.K)   # run, but not synced back
    c.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    assert np.all(c.read(man.c_bytes, 0).view(np.int32) == man.K)


@pytest.mark.parametrize("args_fn,match", [
    (lambda bi, n, a, b, c: (3, bi, float(n), a, b, c), "plain int"),
    (lambda bi, n, a, b, c: (3, bi, np.int64(n), a, b, c), "plain int"),
    (lambda bi, n, a, b, c: (3, bi, n, a, b, c, c), "declares 6"),
    (lambda bi, n, a, b, c: (3, bi, n, a, b), "declares 6"),
    (lambda bi, n, a, b, c: (1, bi, n, a, b, c), "opcode"),
    (lambda bi, n, a, b, c: (3, bi, n * 4, a, b, c), "ninstr"),
    (lambda bi, n, a, b, c: (3, 0, 0, a, b, c), "plain int|instruction BO"),
    (lambda bi, n, a, b, c: (3, bi, n, c, b, a), "BO of"),
])
def test_abi_violations_raise(rig, args_fn, match):
    x, man, k, bi, n, (a, b, c) = rig
    with pytest.raises(FakeXrtViolation, match=match):
        k(*args_fn(bi, n, a, b, c))


def test_buffer_rules(rig):
    x, man, k, bi, n, (a, b, c) = rig
    with pytest.raises(RuntimeError, match="normal flag"):
        x.bo(k._ctx._device, 64, x.bo.normal, 0)
    with pytest.raises(FakeXrtViolation, match="non-contiguous"):
        a.write(np.ones((8, 8), np.int8)[:, ::2], 0)
    with pytest.raises(FakeXrtViolation, match="overruns"):
        a.write(np.ones(man.a_bytes + 1, np.int8), 0)
    sub = x.bo(a, 16, 0)
    with pytest.raises(FakeXrtViolation, match="sub-buffer of a sub-buffer"):
        x.bo(sub, 8, 0)


def test_instruction_bo_must_be_synced(rig):
    x, man, k, bi, n, (a, b, c) = rig
    bi.write(np.zeros(n * 4, np.uint8), 0)  # host side changed, device side still right: fine
    k(3, bi, n, a, b, c).wait()
    bi.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)  # now the device holds zeros: wrong stream
    with pytest.raises(FakeXrtViolation, match="do not hash"):
        k(3, bi, n, a, b, c)


def test_second_device_handle_and_context_limit(tmp_path):
    x = FakePyxrt(device_name="RyzenAI-npu1")
    d = x.device(0)
    with pytest.raises(FakeXrtViolation, match="second pyxrt.device"):
        x.device(0)
    xb = x.xclbin(str(write_fake_artifact(tmp_path).with_suffix(".xclbin")))
    with pytest.raises(FakeXrtViolation, match="before register_xclbin"):
        x.hw_context(d, xb.get_uuid())
    d.register_xclbin(xb)
    ctxs = [x.hw_context(d, xb.get_uuid()) for _ in range(6)]
    with pytest.raises(RuntimeError, match="NOAVAIL"):
        x.hw_context(d, xb.get_uuid())
    assert len(ctxs) == 6


# -- the emulator against the packer -----------------------------------------------------------------------
@pytest.mark.parametrize("b_layout", ["row_major_KN", "col_major_NK"])
def test_emulator_decodes_packer_bytes_to_the_exact_product(tmp_path, b_layout):
    man = KernelManifest.load(write_fake_artifact(tmp_path, b_layout=b_layout))
    rng = np.random.default_rng(1)
    wq = rng.integers(-127, 128, (man.N - 3, man.K - 5), dtype=np.int8)
    xq = rng.integers(-127, 128, (man.M_cap - 2, man.K - 5), dtype=np.int8)
    blocks = pack_weight_blocks(wq, man)
    a = np.zeros(man.a_bytes, np.uint8)
    pack_a_block(xq, 0, 0, man, a)
    c = c_block(np.frombuffer(npu_emulator.run_launch(man, a.tobytes(), blocks[0, 0].tobytes()), np.uint8), man)
    want = xq.astype(np.int64) @ wq.astype(np.int64).T
    assert np.array_equal(c[: xq.shape[0], : wq.shape[0]], want)
    assert not c[xq.shape[0]:].any() and not c[:, wq.shape[0]:].any()  # zero padding contributes nothing


def test_emulator_catches_a_transposing_packer_bug(tmp_path):
    man = KernelManifest.load(write_fake_artifact(tmp_path, K=32, N=32, M_cap=32, k=16, n=8))
    rng = np.random.default_rng(2)
    wq = rng.integers(-127, 128, (32, 32), dtype=np.int8)
    wrong = np.ascontiguousarray(wq).view(np.uint8).reshape(-1)  # W [N, K] bytes where B [K, N] is expected
    a = np.zeros(man.a_bytes, np.uint8)
    pack_a_block(np.eye(32, dtype=np.int8), 0, 0, man, a)
    c = c_block(np.frombuffer(npu_emulator.run_launch(man, a.tobytes(), wrong.tobytes()), np.uint8), man)
    assert not np.array_equal(c, wq.T.astype(np.int32))  # the emulator reads the layout, not the packer's intent
    assert np.array_equal(c, wq.astype(np.int32))


def test_acc32_wraps_like_the_hardware():
    a = np.full((1, 4), 1 << 30, np.int64)
    b = np.ones((4, 1), np.int64)
    assert npu_emulator.gemm_acc32(a, b)[0, 0] == 0  # 2^32 wraps to 0
