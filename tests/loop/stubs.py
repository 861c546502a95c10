"""Test doubles for the loop: a scripted draft over a real target, and a bigram target / draft pair
whose exact output distribution is known (for the sampling tests)."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from onebit_engine.loop.generate import generate


@dataclass
class Proposal:
    tokens: np.ndarray
    q: np.ndarray


class ScriptedDraft:
    """Proposes the target's own greedy continuation, with a wrong token injected where the script
    says: ``wrong_at(round_index) -> position or None`` (position 0 = the first draft)."""

    def __init__(self, target, prompt, max_new_tokens, block_size=8, wrong_at=lambda r: None):
        self.config = SimpleNamespace(block_size=block_size, version=0)
        self.block_size = block_size
        self.vocab = target.config.vocab_size
        self.truth = generate(target, prompt, max_new_tokens=max_new_tokens + block_size).tokens
        self.prompt_len = len(prompt)
        self.wrong_at = wrong_at
        self.round = 0
        self.contexts: list[int] = []

    def new_state(self):
        return SimpleNamespace(length=0)

    def append_context(self, state, taps):
        self.contexts.append(len(taps))
        state.length += len(taps)

    def propose(self, state, anchor, n, *, temperature=0.0, rng=None):
        i = state.length - self.prompt_len  # index of the anchor in the generated tokens
        assert self.truth[i] == anchor, "the loop fed the draft a context that does not end at the anchor"
        toks = np.array(self.truth[i + 1 : i + 1 + n], np.int64)
        w = self.wrong_at(self.round)
        if w is not None and w < n:
            toks[w] = (toks[w] + 1) % self.vocab
        self.round += 1
        q = np.zeros((n, self.vocab))
        q[np.arange(n), toks] = 1.0
        return Proposal(toks, q)


class BigramTarget:
    """p(next | prev) = P[prev]: a 'model' whose exact sequence distribution is a Markov chain.
    Implements the loop's target surface (forward / verify / commit / new_state)."""

    def __init__(self, P: np.ndarray, eos=()):
        self.P = P
        V = P.shape[0]
        with np.errstate(divide="ignore"):
            self.logits_table = np.where(P > 0, np.log(np.maximum(P, 1e-300)), -1e30).astype(np.float64)
        self.config = SimpleNamespace(vocab_size=V, eos_token_ids=tuple(eos), model_type="bigram")
        self.row_set = 1
        self.backend = SimpleNamespace(describe=lambda: {"backend": "bigram", "kernel_set": "none"})

    def new_state(self):
        return SimpleNamespace(tokens=[], pending=None)

    def _out(self, toks):
        return SimpleNamespace(logits=self.logits_table[np.asarray(toks)], hidden=np.zeros((len(toks), 1, 1), np.float32))

    def forward(self, toks, st):
        st.tokens += list(toks)
        return self._out(toks)

    def verify(self, toks, st, checkpoints=False):
        st.pending = len(st.tokens)
        st.tokens += list(toks)
        return self._out(toks)

    def commit(self, st, accepted, path="keep", replay_check=False):
        st.tokens = st.tokens[: st.pending + accepted]
        st.pending = None


class BigramDraft:
    """Samples each draft from Q[prev]; q rows are exactly those distributions."""

    def __init__(self, Q: np.ndarray, block_size=5):
        self.Q = Q
        self.config = SimpleNamespace(block_size=block_size, version=0)
        self.block_size = block_size

    def new_state(self):
        return SimpleNamespace(length=0)

    def append_context(self, state, taps):
        state.length += len(taps)

    def propose(self, state, anchor, n, *, temperature=0.0, rng=None):
        toks, qs, prev = [], [], anchor
        for _ in range(n):
            q = self.Q[prev]
            c = np.cumsum(q)
            t = int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(q) - 1))
            toks.append(t)
            qs.append(q)
            prev = t
        return Proposal(np.array(toks, np.int64), np.array(qs))
