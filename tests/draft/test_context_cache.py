"""The cached context K/V equal recomputing the whole context every round (bitwise, reference backend).

Exactness argument: every projection runs through ``gemm.Linear`` in fixed row sets, and norms/RoPE are
per row, so a context row's K/V do not depend on which append call computed it; attention runs per query row.
"""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.draft import load_draft, write_synthetic_draft
from onebit_engine.errors import StateError

from .draft_helpers import make_taps

ROUNDS = [(7, 5), (3, 5), (1, 5), (6, 5), (2, 3), (9, 5)]

CONFIGS = {
    "v1-full": dict(version=1),
    "v1-sliding": dict(version=1, num_layers=2, sliding_window=3, layer_types=["sliding_attention", "full_attention"]),
    "v2": dict(version=2, sliding_window=4, is_causal=False, layer_types=["sliding_attention"] * 2),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cached_context_equals_recompute(name, target, tmp_path, ops):
    draft = load_draft(write_synthetic_draft(tmp_path, target.config, seed=5, **CONFIGS[name]), target, ops=ops)
    rng = np.random.default_rng(2)
    cached = draft.new_state()
    history = []
    for n_ctx, n_draft in ROUNDS:
        taps = make_taps(rng, n_ctx)
        history.append(taps)
        draft.append_context(cached, taps)
        fresh = draft.new_state()
        draft.append_context(fresh, np.concatenate(history))
        assert fresh.length == cached.length
        anchor = int(rng.integers(0, 60))
        a = draft.propose(cached, anchor, n_draft)
        b = draft.propose(fresh, anchor, n_draft)
        np.testing.assert_array_equal(a.hidden, b.hidden)
        np.testing.assert_array_equal(a.logits, b.logits)
        np.testing.assert_array_equal(a.tokens, b.tokens)


def test_propose_does_not_touch_state(target, tmp_path, ops):
    draft = load_draft(write_synthetic_draft(tmp_path, target.config), target, ops=ops)
    st = draft.new_state()
    draft.append_context(st, make_taps(np.random.default_rng(0), 5))
    k0 = [k.copy() for k in st.kt + st.v]
    first = draft.propose(st, 1, 5)
    assert st.length == 5 and all(np.array_equal(a, b) for a, b in zip(k0, st.kt + st.v))
    np.testing.assert_array_equal(first.hidden, draft.propose(st, 1, 5).hidden)


def test_shrunk_block_rows_depend_only_on_what_they_see(target, tmp_path, ops):
    """Causal layers: a shorter block gives the same rows as the prefix of a longer one."""
    folder = write_synthetic_draft(tmp_path, target.config, sliding_window=50, layer_types=["sliding_attention"] * 2)
    draft = load_draft(folder, target, ops=ops)
    st = draft.new_state()
    draft.append_context(st, make_taps(np.random.default_rng(0), 4))
    long, short = draft.propose(st, 7, 5), draft.propose(st, 7, 2)
    np.testing.assert_array_equal(long.hidden[:3], short.hidden)


def test_truncate_and_bad_requests(target, tmp_path):
    draft = load_draft(write_synthetic_draft(tmp_path, target.config), target)
    st = draft.new_state()
    draft.append_context(st, make_taps(np.random.default_rng(0), 5))
    st.truncate(3)
    assert st.length == 3 and st.view(0)[0].shape[1] == 3
    with pytest.raises(StateError, match="only shrinks"):
        st.truncate(4)
    with pytest.raises(StateError, match="n_draft=6"):
        draft.propose(st, 1, 6)  # block_size 6 -> at most 5 drafts
    with pytest.raises(ValueError, match="taps must be"):
        draft.append_context(st, np.zeros((2, 3, 32), np.float32))


def test_rows_do_not_depend_on_the_row_set(tmp_path, ops):
    """host-int GEMMs are exact per row, and every other op computes a row on its own: the same
    proposals, bit for bit, whatever row set the draft and the lm_head run in (8 rows = 2, 1 or 1/2 sets)."""
    from types import SimpleNamespace

    from onebit_engine.gemm import Linear, get_backend

    from .draft_helpers import make_target

    base = make_target()
    folder = write_synthetic_draft(tmp_path, base.config, version=2, seed=6, block_size=9,
                                   final_logit_softcapping=6.0)
    out = []
    for rs in (4, 8, 16):
        be = get_backend("host-int")
        tgt = SimpleNamespace(config=base.config, embed_tokens=base.embed_tokens,
                              lm_head=Linear.from_weight(base.lm_head_weight, be, rs, "lm_head"))
        draft = load_draft(folder, tgt, backend=be, row_set=rs, ops=ops)
        st = draft.new_state()
        draft.append_context(st, make_taps(np.random.default_rng(3), 11))
        out.append(draft.propose(st, 9, 7))
    for p in out[1:]:
        np.testing.assert_array_equal(p.hidden, out[0].hidden)
        np.testing.assert_array_equal(p.logits, out[0].logits)
        np.testing.assert_array_equal(p.tokens, out[0].tokens)
