"""The sampling check's own drafts: q built from the target's p so the check knows exactly what a correct
loop's round produces (``sampling_check``)."""
from __future__ import annotations

from .drafts import ContextState, DistributionDraft, Proposal
from .stats import softmax

LOW = 0.25  # q = LOW * p on B: no zero-probability gap in q, and a residual that is p restricted to B


def controlled_q(p, seed: int, low: float = LOW):
    """(q, A): A a seeded set of tokens holding about half of p's mass, q = c_A p on A and ``low`` p
    elsewhere (c_A >= 1 makes q a distribution), so min(p, q) = p on A and the residual
    normalize(max(0, p - q)) is p restricted to the complement of A."""
    import numpy as np

    p = np.asarray(p, np.float64)
    order = np.random.default_rng(seed).permutation(p.size)
    cum = np.cumsum(p[order])
    cut = int(np.searchsorted(cum, 0.5 * cum[-1])) + 1
    in_a = np.zeros(p.size, bool)
    in_a[order[:min(cut, p.size - 1)]] = True
    pa = float(p[in_a].sum())
    c_a = (1.0 - low * (1.0 - pa)) / pa if pa > 0 else 1.0
    q = np.where(in_a, c_a * p, low * p)
    return q / q.sum(), in_a


class ControlledDraft:
    """The first proposal of a run (anchor t0) comes from ``controlled_q(p_of(t0))``; later ones from
    the fixed ``fallback`` q rows (those rounds are not tested). Draws with the loop's rng."""

    block_size = None  # no fixed block: proposes any number of drafts (the engine's loop reads it)

    def __init__(self, p_of, fallback, seed: int, second=None, exact: bool = False):
        self.p_of, self.fallback, self.seed, self.second, self.exact = p_of, fallback, seed, second, exact
        self.inner = DistributionDraft(fallback, seed)

    def new_state(self) -> ContextState:
        return ContextState()

    def append_context(self, state: ContextState, taps) -> None:
        state.length += 0 if taps is None else len(taps)

    def propose(self, state: ContextState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None):
        import numpy as np

        first = not state.tokens
        state.tokens.append(int(anchor_token))
        rows = 1 if self.second is None else 2
        if not first or n_draft != rows:
            return self.inner.propose(state, anchor_token, n_draft, temperature=temperature, rng=rng)
        p0 = self.p_of(int(anchor_token))
        q0 = p0 / p0.sum() if self.exact else controlled_q(p0, self.seed + int(anchor_token))[0]
        q = q0[None, :] if self.second is None else np.stack([q0, np.asarray(self.second, np.float64)])
        g = rng if rng is not None else self.inner.rng
        toks = []
        for row in q:
            tok = min(int(np.searchsorted(np.cumsum(row), g.random() * row.sum(), side="right")), row.size - 1)
            while row[tok] <= 0:
                tok -= 1
            toks.append(tok)
        return Proposal(np.asarray(toks, np.int64), q)


def draft_distribution(vocab: int, seed: int, sharpness: float = 1.5):
    """A fixed q [1, V] with two tokens of probability exactly 0 (never proposed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    q = softmax(sharpness * rng.standard_normal(vocab))
    q[rng.choice(vocab, size=2, replace=False)] = 0.0
    return (q / q.sum())[None, :]
