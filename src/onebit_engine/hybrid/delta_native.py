"""The delta rule's heads on the host-int library's compiled loop (``gemm/host_int/delta.c``).

The same bits as numba's ``gated_delta_fast._heads`` (tests/ops/test_delta_native.py, on this CPU's
path and on the AVX-512 emulation), about twice as fast: numba's loop stores its two running sums to
memory for every element of the state, the C loop keeps them in registers (docs/host-int.md, "The delta
rule in C"). The numba loop stays the twin and runs wherever the library cannot: no ziglang to build it,
a CPU without AVX2.

``native_delta()`` resolves once per process: the library (built on first use, like the GEMM kernel's)
and the widest path this CPU runs, or None.
"""
from __future__ import annotations

from typing import NamedTuple


class NativeDelta(NamedTuple):
    lib: object  # gemm.host_int.native.NativeKernel
    path: int  # native.DELTA_PATHS value
    name: str  # "native-avx512" / "native-avx2": where the delta rule runs (provenance)


_RESOLVED: "list[NativeDelta | None]" = []


def native_delta() -> "NativeDelta | None":
    if not _RESOLVED:
        _RESOLVED.append(_resolve())
    return _RESOLVED[0]


def _resolve() -> "NativeDelta | None":
    from ..gemm.host_int import native

    try:
        lib = native.load("main")
    except native.NativeUnavailable:
        return None  # the numba loop runs; the GEMM backend reports why the library is missing
    for name in ("avx512", "avx2"):
        if lib.delta_path_ok(native.DELTA_PATHS[name]):
            return NativeDelta(lib, native.DELTA_PATHS[name], f"native-{name}")
    return None
