"""The seed's commit_full_accept_test, on every commit path, and every partial accept count 0..k."""
import numpy as np
import pytest

from onebit_engine import COMMIT_PATHS, StateError, StateMismatch
from onebit_engine.hybrid.synthetic import random_target, tiny_config

K = 6
PROMPT = [5, 9, 14, 3, 77, 21, 60, 2, 33, 41, 8]
DRAFT = [12, 50, 7, 7, 90, 31]


@pytest.fixture(scope="module")
def target():
    return random_target(tiny_config(num_hidden_layers=5, full_attention_interval=2), seed=11)


def sequential(target, tokens):
    st = target.new_state()
    for t in tokens:
        target.forward([t], st)
    return st


def assert_same_state(a, b):
    for (ka, va), (kb, vb) in zip(a.arrays().items(), b.arrays().items()):
        assert ka == kb and np.array_equal(va, vb), f"{ka}: max diff {np.max(np.abs(va - vb)) if va.shape == vb.shape else 'shape ' + str((va.shape, vb.shape))}"


@pytest.mark.parametrize("path", COMMIT_PATHS)
@pytest.mark.parametrize("accepted", range(K + 2))
def test_commit_then_step_equals_sequential(target, path, accepted):
    rows = [PROMPT[-1]] + DRAFT  # [last, d1..dk]
    st = target.new_state()
    target.forward(PROMPT[:-1], st)
    target.verify(rows, st, checkpoints=(path == "checkpoint"))
    target.commit(st, accepted, path=path, replay_check=True)
    ref = sequential(target, PROMPT[:-1] + rows[:accepted])
    assert_same_state(st, ref)
    nxt = 19
    assert np.array_equal(target.forward([nxt], st).logits, target.forward([nxt], ref).logits)


def test_keep_path_full_accept_keeps_batch_state(target):
    """On a full accept 'keep' must not touch the GDN state (the batch's recurrence already made it)."""
    st = target.new_state()
    target.forward(PROMPT, st)
    target.verify(DRAFT, st)
    before = {k: v.copy() for k, v in st.arrays().items() if k.endswith(("conv", "recurrent"))}
    ids = {i: id(s) for i, s in enumerate(st.layers)}
    target.commit(st, len(DRAFT), path="keep")
    assert all(id(s) == ids[i] for i, s in enumerate(st.layers))
    for k, v in before.items():
        assert np.array_equal(st.arrays()[k], v)


def test_replay_check_names_layer_and_array(target):
    st = target.new_state()
    target.forward(PROMPT, st)
    target.verify(DRAFT, st)
    st.layers[0].recurrent[0, 0, 0] += 1e-3  # a corrupted batch state that 'keep' would keep
    with pytest.raises(StateMismatch, match=r"layer 0 array 'recurrent'.*max \|diff\| = 1\.0"):
        target.commit(st, len(DRAFT), path="keep", replay_check=True)
    assert_same_state(st, sequential(target, PROMPT + DRAFT))  # left holding the reference state


def test_commit_misuse_is_refused(target):
    st = target.new_state()
    target.forward(PROMPT, st)
    with pytest.raises(StateError, match="no pending verify"):
        target.commit(st, 1)
    target.verify(DRAFT, st)
    with pytest.raises(StateError, match="outside 0..6"):
        target.commit(st, 7)
    with pytest.raises(StateError, match="checkpoints=True"):
        target.commit(st, 1, path="checkpoint")
    with pytest.raises(StateError, match="not committed"):
        target.forward([1], st)
    target.commit(st, 3)
    assert st.pos == len(PROMPT) + 3


def test_checkpoint_memory_is_rows_times_state(target):
    st = target.new_state()
    target.forward(PROMPT, st)
    gdn_bytes = sum(v.nbytes for k, v in st.arrays().items() if k.endswith(("conv", "recurrent")))
    target.verify(DRAFT, st, checkpoints=True)
    assert st.pending.checkpoint_nbytes() == len(DRAFT) * gdn_bytes


def test_the_verify_record_is_pending_during_the_run_and_dropped_if_it_fails():
    """The delta-net layers find the record on ``state.pending`` while a verify runs; a verify that raises
    part way leaves no record to commit and the state as it found it (delta-net layers before and after the
    fault, KV, position), so decoding goes on as if it never started."""
    t = random_target(tiny_config(num_hidden_layers=4, full_attention_interval=2), seed=3)
    st = t.new_state()
    t.forward(PROMPT[:4], st)
    before = st.copy()
    ref = st.copy()
    t.verify([3, 4, 5], ref)
    recorded = ref.pending.mixed[0].copy()  # what layer 0 records of these rows
    seen = []

    def boom(h):
        seen.append(st.pending)
        raise RuntimeError("backend fault")

    own = t.layers[2].mixer.out_proj
    t.layers[2].mixer.out_proj = boom  # a delta-net layer after layer 0 has recorded its rows
    with pytest.raises(RuntimeError, match="backend fault"):
        t.verify([3, 4, 5], st)
    assert seen[0] is not None and seen[0].rows == 3 and seen[0].start_pos == 4
    assert np.array_equal(seen[0].mixed[0], recorded)  # layer 0 had written its rows into it
    assert st.pending is None
    assert st.pos == before.pos
    assert_same_state(st, before)
    t.layers[2].mixer.out_proj = own
    t.forward([9], st)
    t.forward([9], before)
    assert_same_state(st, before)
