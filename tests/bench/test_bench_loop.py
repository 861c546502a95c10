"""End-to-end loop benchmarks (run by `nox -s bench`; figures only, no timed asserts).

Skipped unless benchmarks are asked for: ``--benchmark-enable`` or ``ONEBIT_BENCH=1`` (the bench
session sets both). ``tools/make_benchmarks_md.py`` runs this file and writes ``docs/benchmarks.md``.

Groups (every figure is in ``extra_info``; ratios are measured inside one test, one process):

* ``loop-<size>-<backend>``: plain vs speculative tokens/s (``onebit_engine.measure.bench_runner.run_bench``:
  plain on the same row set, plain at 1 row, the loop), with the measured acceptance and the speedup
  Leviathan et al. predict from it and the measured round cost. Drafts: the real DFlash 2 draft
  (random weights: acceptance ~0) and an *oracle* draft that pays the real draft's cost but proposes
  the target's own greedy tokens, each kept with probability ``a`` until the first miss.
* ``verify-<size>-<backend>``: a verify of k+1 rows (k = 1..15) against one plain step.
* ``commit-<path>``: committing a k=7 verify on a full and a partial accept; memory per path.
* ``plain-vs-bandwidth``: a plain step against the memory-bandwidth bound for its weight bytes.
* ``hf-peer``: HF transformers' Qwen3_5ForCausalLM, same config and weights, plain greedy on the CPU.
"""
from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

from onebit_engine import load_draft, load_target
from onebit_engine.draft import write_synthetic_draft
from onebit_engine.gemm import Linear
from onebit_engine.hybrid.commit import COMMIT_PATHS
from onebit_engine.loop.generate import generate
from onebit_engine.measure import bench_runner
from onebit_engine.measure.acceptance_probe import expected_tokens
from onebit_engine.measure.provenance import checkpoint_hash, machine, pair_provenance
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint

BACKENDS = ["reference", "host-int"]
SIZES = {
    "tiny": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, head_dim=16),
    "medium": dict(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=32, linear_num_key_heads=4, linear_num_value_heads=8,
                   linear_key_head_dim=32, linear_value_head_dim=32),
}
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
NEW_TOKENS = 32
LOOP_CASES = [("pair", None)] + [("oracle", a) for a in (0.5, 0.8, 0.95)]


@pytest.fixture(scope="module", autouse=True)
def _only_when_asked(request):
    if not (request.config.getoption("benchmark_enable", False) or os.environ.get("ONEBIT_BENCH") == "1"):
        pytest.skip("loop benchmarks run only with --benchmark-enable or ONEBIT_BENCH=1 (nox -s bench)")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{size: (target folder, draft folder)}: seeded random pairs, the draft a DFlash 2 with block 16."""
    root = tmp_path_factory.mktemp("bench-pairs")
    out = {}
    for size, kw in SIZES.items():
        cfg = tiny_config(**kw)
        t = write_checkpoint(root / size / "target", cfg, random_weights(cfg, 20261130))
        d = write_synthetic_draft(root / size / "draft", cfg, version=2, block_size=16, seed=20261131)
        out[size] = (t, d)
    return out


_CACHE: dict = {}


def pair(checkpoints, size, backend, row_set=8):
    key = (size, backend, row_set)
    if key not in _CACHE:
        t, d = checkpoints[size]
        target = load_target(t, backend=backend, row_set=row_set)
        _CACHE[key] = (target, load_draft(d, target, backend=backend, row_set=row_set))
    return _CACHE[key]


class OracleDraft:
    """Pays the real draft's cost, then proposes the target's greedy continuation, each token kept
    with probability ``a`` until the first miss (seeded by position, so repeats agree)."""

    def __init__(self, draft, truth: list[int], prompt_len: int, a: float, vocab: int):
        self.inner, self.truth, self.p, self.a, self.vocab = draft, truth, prompt_len, a, vocab
        self.config, self.fc, self.block_size = draft.config, draft.fc, draft.block_size

    def new_state(self):
        return self.inner.new_state()

    def append_context(self, state, taps):
        self.inner.append_context(state, taps)

    def propose(self, state, anchor, n, *, temperature=0.0, rng=None):
        prop = self.inner.propose(state, anchor, n)
        i = state.length - self.p  # the anchor's index in the generated tokens
        assert self.truth[i] == anchor
        toks = np.array(self.truth[i + 1 : i + 1 + n], np.int64)
        r = np.random.default_rng(1_000_003 + i)
        for j in range(n):
            if r.random() >= self.a:
                toks[j] = (toks[j] + 1) % self.vocab
                break
        return SimpleNamespace(tokens=toks, q=prop.q)


def _provenance(checkpoints, size, target, draft=None, **extra):
    t, d = checkpoints[size]
    prov = pair_provenance(target, model_hash=checkpoint_hash(t), draft=draft,
                           draft_hash=checkpoint_hash(d) if draft is not None else None, **extra)
    prov["host"] = machine()
    return prov


LOOPS = [("tiny", b, k, c) for b in BACKENDS for k in (3, 7, 15) for c in LOOP_CASES]
LOOPS += [("medium", b, 7, c) for b in BACKENDS for c in LOOP_CASES[2:]]


@pytest.mark.parametrize("size, backend, k, case", LOOPS,
                         ids=[f"{s}-{b}-k{k}-" + (c[0] if c[1] is None else f"oracle{c[1]}") for s, b, k, c in LOOPS])
def test_loop_vs_plain(benchmark, checkpoints, size, backend, k, case):
    benchmark.group = f"loop-{size}-{backend}"
    target, draft = pair(checkpoints, size, backend)
    one_row = pair(checkpoints, size, backend, row_set=1)[0]
    kind, a = case
    if kind == "oracle":
        truth = generate(target, PROMPT, max_new_tokens=NEW_TOKENS + 20, stop_tokens=()).tokens
        draft = OracleDraft(draft, truth, len(PROMPT), a, target.config.vocab_size)
    prov = _provenance(checkpoints, size, target, draft, draft_kind=kind, oracle_a=a)
    doc = benchmark.pedantic(bench_runner.run_bench, args=(target, one_row, draft, [PROMPT]),
                             kwargs=dict(k=k, max_new_tokens=NEW_TOKENS, repeats=3, provenance=prov), rounds=1, iterations=1)
    benchmark.extra_info.update(kind="loop", size=size, backend=backend, k=k, draft=kind, oracle_a=a,
                                results=doc["results"], provenance=doc["provenance"])


@pytest.mark.parametrize("k", list(range(0, 16)))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", list(SIZES))
def test_verify_rows(benchmark, checkpoints, size, backend, k):
    """k = 0 is the plain step itself (one row through forward)."""
    benchmark.group = f"verify-{size}-{backend}"
    target, _ = pair(checkpoints, size, backend)
    state = target.new_state()
    target.forward(PROMPT, state)
    rows = [int(t) % target.config.vocab_size for t in range(9, 10 + k)]
    if k == 0:
        benchmark.pedantic(target.forward, setup=lambda: ((rows, state.copy()), {}), rounds=15, warmup_rounds=1)
    else:
        benchmark.pedantic(target.verify, setup=lambda: ((rows, state.copy()), {}), rounds=15, warmup_rounds=1)
    benchmark.extra_info.update(kind="verify", size=size, backend=backend, k=k, rows=k + 1, row_set=target.row_set,
                                provenance=_provenance(checkpoints, size, target))


@pytest.mark.parametrize("accept", ["full", "partial"])
@pytest.mark.parametrize("path", COMMIT_PATHS)
def test_commit(benchmark, checkpoints, path, accept):
    size, backend, k = "medium", "reference", 7
    benchmark.group = f"commit-{size}-k{k}"
    target, _ = pair(checkpoints, size, backend)
    base = target.new_state()
    target.forward(PROMPT, base)
    rows = list(range(20, 21 + k))
    n = k + 1 if accept == "full" else 3
    info = {}

    def setup():
        st = base.copy()
        target.verify(rows, st, checkpoints=(path == "checkpoint"))
        record = st.pending
        info.update(checkpoint_nbytes=record.checkpoint_nbytes(),
                    snapshot_nbytes=sum(s.conv.nbytes + s.recurrent.nbytes for s in record.snapshot.values()),
                    recorded_inputs_nbytes=sum(a.nbytes for d in (record.mixed, record.alpha, record.beta) for a in d.values()))
        return (target, st, n), {}

    def commit(t, st, accepted):
        t.commit(st, accepted, path=path)
        info["state_nbytes"] = st.nbytes()

    benchmark.pedantic(commit, setup=setup, rounds=20, warmup_rounds=1)
    benchmark.extra_info.update(kind="commit", size=size, backend=backend, path=path, accept=accept, k=k, accepted_rows=n,
                                provenance=_provenance(checkpoints, size, target), **info)


def test_memory_bandwidth(benchmark):
    benchmark.group = "plain-vs-bandwidth"
    src = np.ones(64 * 2**20, np.uint8)
    dst = np.empty_like(src)
    benchmark.pedantic(np.copyto, args=(dst, src), rounds=10, warmup_rounds=1)
    benchmark.extra_info.update(kind="bandwidth", bytes_moved=2 * src.nbytes)


def weight_bytes(target) -> int:
    """Bytes of weights one plain step reads: every Linear's packed form, plus one embedding row."""
    seen, total = set(), target.embed_tokens[0].nbytes

    def visit(obj):
        nonlocal total
        for v in vars(obj).values():
            if isinstance(v, Linear) and id(v.packed) not in seen:
                seen.add(id(v.packed))
                total += int(getattr(v.packed, "nbytes"))
            elif hasattr(v, "__dict__") and not isinstance(v, (np.ndarray, type)) and type(v).__module__.startswith("onebit_engine.hybrid."):
                visit(v)

    visit(SimpleNamespace(head=target.lm_head))
    for layer in target.layers:
        visit(layer)
    return total


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", list(SIZES))
def test_plain_step_vs_bandwidth(benchmark, checkpoints, size, backend):
    benchmark.group = "plain-vs-bandwidth"
    target, _ = pair(checkpoints, size, backend, row_set=1)
    state = target.new_state()
    target.forward(PROMPT, state)
    benchmark.pedantic(target.forward, setup=lambda: (([9], state.copy()), {}), rounds=20, warmup_rounds=2)
    benchmark.extra_info.update(kind="plain-step", size=size, backend=backend, row_set=1, weight_bytes=weight_bytes(target),
                                provenance=_provenance(checkpoints, size, target))


@pytest.mark.parametrize("size", list(SIZES))
def test_hf_peer(benchmark, checkpoints, size):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    benchmark.group = "hf-peer"
    t_path, _ = checkpoints[size]
    torch.set_num_threads(1)
    model = tf.Qwen3_5ForCausalLM.from_pretrained(str(t_path), dtype=torch.float32).eval()

    def hf_decode():
        with torch.no_grad():
            out = model(torch.tensor([PROMPT]), use_cache=True)
            tok, toks, t0 = out.logits[0, -1].argmax(), [], time.perf_counter()
            cache = out.past_key_values
            toks.append(int(tok))
            for _ in range(NEW_TOKENS - 1):
                out = model(tok.view(1, 1), past_key_values=cache, use_cache=True)
                cache, tok = out.past_key_values, out.logits[0, -1].argmax()
                toks.append(int(tok))
            return toks, (NEW_TOKENS - 1) / (time.perf_counter() - t0)

    hf_decode()
    runs = []
    ours = {}
    for backend in BACKENDS:
        ours[backend] = []
    for _ in range(3):  # interleaved: HF, then this engine's plain decoding, same prompt and length
        runs.append(hf_decode())
        for backend in BACKENDS:
            tgt = pair(checkpoints, size, backend, row_set=1)[0]
            ours[backend].append(generate(tgt, PROMPT, max_new_tokens=NEW_TOKENS, stop_tokens=()))
    benchmark.pedantic(hf_decode, rounds=1, iterations=1)
    hf_tps = float(np.median([r[1] for r in runs]))
    engine = {b: float(np.median([g.tokens_per_s for g in gs])) for b, gs in ours.items()}
    same = runs[0][0] == ours["reference"][0].tokens
    benchmark.extra_info.update(kind="hf-peer", size=size, hf_tokens_per_s=hf_tps, engine_tokens_per_s=engine,
                                engine_over_hf={b: v / hf_tps for b, v in engine.items()}, greedy_tokens_equal=same,
                                torch_threads=1, torch=torch.__version__, transformers=tf.__version__,
                                provenance=_provenance(checkpoints, size, pair(checkpoints, size, "reference", row_set=1)[0]))


def test_prediction_formula():
    """Not a benchmark: the Leviathan expectation the tables use."""
    assert expected_tokens(0.0, 7) == 1.0 and expected_tokens(1.0, 7) == 8.0


def _trained():
    try:
        from onebit_engine import default_model

        return default_model if default_model.builtin_paths() else None
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("k", [3, 7, 15])
@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_trained_pair(benchmark, backend, k):
    """The shipped trained pair, when the package has one: acceptance learned, not set by an oracle."""
    pre = _trained()
    if pre is None:
        pytest.skip("no trained built-in pair in this install (onebit_engine.default_model)")
    benchmark.group = f"loop-trained-{backend}"
    target, draft = pre.load_builtin_pair(backend=backend, row_set=8)
    one_row = pre.load_builtin_pair(backend=backend, row_set=1)[0]
    k = min(k, draft.config.block_size - 1)
    tok = pre.load_tokenizer()
    prompts = [tok.encode(t) for t in pre.default_prompt_texts()[:2]]
    t_dir, d_dir = pre.builtin_paths()[:2]
    prov = pair_provenance(target, model_hash=checkpoint_hash(t_dir), draft=draft, draft_hash=checkpoint_hash(d_dir),
                           draft_kind="trained")
    prov["host"] = machine()
    doc = benchmark.pedantic(bench_runner.run_bench, args=(target, one_row, draft, prompts),
                             kwargs=dict(k=k, max_new_tokens=NEW_TOKENS, repeats=3, provenance=prov), rounds=1, iterations=1)
    benchmark.extra_info.update(kind="loop", size="trained", backend=backend, k=k, draft="trained", oracle_a=None,
                                results=doc["results"], provenance=doc["provenance"])
