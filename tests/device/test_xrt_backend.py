"""The xrt backend against the strict fake: host-int bit for bit, residency, buffer reuse, session."""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.gemm import Linear, get_backend
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.gemm.npu.xrt import XrtBackend
from tests.fakes.fake_pyxrt import write_fake_artifact


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def rand_case(seed: int, m: int, k: int, n: int):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * rng.uniform(0.1, 3)).astype(np.float32)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 3)).astype(np.float32)
    x[rng.random(m) < 0.2] = 0.0  # zero rows (sa = 1.0)
    return w, x


SHAPES = [(1, 1, 1), (8, 64, 32), (8, 65, 33), (32, 64, 32), (33, 129, 70), (40, 100, 96), (5, 200, 7), (17, 3, 65)]


@pytest.mark.parametrize("fmt", ["int8", "int4", "ternary"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_bit_exact_with_host_int(make_backend, fmt, m, k, n):
    b, h = make_backend(weight_format=fmt), HostIntBackend(weight_format=fmt, kernel="numpy")
    w, x = rand_case(m * 1000 + k * 10 + n, m, k, n)
    got, want = b.matmul(x, b.pack(w)), h.matmul(x, h.pack(w))
    assert np.array_equal(bits(got), bits(want))
    assert b.events["dispatches"] > 0 and b.events["fallbacks"] == 0


@pytest.mark.parametrize("b_layout,unit", [("col_major_NK", "bytes"), ("row_major_KN", "bytes"), ("col_major_NK", "words")])
def test_layouts_and_instruction_units(fake, tmp_path, b_layout, unit):
    man = write_fake_artifact(tmp_path, name="alt", b_layout=b_layout, insts_len_unit=unit, M_cap=16, K=32, N=16, m=4,
                              k=8, n=8, generation="npu1")
    fake.device_name = "RyzenAI-npu1"
    b = XrtBackend(fake, man)
    w, x = rand_case(3, 9, 50, 40)
    h = HostIntBackend(kernel="numpy")
    assert np.array_equal(bits(b.matmul(x, b.pack(w))), bits(h.matmul(x, h.pack(w))))
    b.close()


def test_random_shapes_many(make_backend):
    b, h = make_backend(), HostIntBackend(kernel="numpy")
    rng = np.random.default_rng(7)
    for i in range(25):
        m, k, n = (int(v) for v in rng.integers(1, [70, 200, 140]))
        w, x = rand_case(100 + i, m, k, n)
        assert np.array_equal(bits(b.matmul(x, b.pack(w))), bits(h.matmul(x, h.pack(w)))), (m, k, n)


def test_resident_weights_uploaded_once_and_buffers_allocated_once(make_backend, fake):
    b = make_backend()
    w, x = rand_case(1, 8, 100, 70)  # K 100 -> 2 blocks of 64; N 70 -> 3 blocks of 32
    pw = b.pack(w)
    b_bytes = fake.stats["bytes_to_device_B"]
    assert b_bytes == 2 * 3 * 64 * 32 and b.events["weight_uploads"] == 1
    allocs = fake.stats["bo_allocs"]
    for _ in range(5):
        b.matmul(x, pw)
    assert fake.stats["bytes_to_device_B"] == b_bytes            # weights never re-sent
    assert fake.stats["bo_allocs"] == allocs + 2                 # one A and one C BO, once
    assert fake.stats["dispatches"] == 5 * 2 * 3                 # M block x K blocks x N blocks per call
    assert fake.stats["bytes_to_device_A"] == 5 * 2 * 32 * 64    # A once per (M, K) block, not per N block
    pw2 = b.pack(rand_case(2, 1, 30, 20)[0])
    b.matmul(x[:, :30], pw2)
    assert fake.stats["bo_allocs"] == allocs + 2 + 1             # only the new weight's one block


def test_linear_row_sets_on_xrt(make_backend):
    b, h = make_backend(), HostIntBackend(kernel="numpy")
    w, x = rand_case(5, 21, 48, 40)
    got = Linear.from_weight(w, b, 8)(x)
    want = Linear.from_weight(w, h, 8)(x)
    assert np.array_equal(bits(got), bits(want))


def test_one_device_handle_shared_by_backends(fake, artifact):
    a, b = XrtBackend(fake, artifact), XrtBackend(fake, artifact)
    assert fake.stats["device_opens"] == 1 and fake.stats["contexts_created"] == 1
    w, x = rand_case(9, 4, 20, 20)
    assert np.array_equal(bits(a.matmul(x, a.pack(w))), bits(b.matmul(x, b.pack(w))))
    a.close()
    assert fake.open_devices == 1                                # b still holds the session
    b.close()
    assert fake.open_devices == 0 and fake.live_contexts == 0 and fake.violations == []
    # XRT's order: buffers, instruction BO, kernel, context, device
    assert fake.released[-4:] == ["bo_insts", "kernel", "hw_context", "device"]


def test_registry_builds_xrt_with_an_injected_module(fake, artifact):
    b = get_backend("xrt", xrt=fake, manifest=artifact)
    try:
        assert isinstance(b, XrtBackend) and b.exact
        d = b.describe()
        assert d["backend"] == "xrt" and d["kernel_set"] == "xrt:fake_gemm" and d["xrt_module"] == "FakePyxrt"
        assert d["numerics"] == HostIntBackend().describe()["numerics"]
        assert d["generation"] == "npu2" and d["device"] == "RyzenAI-npu4" and "events" in d
    finally:
        b.close()


def test_closed_backend_refuses(make_backend):
    from onebit_engine import BackendUnavailable

    b = make_backend()
    pw = b.pack(np.ones((4, 4), np.float32))
    b.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        b.matmul(np.ones((1, 4), np.float32), pw)
