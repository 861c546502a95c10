"""The battery runs on two ports: the engine (through its adapter) and the independent second port.

This is also the conftest way to register a port: override ``specverify_port``.
"""
import pytest

from pytest_specverify.protocol import PortOptions


@pytest.fixture(scope="session", params=["onebit", "qwen3-numpy"])
def specverify_port(request, specverify_settings):
    s = specverify_settings
    opts = PortOptions(backend=s.backend, row_set=s.row_set, seed=s.seed)
    if request.param == "onebit":
        from pytest_specverify.adapters.onebit import make_port
    else:
        from tests.ports.qwen3_numpy import make_port
    return make_port(opts)
