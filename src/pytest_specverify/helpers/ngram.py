"""``NgramDraft``: a seeded n-gram draft for any vocabulary (a ``make_draft`` for ports without one).

The next-token logits are a fixed random table indexed by the last ``order - 1`` tokens (hashed into
``buckets`` rows), so proposals depend on the committed text only: it speaks the draft protocol
(``append_context`` is told the committed rows; the anchor and the drafted tokens are known), needs no
taps, and ``propose`` leaves the state as it found it. q is softmax(logits / T) at T > 0 and one-hot
at T = 0; rng is a numpy Generator (None at T = 0).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NgramState:
    length: int = 0
    tokens: list = field(default_factory=list)


@dataclass
class NgramProposal:
    tokens: object
    q: object


class NgramDraft:
    block_size = None  # no fixed block: proposes any number of drafts (the engine's loop reads it)

    def __init__(self, vocab_size: int, *, order: int = 2, seed: int = 0, scale: float = 3.0, buckets: int = 4096):
        import numpy as np

        if order < 2:
            raise ValueError(f"NgramDraft order={order}: it must be >= 2 (a bigram or longer)")
        self.vocab_size, self.order, self.buckets = vocab_size, order, buckets
        rows = min(buckets, vocab_size ** (order - 1))
        self.table = scale * np.random.default_rng(seed).standard_normal((rows, vocab_size))

    def new_state(self) -> NgramState:
        return NgramState()

    def append_context(self, state: NgramState, taps) -> None:
        state.length += 0 if taps is None else len(taps)

    def _row(self, ctx):
        key = 0
        for t in ctx[-(self.order - 1):]:
            key = key * self.vocab_size + int(t)
        return self.table[key % len(self.table)]

    def propose(self, state: NgramState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None):
        import numpy as np

        ctx = [int(anchor_token)]
        tokens, qs = [], []
        for _ in range(n_draft):
            logits = self._row(ctx)
            if temperature > 0:
                z = logits / temperature
                p = np.exp(z - z.max())
                p /= p.sum()
                tok = min(int(np.searchsorted(np.cumsum(p), rng.random(), side="right")), len(p) - 1)
                while p[tok] <= 0:
                    tok -= 1
            else:
                tok = int(np.argmax(logits))
                p = np.zeros(self.vocab_size)
                p[tok] = 1.0
            tokens.append(tok)
            qs.append(p)
            ctx.append(tok)
        return NgramProposal(np.asarray(tokens, np.int64), np.asarray(qs).reshape(n_draft, self.vocab_size))
