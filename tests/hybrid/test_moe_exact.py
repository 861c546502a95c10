"""The bitwise claims on mixture-of-experts targets (reference and host-int int8 / int4 / ternary):
verify of k+1 rows == k+1 single steps, every commit path == the sequential reference, prefill == steps,
grouped experts == one row per expert call, the loop == plain greedy - with rows that route to the same
experts and to disjoint ones (checked through the block's trace, so the cases cannot silently vanish)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine import COMMIT_PATHS
from onebit_engine.draft import load_draft
from onebit_engine.draft.synthetic import write_synthetic_draft
from onebit_engine.loop.generate import generate
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.hybrid.moe_config import MoeConfig
from onebit_engine.hybrid.moe_mlp import MoeMLP, sparse_blocks
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.hybrid.synthetic import random_target, tiny_config

from .test_batch_invariance import OPS_NAMES, states_equal

BACKENDS = {"reference": lambda: "reference", "host-int-int8": lambda: HostIntBackend(weight_format="int8"),
            "host-int-int4": lambda: HostIntBackend(weight_format="int4"),
            "host-int-ternary": lambda: HostIntBackend(weight_format="ternary")}
MOES = {
    "e8k2-shared-norm": MoeConfig(8, 2, 16, 24, True),
    "e6k3-noshared-nonorm-dense0": MoeConfig(6, 3, 16, 0, False, 1, (0,)),
    "e16k4-step2": MoeConfig(16, 4, 8, 16, True, 2),
}


def moe_target(moe, backend="reference", seed=0, row_set=8, ops="auto", layers=4, vocab=80):
    cfg = tiny_config(vocab_size=vocab, num_hidden_layers=layers, full_attention_interval=2, moe=moe)
    return random_target(cfg, seed, backend=BACKENDS[backend]() if backend in BACKENDS else backend,
                         row_set=row_set, scale=2.0, ops=ops)


def test_synthetic_moe_configs_are_sparse_where_the_config_says():
    t = moe_target(MOES["e6k3-noshared-nonorm-dense0"])
    assert [isinstance(layer.mlp, MoeMLP) for layer in t.layers] == [False, True, True, True]
    assert t.config.model_type == "qwen3_next"
    t = moe_target(MOES["e16k4-step2"])
    assert [isinstance(layer.mlp, MoeMLP) for layer in t.layers] == [False, True, False, True]
    assert sparse_blocks(moe_target(MOES["e8k2-shared-norm"]))[0].shared is not None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("moe", MOES)
@pytest.mark.parametrize("path", COMMIT_PATHS)
def test_moe_verify_commit_equals_single_steps(backend, moe, path):
    target = moe_target(MOES[moe], backend, seed=3)
    for block in sparse_blocks(target):
        block.trace = []
    rng = np.random.default_rng(1)
    prompt, rows = rng.integers(0, 80, 11).tolist(), rng.integers(0, 80, 7).tolist()
    ref = target.new_state()
    for t in prompt:
        target.forward([t], ref)
    singles = np.stack([target.forward([t], ref).logits[0] for t in rows])
    for accepted in (0, 3, len(rows)):
        spec, seq = target.new_state(), target.new_state()
        target.forward(prompt, spec)
        ver = target.verify(rows, spec, checkpoints=(path == "checkpoint"))
        assert np.array_equal(ver.logits, singles)
        target.commit(spec, accepted, path=path, replay_check=True)
        for t in prompt + rows[:accepted]:
            target.forward([t], seq)
        states_equal(spec, seq)
        assert np.array_equal(target.forward([5], spec).logits, target.forward([5], seq).logits)
    # the verify's rows shared some experts and not others (so both cases ran)
    e, k = MOES[moe].num_experts, MOES[moe].num_experts_per_tok
    verifies = [hits for block in sparse_blocks(target) for hits in block.trace if len(hits) > k]
    assert verifies and any(len(h) < e for h in verifies), verifies


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared", [24, 16])  # 16: the routed experts' width, so one SwiGLU call takes both
def test_grouped_experts_equal_one_row_per_expert_call(backend, shared):
    """On host-int the grouped block runs its experts' products together (gemm.run_packed); elsewhere one call each.
    Prefill chunks of several rows, then single tokens (the block hands every expert the token's own row)."""
    moe = dataclasses.replace(MOES["e8k2-shared-norm"], shared_expert_intermediate_size=shared)
    a, b = moe_target(moe, backend, seed=4), moe_target(moe, backend, seed=4)
    for block in sparse_blocks(b):
        block.grouped = False
    toks = np.random.default_rng(2).integers(0, 80, 25).tolist()
    sa, sb = a.new_state(), b.new_state()
    for chunk in (toks[:21], *([t] for t in toks[21:])):
        oa, ob = a.forward(chunk, sa), b.forward(chunk, sb)
        assert np.array_equal(oa.logits, ob.logits) and np.array_equal(oa.hidden, ob.hidden)


@pytest.mark.parametrize("backend", ["reference", "host-int-int8"])
@pytest.mark.parametrize("routing", ["same", "disjoint"])
def test_rows_routed_to_the_same_or_disjoint_experts(backend, routing):
    """Force the routing from each row's router logits: every row to experts {1, 2} ("same"), or to the
    pair {2j, 2j+1} with j the argmax of its first four logits ("disjoint": two rows share both
    experts or none). A verify's rows must still equal single steps bit for bit."""
    from onebit_engine.ops.moe import route_plan

    def forced(logits, n, top_k, norm):
        r = logits.shape[0]
        j = np.argmax(logits[:, :4], axis=1)
        ids = np.array([[1, 2]] * r) if routing == "same" else np.stack([2 * j, 2 * j + 1], axis=1)
        w = (np.full((r, 2), 0.5) + 0.01 * np.tanh(logits[:, :2])).astype(np.float32)
        return (w[:n], *route_plan(ids, n))

    target = moe_target(MOES["e8k2-shared-norm"], backend, seed=6)
    for block in sparse_blocks(target):
        block.trace = []
        block.ops = dataclasses.replace(block.ops, moe_route=forced)
    toks = [4, 8, 15, 16, 23, 42, 7, 9, 30]
    ref = target.new_state()
    target.forward(toks[:2], ref)
    singles = np.stack([target.forward([t], ref).logits[0] for t in toks[2:]])
    spec = target.new_state()
    target.forward(toks[:2], spec)
    assert np.array_equal(target.verify(toks[2:], spec).logits, singles)
    verify_hits = [block.trace[-1] for block in sparse_blocks(target)]
    if routing == "same":
        assert all(h == (1, 2) for h in verify_hits)
    else:
        assert max(len(h) for h in verify_hits) >= 6, verify_hits  # at least three disjoint pairs in one layer


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), experts=st.sampled_from([4, 8, 12]), top_k=st.integers(1, 4),
       shared=st.sampled_from([0, 8]), norm=st.booleans(), backend=st.sampled_from(list(BACKENDS)),
       row_set=st.sampled_from([1, 3, 8]), ops=st.sampled_from(OPS_NAMES),
       n_prompt=st.integers(1, 12), n_rows=st.integers(1, 9))
def test_moe_prefill_and_verify_equal_single_steps_property(seed, experts, top_k, shared, norm, backend, row_set,
                                                              ops, n_prompt, n_rows):
    moe = MoeConfig(experts, min(top_k, experts), 8, shared, norm, 1, (seed % 3,) if seed % 2 else ())
    target = moe_target(moe, backend, seed=seed, row_set=row_set, ops=ops, layers=3)
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, 80, n_prompt + n_rows).tolist()
    a, b = target.new_state(), target.new_state()
    pre = target.forward(toks[:n_prompt], a)
    singles = [target.forward([t], b) for t in toks]
    assert np.array_equal(pre.logits, np.concatenate([s.logits for s in singles[:n_prompt]]))
    ver = target.verify(toks[n_prompt:], a)
    assert np.array_equal(ver.logits, np.concatenate([s.logits for s in singles[n_prompt:]]))
    assert np.array_equal(ver.hidden, np.concatenate([s.hidden for s in singles[n_prompt:]]))
    target.commit(a, n_rows)
    states_equal(a, b)


def test_host_int_moe_target_is_bitwise_the_same_on_every_row_set():
    toks = np.random.default_rng(0).integers(0, 80, 13).tolist()
    runs = []
    for rs in (1, 3, 8):
        t = moe_target(MOES["e8k2-shared-norm"], "host-int-int8", seed=11, row_set=rs)
        st_ = t.new_state()
        out = [t.forward(toks[:9], st_).logits] + [t.forward([x], st_).logits for x in toks[9:11]]
        runs.append(np.concatenate(out + [t.verify(toks[11:], st_).logits]))
    assert all(np.array_equal(r, runs[0]) for r in runs[1:])


@pytest.mark.parametrize("backend", ["reference", "host-int-int8"])
@pytest.mark.parametrize("moe", ["e8k2-shared-norm", "e6k3-noshared-nonorm-dense0"])
def test_moe_loop_equals_plain_greedy(tmp_path, backend, moe):
    target = moe_target(MOES[moe], backend, seed=7)
    folder = write_synthetic_draft(tmp_path / "draft", target.config, seed=7, block_size=8, num_layers=1)
    draft = load_draft(folder, target, backend=target.backend, row_set=target.row_set)
    rng = np.random.default_rng(7)
    for _ in range(2):
        prompt = rng.integers(0, 80, int(rng.integers(1, 20))).tolist()
        want = generate(target, prompt, max_new_tokens=24).tokens
        for path in COMMIT_PATHS:
            got = speculative_generate(target, draft, prompt, max_new_tokens=24, k=int(rng.integers(1, 8)),
                                       commit_path=path, replay_check=True)
            assert got.tokens == want, (prompt, path)
