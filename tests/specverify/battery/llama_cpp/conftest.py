"""The battery on the shipped llama.cpp adapter: seeded tiny random Qwen3.5 (arch qwen35) and Qwen3-Next (qwen3next,
a mixture of experts in every layer) checkpoints (4 layers 3:1, hidden 32, vocabulary 256, float32), converted to GGUF
by the project's own writer, run by llama.cpp (llama-cpp-python's low-level API) with the adapter's declared profile.
Skipped where llama-cpp-python is not installed (``nox -s llama`` builds it).

Qwen3-Next runs the cache checks (its keep path is the restore + re-run fallback: llama.cpp refuses its rollback);
SPECVERIFY_LLAMA_FULL=1 runs everything on it."""
from pathlib import Path

import pytest

from pytest_specverify.protocol import PortOptions
from tests.specverify.ports.cache_checks import cache_checks_only

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")


@pytest.fixture(scope="session", params=["tiny-qwen3_5", "tiny-qwen3_next"])
def specverify_port(request, specverify_settings):
    from pytest_specverify.adapters.llama_cpp import make_port

    return make_port(PortOptions(seed=specverify_settings.seed, backend=specverify_settings.backend, model=request.param))


def pytest_collection_modifyitems(config, items):
    cache_checks_only(items, Path(__file__).parent, "tiny-qwen3_next", "SPECVERIFY_LLAMA_FULL")
