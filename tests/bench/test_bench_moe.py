"""The verify cost of a mixture-of-experts target against the dense target of the same active size
(run by `nox -s bench`; figures only, no timed asserts). Rendered into docs/benchmarks.md §11 by
``python tools/make_benchmarks_md.py --moe`` (this file alone) or by a whole ``nox -s bench``.

Targets: the ``medium`` geometry of test_bench_loop.py (hidden 256, 8 layers, vocabulary 2048) with a
dense SwiGLU of 768, and its MoE twin: 32 experts of 192, top-4, no shared expert, every layer sparse -
the same 768 active MLP channels per token, 8x the MLP weights in total.

* ``moe-verify-<backend>``: a verify of k+1 rows (k = 1, 3, 7, 15) over one plain step of the same
  target, for the dense target, the MoE target with experts grouped (each distinct expert runs once per
  row set, on the rows routed to it) and the MoE target with one expert call per (row, expert). Every
  variant's timed runs are interleaved in one shuffled order. Reported with the distinct experts a verify
  touches (mean over layers) against the (k+1) x top_k expert reads of the ungrouped form.
* ``moe-loop-<backend>``: plain vs speculative tokens/s (``bench_runner.run_bench``, the oracle draft of
  test_bench_loop.py at acceptance 0.8, k = 7) for the dense and the MoE target.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from onebit_engine import load_draft, load_target
from onebit_engine.draft import write_synthetic_draft
from onebit_engine.loop.generate import generate
from onebit_engine.measure import bench_runner
from onebit_engine.measure.provenance import checkpoint_hash, machine, pair_provenance
from onebit_engine.hybrid.moe_config import MoeConfig
from onebit_engine.hybrid.moe_mlp import MoeMLP
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint

from .test_bench_loop import PROMPT, SIZES, OracleDraft

BACKENDS = ["reference", "host-int"]
KS = (1, 3, 7, 15)
MOE = MoeConfig(num_experts=32, num_experts_per_tok=4, moe_intermediate_size=192)
TARGETS = {"dense": dict(SIZES["medium"]), "moe": dict(SIZES["medium"], moe=MOE)}
REPEATS = 15
NEW_TOKENS = 32


@pytest.fixture(scope="module", autouse=True)
def _only_when_asked(request):
    if not (request.config.getoption("benchmark_enable", False) or os.environ.get("ONEBIT_BENCH") == "1"):
        pytest.skip("MoE benchmarks run only with --benchmark-enable or ONEBIT_BENCH=1 (nox -s bench)")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-moe")
    out = {}
    for name, kw in TARGETS.items():
        cfg = tiny_config(**kw)
        t = write_checkpoint(root / name / "target", cfg, random_weights(cfg, 20261201, scale=2.0))
        d = write_synthetic_draft(root / name / "draft", cfg, version=2, block_size=16, seed=20261202)
        out[name] = (t, d)
    return out


def _blocks(target):
    return [layer.mlp for layer in target.layers if isinstance(layer.mlp, MoeMLP)]


def _provenance(folders, name, target, draft=None, **extra):
    t, d = folders[name]
    prov = pair_provenance(target, model_hash=checkpoint_hash(t), draft=draft,
                           draft_hash=checkpoint_hash(d) if draft is not None else None, **extra)
    prov["host"] = machine()
    return prov


@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_verify_cost(benchmark, folders, backend):
    benchmark.group = f"moe-verify-{backend}"
    targets = {name: load_target(folders[name][0], backend=backend, row_set=8) for name in TARGETS}
    states = {}
    for name, t in targets.items():
        states[name] = t.new_state()
        t.forward(PROMPT, states[name])
    rows = {k: [int(x) % 2048 for x in range(9, 10 + k)] for k in KS}

    def grouped(flag):
        for b in _blocks(targets["moe"]):
            b.grouped = flag

    def step(name, group=True):
        def call(st):
            grouped(group)
            targets[name].forward([rows[1][0]], st)
        return (lambda: states[name].copy()), call

    def verify(name, k, group=True):
        def call(st):
            grouped(group)
            targets[name].verify(rows[k], st)
        return (lambda: states[name].copy()), call

    variants = {"dense step": step("dense"), "moe step": step("moe"), "moe-per-row step": step("moe", False)}
    for k in KS:
        variants[f"dense k{k}"] = verify("dense", k)
        variants[f"moe k{k}"] = verify("moe", k)
        variants[f"moe-per-row k{k}"] = verify("moe", k, False)
    ms = benchmark.pedantic(bench_runner.timed_interleaved, args=(variants,), kwargs={"repeats": REPEATS}, rounds=1, iterations=1)
    grouped(True)
    distinct, calls = {}, {}
    for k in KS:  # the experts each layer's routing touched in one verify of k+1 rows (every row set of it)
        blocks = _blocks(targets["moe"])
        for b in blocks:
            b.trace = []
        targets["moe"].verify(rows[k], states["moe"].copy())
        distinct[k] = float(np.mean([len(set().union(*b.trace)) for b in blocks]))
        calls[k] = float(np.mean([sum(len(h) for h in b.trace) for b in blocks]))  # grouped: one per expert per row set
        for b in blocks:
            b.trace = None
    # the bits do not depend on the grouping (the claim this file measures the price of)
    a, b = states["moe"].copy(), states["moe"].copy()
    grouped(False)
    per_row = targets["moe"].verify(rows[15], b).logits
    grouped(True)
    assert np.array_equal(targets["moe"].verify(rows[15], a).logits, per_row)
    table = {}
    for name in ("dense", "moe", "moe-per-row"):
        table[name] = {"step_ms": ms[f"{name} step"], **{f"k{k}": ms[f"{name} k{k}"] / ms[f"{name} step"] for k in KS}}
    benchmark.extra_info.update(kind="moe-verify", backend=backend, ks=list(KS), ms=ms, ratios=table,
                                distinct_experts=distinct, expert_calls=calls, top_k=MOE.num_experts_per_tok, num_experts=MOE.num_experts,
                                provenance=_provenance(folders, "moe", targets["moe"]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_loop_speedup(benchmark, folders, backend):
    benchmark.group = f"moe-loop-{backend}"
    k, a = 7, 0.8

    def run():
        out = {}
        for name in TARGETS:
            t_dir, d_dir = folders[name]
            target = load_target(t_dir, backend=backend, row_set=8)
            one_row = load_target(t_dir, backend=backend, row_set=1)
            draft = load_draft(d_dir, target, backend=backend, row_set=8)
            truth = generate(target, PROMPT, max_new_tokens=NEW_TOKENS + 20, stop_tokens=()).tokens
            oracle = OracleDraft(draft, truth, len(PROMPT), a, target.config.vocab_size)
            prov = _provenance(folders, name, target, draft, draft_kind="oracle", oracle_a=a)
            out[name] = bench_runner.run_bench(target, one_row, oracle, [PROMPT], k=k, max_new_tokens=NEW_TOKENS, repeats=3,
                                        provenance=prov)["results"]
        return out

    res = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(kind="moe-loop", backend=backend, k=k, oracle_a=a, results=res)
