"""The battery on the shipped transformers adapter: seeded tiny random Qwen3.5 and Qwen3-Next (dense MLP)
configs (4 layers 3:1, hidden 64, vocabulary 256, float32, CPU), with the adapter's declared fp32 profile.

Qwen3.5 runs the whole battery. Qwen3-Next shares the adapter, the loop and the draft, so in CI it runs the
checks of what differs (its model and cache): commit equivalence, the replay check, short prompts, long
context, decode vs prefill and the fuzz; SPECVERIFY_HF_FULL=1 runs everything on it too."""
from pathlib import Path

import pytest

from pytest_specverify.protocol import PortOptions
from tests.specverify.ports.cache_checks import cache_checks_only

pytest.importorskip("transformers")


@pytest.fixture(scope="session", params=["tiny-qwen3_5", "tiny-qwen3_next"])
def specverify_port(request, specverify_settings):
    from pytest_specverify.adapters.transformers import make_port

    return make_port(PortOptions(seed=specverify_settings.seed, model=request.param))


def pytest_collection_modifyitems(config, items):
    cache_checks_only(items, Path(__file__).parent, "tiny-qwen3_next", "SPECVERIFY_HF_FULL")
