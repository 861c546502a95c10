"""Plain vs speculative tokens/s from the same build, backend, row set and kernel set, in one session.

Runs only under ``--benchmark-only`` or ``--benchmark-enable`` (``nox -s bench``); the host suite skips it.
The NPU row is marked ``device``. The speedup (plain median / speculative median) and the provenance
go to ``extra_info`` (saved with --benchmark-json / --benchmark-autosave).
"""
import statistics
import time

import pytest

from pytest_specverify.protocol import PortOptions

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return"
NEW_TOKENS = 32
K = 4
BACKENDS = [pytest.param("reference", id="host-reference"), pytest.param("xrt", id="npu", marks=pytest.mark.device)]


@pytest.fixture(autouse=True)
def _benchmark_only(request):
    if not (request.config.getoption("benchmark_only", default=False) or request.config.getoption("benchmark_enable", default=False)):
        pytest.skip("throughput benchmarks run only with --benchmark-only (nox -s bench)")


@pytest.fixture(scope="module", params=BACKENDS)
def port(request):
    from pytest_specverify.adapters.onebit import make_port

    try:
        return make_port(PortOptions(backend=request.param, row_set=8))
    except Exception as exc:  # e.g. BackendUnavailable
        pytest.skip(f"backend {request.param!r} unavailable: {exc}")


@pytest.fixture(scope="module")
def plain_median_s(port):
    """The plain-decoding median, measured with the same timer the speculative test uses."""
    ids = port.encode(PROMPT)
    port.generate(ids, max_new_tokens=NEW_TOKENS)  # warm-up
    times = []
    for _ in range(5):
        t = time.perf_counter()
        port.generate(ids, max_new_tokens=NEW_TOKENS)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def test_plain_tokens_per_s(benchmark, port):
    ids = port.encode(PROMPT)
    benchmark.pedantic(port.generate, args=(ids,), kwargs={"max_new_tokens": NEW_TOKENS}, rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(mode="plain", tokens=NEW_TOKENS, tokens_per_s=NEW_TOKENS / benchmark.stats.stats.median,
                                **port.describe())


def test_speculative_tokens_per_s(benchmark, port, plain_median_s):
    ids, draft = port.encode(PROMPT), port.make_draft()
    run = benchmark.pedantic(port.speculative_generate, args=(ids, draft),
                             kwargs={"max_new_tokens": NEW_TOKENS, "k": K}, rounds=5, warmup_rounds=1)
    median = benchmark.stats.stats.median
    benchmark.extra_info.update(
        mode="speculative", k=K, tokens=NEW_TOKENS, tokens_per_s=NEW_TOKENS / median, speedup=plain_median_s / median,
        plain_tokens_per_s=NEW_TOKENS / plain_median_s, acceptance_rate=run.acceptance_rate,
        tokens_per_round=run.tokens_per_round, provenance=run.extra.get("provenance", {}), **port.describe())
