"""The host-int kernels as pytest parameters: every one is always listed; a path this machine cannot run
is a skip whose reason names the missing cpuid/xgetbv flag (so the real VNNI path runs where the CPU has
it and is never reported as passed where it does not)."""
import pytest

from onebit_engine.gemm.host_int import int_kernels, native

NATIVE = ("avx2", "avx512vnni", "avx512vnni-emulated")


def native_params(paths=NATIVE):
    return [pytest.param(p, marks=pytest.mark.skipif(bool(native.path_unavailable(p)), reason=native.path_unavailable(p) or "-"))
            for p in paths]


def kernel_params():
    numba = pytest.param("numba", marks=pytest.mark.skipif(not int_kernels.HAVE_NUMBA, reason="numba is not installed"))
    return ["numpy", numba] + native_params()
