"""The battery on the shipped llama.cpp adapter: a seeded tiny random Qwen3.5 checkpoint (4 layers 3:1, hidden
32, vocabulary 256, float32), converted to GGUF by the project's own writer, run by llama.cpp (llama-cpp-python's
low-level API) with the adapter's declared profile. Skipped where llama-cpp-python is not installed (``nox -s
llama`` builds it)."""
import pytest

from pytest_specverify.protocol import PortOptions

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")


@pytest.fixture(scope="session")
def specverify_port(specverify_settings):
    from pytest_specverify.adapters.llama_cpp import make_port

    return make_port(PortOptions(seed=specverify_settings.seed, backend=specverify_settings.backend))
