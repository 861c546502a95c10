"""The battery on the shipped mlx-lm adapter: seeded tiny random Qwen3.5 and Qwen3-Next (a mixture of experts)
checkpoints (4 layers 3:1, hidden 32, vocabulary 256, float32) loaded by mlx-lm (MLX's CPU backend on Linux),
with the adapter's ``exact`` profile. Skipped where mlx-lm is not installed (``nox -s mlx``).

Qwen3.5 runs the whole battery; Qwen3-Next shares the adapter, the loop and the draft, so it runs the checks of
what differs (its model and caches), as tests/specverify/battery/transformers does; SPECVERIFY_MLX_FULL=1 runs everything on it."""
from pathlib import Path

import pytest

from pytest_specverify.protocol import PortOptions
from tests.specverify.ports.cache_checks import cache_checks_only

pytest.importorskip("mlx_lm")

@pytest.fixture(scope="session", params=["tiny-qwen3_5", "tiny-qwen3_next"])
def specverify_port(request, specverify_settings):
    from pytest_specverify.adapters.mlx_lm import make_port

    return make_port(PortOptions(seed=specverify_settings.seed, model=request.param))


def pytest_collection_modifyitems(config, items):
    cache_checks_only(items, Path(__file__).parent, "tiny-qwen3_next", "SPECVERIFY_MLX_FULL")
