"""The built-in trained pair's speedup against plain decoding at its fastest (run by `nox -s bench`).

One test per backend sweeps every configuration the loop may pick - k in 1..7 and 1 or 2 threads - and
plain decoding at its own fastest setting (1 row per step, 1 or 2 threads), over the default held-out
code prompts, all variants interleaved in a shuffled order every repeat (``bench_runner.sweep``). Reported
(``extra_info``): tokens/s of every variant, the best loop / the best plain ratio, and whether every
loop output equals plain greedy decoding token for token. Figures only, no timed assertions.
"""
from __future__ import annotations

import os

import pytest

from onebit_engine import default_model
from onebit_engine.loop.generate import generate
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.measure import bench_runner, tune
from onebit_engine.measure.provenance import checkpoint_hash, machine, pair_provenance

KS = (1, 2, 3, 4, 5, 7)
THREADS = (1, 2)
NEW_TOKENS = 64


@pytest.fixture(scope="module", autouse=True)
def _only_when_asked(request):
    if not (request.config.getoption("benchmark_enable", False) or os.environ.get("ONEBIT_BENCH") == "1"):
        pytest.skip("benchmarks run only with --benchmark-enable or ONEBIT_BENCH=1 (nox -s bench)")


@pytest.mark.parametrize("backend", ["host-int", "reference"])
def test_trained_pair_best_configuration(benchmark, backend):
    benchmark.group = "speedup-trained"
    target, draft = default_model.load_builtin_pair(backend=backend, row_set=16 if backend == "host-int" else 8)
    plain_target = target if target.row_invariant else default_model.load_builtin_pair(backend=backend, row_set=1)[0]
    tok = default_model.load_tokenizer()
    prompts = [tok.encode(t) for t in default_model.default_prompt_texts("code")]
    variants, threads_of = {}, {}
    threads = tune.Threads(target, draft, plain_target)
    for th in THREADS:
        variants[f"plain t{th}"] = lambda p: generate(plain_target, p, max_new_tokens=NEW_TOKENS, stop_tokens=())
        threads_of[f"plain t{th}"] = th
        for k in KS:
            name = f"loop k{k} t{th}"
            variants[name] = lambda p, k=k: speculative_generate(target, draft, p, max_new_tokens=NEW_TOKENS, k=k,
                                                                 stop_tokens=())
            threads_of[name] = th
    doc = benchmark.pedantic(bench_runner.sweep, args=(variants, prompts),
                             kwargs=dict(repeats=3, before=lambda n: threads.set(threads_of[n])),
                             rounds=1, iterations=1)
    rates = doc["tokens_per_s"]
    plain = {n: r for n, r in rates.items() if n.startswith("plain")}
    loops = {n: r for n, r in rates.items() if n.startswith("loop")}
    best_plain, best_loop = max(plain, key=plain.get), max(loops, key=loops.get)
    reference = doc["tokens"][best_plain]
    identical = all(doc["tokens"][n] == reference for n in loops)
    t_dir, d_dir = default_model.builtin_paths()[:2]
    prov = pair_provenance(target, model_hash=checkpoint_hash(t_dir), draft=draft, draft_hash=checkpoint_hash(d_dir),
                           draft_kind="trained")
    prov["host"] = machine()
    benchmark.extra_info.update(
        kind="speedup", backend=backend, prompts=len(prompts), new_tokens=NEW_TOKENS, tokens_per_s=rates,
        best_plain=best_plain, best_loop=best_loop, ratio=rates[best_loop] / rates[best_plain],
        identical_to_plain=identical, round_stats=doc["round_stats"], provenance=prov)
