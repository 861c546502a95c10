"""The battery's loop checks on the engine's built-in trained pair: real tokenizer, real prompts, real
acceptance (the random ports of tests/specverify/battery/own_ports accept almost nothing)."""
import pytest

from pytest_specverify.protocol import PortOptions


@pytest.fixture(scope="session")
def specverify_port(specverify_settings):
    from pytest_specverify.adapters.onebit import make_trained_port

    s = specverify_settings
    return make_trained_port(PortOptions(backend=s.backend, row_set=s.row_set, seed=s.seed))
