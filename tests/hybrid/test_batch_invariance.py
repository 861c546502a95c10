"""Batch invariance by construction, tested bitwise over random configs, prompts, R and accept counts.

verify of R rows then commit(a) must give, row for row, the logits of single-token forward calls, and
the state those a steps leave - on every backend that claims exactness.
"""
import numpy as np
from hypothesis import given, strategies as st

from onebit_engine.gemm import available_backends, get_backend
from onebit_engine.hybrid.commit import COMMIT_PATHS
from onebit_engine.hybrid.synthetic import random_target, tiny_config

EXACT = [b for b in available_backends() if get_backend(b).exact]


@st.composite
def cases(draw):
    hk = draw(st.sampled_from([1, 2]))
    cfg = tiny_config(
        vocab_size=draw(st.integers(16, 80)), hidden_size=draw(st.sampled_from([16, 24, 32])),
        intermediate_size=draw(st.sampled_from([16, 40])), num_hidden_layers=draw(st.integers(1, 5)),
        full_attention_interval=draw(st.integers(1, 4)), num_attention_heads=4,
        num_key_value_heads=draw(st.sampled_from([1, 2, 4])), head_dim=draw(st.sampled_from([8, 16])),
        linear_num_key_heads=hk, linear_num_value_heads=hk * draw(st.sampled_from([1, 2])),
        linear_key_head_dim=draw(st.sampled_from([4, 8])), linear_value_head_dim=draw(st.sampled_from([4, 8])),
        linear_conv_kernel_dim=draw(st.integers(1, 4)), tie_word_embeddings=draw(st.booleans()),
    )
    prompt = draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=1, max_size=20))
    rows = draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=1, max_size=12))
    accepted = draw(st.integers(0, len(rows)))
    return cfg, prompt, rows, accepted, draw(st.sampled_from([1, 3, 8])), draw(st.integers(0, 2**16))


def states_equal(a, b):
    aa, bb = a.arrays(), b.arrays()
    assert aa.keys() == bb.keys()
    for k in aa:
        assert np.array_equal(aa[k], bb[k]), k


OPS_NAMES = ["numpy", "numba"] if __import__("importlib").util.find_spec("numba") else ["numpy"]


@given(cases(), st.sampled_from(EXACT), st.sampled_from(COMMIT_PATHS), st.sampled_from(OPS_NAMES))
def test_verify_commit_equals_single_steps(case, backend, path, ops):
    cfg, prompt, rows, accepted, row_set, seed = case
    target = random_target(cfg, seed, backend=backend, row_set=row_set, ops=ops)
    spec, ref = target.new_state(), target.new_state()
    target.forward(prompt, spec)
    for t in prompt:  # the reference never runs a verify: one plain step per token
        target.forward([t], ref)
    ver = target.verify(rows, spec, checkpoints=(path == "checkpoint"))
    target.commit(spec, accepted, path=path, replay_check=True)
    singles = np.stack([target.forward([t], ref).logits[0] for t in rows[:accepted]]) if accepted else None
    if accepted:
        assert np.array_equal(ver.logits[:accepted], singles)
    states_equal(spec, ref)
    assert spec.pos == ref.pos == len(prompt) + accepted
    nxt = rows[accepted] if accepted < len(rows) else 0
    assert np.array_equal(target.forward([nxt], spec).logits, target.forward([nxt], ref).logits)


@given(cases(), st.sampled_from(EXACT), st.sampled_from(OPS_NAMES))
def test_prefill_equals_single_steps(case, backend, ops):
    cfg, prompt, rows, _, row_set, seed = case
    target = random_target(cfg, seed, backend=backend, row_set=row_set, ops=ops)
    a, b = target.new_state(), target.new_state()
    out = target.forward(prompt + rows, a)
    singles = [target.forward([t], b) for t in prompt + rows]
    assert np.array_equal(out.logits, np.concatenate([s.logits for s in singles]))
    assert np.array_equal(out.hidden, np.concatenate([s.hidden for s in singles]))
    states_equal(a, b)
