"""Backends that declare ``row_invariant`` get the real rows only (no zero padding), and their rows'
bits then do not depend on the row set: a target on row set 8 decodes bitwise like one on row set 1."""
import numpy as np
import pytest

from onebit_engine.gemm import Linear, get_backend
from onebit_engine.hybrid.synthetic import random_target, tiny_config


class Recording:
    """Wraps a backend and records the row count of every call."""

    def __init__(self, inner, row_invariant):
        self.inner, self.row_invariant, self.rows = inner, row_invariant, []
        self.name, self.exact = inner.name, inner.exact

    def pack(self, w, name=""):
        return self.inner.pack(w, name=name)

    def matmul(self, x, p):
        self.rows.append(x.shape[0])
        return self.inner.matmul(x, p)

    def describe(self):
        return self.inner.describe()


@pytest.mark.parametrize("invariant", [False, True])
def test_padding_only_for_backends_that_need_it(invariant):
    b = Recording(get_backend("reference"), invariant)
    lin = Linear.from_weight(np.ones((4, 3), np.float32), b, 8)
    for m in (1, 5, 8, 11):
        lin(np.ones((m, 3), np.float32))
    assert b.rows == ([1, 5, 8, 8, 3] if invariant else [8, 8, 8, 8, 8])


def test_host_int_target_is_bitwise_the_same_on_every_row_set():
    cfg = tiny_config()
    toks = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 13)]
    runs = []
    for rs in (1, 3, 8):
        t = random_target(cfg, 11, backend="host-int", row_set=rs)
        assert t.row_invariant
        st = t.new_state()
        out = [t.forward(toks[:9], st).logits]
        out += [t.forward([x], st).logits for x in toks[9:11]]
        ver = t.verify(toks[11:], st)
        runs.append((np.concatenate(out + [ver.logits]), ver.hidden))
    for logits, hidden in runs[1:]:
        assert np.array_equal(logits, runs[0][0]) and np.array_equal(hidden, runs[0][1])
