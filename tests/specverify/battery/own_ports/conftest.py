"""The battery runs on two ports: the engine (through its adapter) and the independent second port.

This is also the conftest way to register a port: override ``specverify_port``.
"""
import pytest

from pytest_specverify.protocol import PortOptions


@pytest.fixture(
    scope="session",
    params=["onebit", pytest.param("onebit-host-int", marks=pytest.mark.host_gemm),
            pytest.param("onebit-xrt", marks=pytest.mark.device), "qwen3-numpy"],
)
def specverify_port(request, specverify_settings):
    s = specverify_settings
    # host_gemm: the engine with the device numerics (int8 x int8 -> int32) on the host emulation
    backend = {"onebit-host-int": "host-int", "onebit-xrt": "xrt"}.get(request.param, s.backend)
    opts = PortOptions(backend=backend, row_set=s.row_set, seed=s.seed)
    if request.param.startswith("onebit"):
        from pytest_specverify.adapters.onebit import make_port
    else:
        from tests.specverify.ports.qwen3_numpy import make_port
    return make_port(opts)
