"""A verify without its lm_head, then ``Target.logits`` on the rows acceptance reads, gives the very bits
of a full verify (so the loop's output cannot change), and acceptance computes no row past the first
rejection's block."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine.gemm import available_backends, get_backend
from onebit_engine.loop.speculative import RowLogits, greedy_accept
from onebit_engine.hybrid.synthetic import random_target, tiny_config

EXACT = [b for b in available_backends() if get_backend(b).exact]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(EXACT), st.sampled_from([1, 3, 8]), st.integers(1, 12), st.sampled_from(["numpy", "numba"]),
       st.integers(0, 2**16))
def test_lazy_rows_equal_a_full_verify(backend, row_set, rows, ops, seed):
    pytest.importorskip("numba") if ops == "numba" else None
    cfg = tiny_config()
    t = random_target(cfg, seed, backend=backend, row_set=row_set, ops=ops)
    toks = [int(x) for x in np.random.default_rng(seed).integers(0, cfg.vocab_size, 5 + rows)]
    a, b = t.new_state(), t.new_state()
    t.forward(toks[:5], a)
    t.forward(toks[:5], b)
    full = t.verify(toks[5:], a)
    bare = t.verify(toks[5:], b, logits=False)
    assert bare.logits.shape == (rows, 0)
    assert np.array_equal(bare.hidden, full.hidden)
    lazy = RowLogits(rows, lambda lo, hi: t.logits(bare.hidden[lo:hi, -1]))
    assert all(np.array_equal(lazy[i], full.logits[i]) for i in reversed(range(rows)))


def test_acceptance_reads_rows_in_blocks_and_stops_at_the_first_rejection():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 50)).astype(np.float32)
    top = logits.argmax(-1)
    asked = []

    def head(lo, hi):
        asked.append((lo, hi))
        return logits[lo:hi]

    for accepted in range(8):
        drafts = list(top[:7])
        if accepted < 7:
            drafts[accepted] = (top[accepted] + 1) % 50  # the first rejection at row `accepted`
        asked.clear()
        got = greedy_accept(drafts, RowLogits(8, head))
        assert got == greedy_accept(drafts, logits) == (accepted, int(top[accepted]))
        computed = asked[-1][1]
        assert computed > accepted and computed <= max(2, 2 * accepted)  # blocks 0-2, 2-4, 4-8
    with pytest.raises(IndexError):
        RowLogits(3, head)[3]
