"""host-int runtime dispatch: the default path is the fastest one the CPU running the tests supports
(checked against the kernel's own /proc/cpuinfo flags, an independent reading of cpuid), each path has
its own name, kernel_set and hash, and asking for a path the CPU lacks is a clear error."""
from pathlib import Path

import pytest

from onebit_engine.errors import BackendUnavailable
from onebit_engine.gemm.host_int import int_kernels, native
from onebit_engine.gemm.host_int.backend import DISPATCH, KERNELS, HostIntBackend, kernel_hash

CPUINFO = Path("/proc/cpuinfo")


def _linux_flags() -> set[str]:
    for line in CPUINFO.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(not CPUINFO.exists(), reason="no /proc/cpuinfo to check cpuid against")
def test_default_path_is_what_the_cpu_reports():
    flags = _linux_flags()
    if not native.available("avx2") and "avx2" in flags:
        pytest.skip(f"the native library is not available here: {native.path_unavailable('avx2')}")
    if {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
        want = "avx512vnni"
    elif "avx2" in flags:
        want = "avx2"
    else:
        want = "numba" if int_kernels.HAVE_NUMBA else "numpy"
    b = HostIntBackend()
    assert b.kernel == want
    d = b.describe()
    assert d["kernel"] == want and set(d["unavailable"]) == set(DISPATCH[: DISPATCH.index(want)] if want in DISPATCH else DISPATCH)
    if want in DISPATCH:
        assert HostIntBackend(kernel="native").kernel == want


def test_library_flags_agree_with_linux():
    if not CPUINFO.exists() or not native.available("avx2"):
        pytest.skip("needs /proc/cpuinfo and the native library")
    flags, lib = _linux_flags(), native.load().cpu_flags()
    for name in ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"):
        assert lib[name] == (name in flags), name


def test_each_path_has_its_own_name_set_and_hash():
    sets = [int_kernels.KERNEL_SETS[k] for k in KERNELS]
    hashes = [kernel_hash(k) for k in KERNELS]
    assert len(set(sets)) == len(KERNELS) and len(set(hashes)) == len(KERNELS)


def test_explicit_path_the_cpu_lacks_is_refused_with_the_flag_and_the_way_out():
    reason = native.path_unavailable("avx512vnni")
    if not reason:
        pytest.skip("this CPU runs avx512vnni")
    with pytest.raises(BackendUnavailable, match=r"kernel 'avx512vnni' cannot run here: .*cpu lacks .*\(cpuid 7\.0 .*kernel=None"):
        HostIntBackend(kernel="avx512vnni")
    assert "avx512" in HostIntBackend().describe()["unavailable"]["avx512vnni"]


def test_the_emulation_is_never_picked_and_says_so():
    if not native.available("avx512vnni-emulated"):
        pytest.skip(native.path_unavailable("avx512vnni-emulated"))
    assert HostIntBackend().kernel != "avx512vnni-emulated"
    assert native.load("emulated").lib.onebit_hi_vnni_emulated() == 1
    if native.available("avx2"):
        assert native.load("main").lib.onebit_hi_vnni_emulated() == 0
