"""The documented speculative rule as a loop over any port's ``prefill`` / ``verify`` / ``commit`` /
``step``, for engines whose own loop does not speak the draft protocol.

Each round: ``propose(dstate, last, n)`` (n = min(k, what still fits); n = 0 is a round too: verify
``[last]`` and keep it), ``verify([last, d1..dn])``; at T = 0 accept while ``d_i == argmax(row i-1)``;
at T > 0 accept ``d_i`` with probability ``min(1, p/q)``, at the first rejection draw from
``normalize(max(0, p - q))``, after a full accept draw the bonus from ``p`` (p = softmax(logits / T));
``commit(a + 1)``; the draft is told the committed rows' taps ``[last, d1..da]``. Counts: one
(accepted, proposed) pair per round. The pieces are methods so a test can break exactly one.
"""
from __future__ import annotations

from typing import Sequence

from ..protocol import SpecRun


def _probs(logits, t: float):
    import numpy as np

    z = np.asarray(logits, np.float64) / t
    e = np.exp(z - z.max())
    return e / e.sum()


def _draw(p, rng) -> int:
    import numpy as np

    i = min(int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right")), len(p) - 1)
    while p[i] <= 0:
        i -= 1
    return i


class ReferenceLoop:
    def __init__(self, port, draft, *, k: int, temperature: float = 0.0, seed: int | None = None,
                 commit_path: str | None = None):
        import numpy as np

        self.port, self.draft, self.k, self.t = port, draft, int(k), float(temperature)
        self.rng = np.random.default_rng(seed)
        self.path = commit_path or port.commit_paths[0]

    def target_probs(self, logits):
        """p: the target's distribution at the run's temperature."""
        return _probs(logits, self.t)

    def residual(self, p, q):
        import numpy as np

        r = np.maximum(p - q, 0.0)
        return r / r.sum() if r.sum() > 0 else p

    def choose(self, logits) -> int:
        import numpy as np

        return int(np.argmax(logits)) if self.t <= 0 else _draw(self.target_probs(logits), self.rng)

    def accept(self, drafts, q, logits):
        """(accepted count, the round's last token)."""
        import numpy as np

        if self.t <= 0:
            a = 0
            while a < len(drafts) and drafts[a] == int(np.argmax(logits[a])):
                a += 1
            return a, int(np.argmax(logits[a]))
        for i, d in enumerate(drafts):
            p, qi = self.target_probs(logits[i]), np.asarray(q[i], np.float64)
            if self.rng.random() * qi[d] < p[d]:
                continue
            return i, _draw(self.residual(p, qi), self.rng)
        return len(drafts), _draw(self.target_probs(logits[len(drafts)]), self.rng)

    def run(self, prompt: Sequence[int], max_new_tokens: int) -> SpecRun:
        import numpy as np

        port, d = self.port, self.draft
        st, ds = port.new_state(), d.new_state()
        rows = port.prefill(st, list(prompt))
        d.append_context(ds, rows.taps)
        out = [self.choose(np.asarray(rows.logits)[-1])][:max_new_tokens]
        accepted, proposed = [], []
        while len(out) < max_new_tokens:
            last = out[-1]
            n = max(0, min(self.k, max_new_tokens - len(out) - 1))
            drafts, q = [], np.zeros((0, port.vocab_size))
            if n > 0:
                prop = d.propose(ds, last, n, temperature=self.t, rng=self.rng if self.t > 0 else None)
                drafts, q = [int(x) for x in np.asarray(prop.tokens)[:n]], np.asarray(prop.q)[:n]
            ver = port.verify(st, [last] + drafts, path=self.path)
            logits = np.asarray(ver.logits)
            a, nxt = self.accept(drafts, q, logits)
            port.commit(st, a + 1, path=self.path)
            d.append_context(ds, None if ver.taps is None else np.asarray(ver.taps)[: a + 1])
            out += drafts[:a] + [nxt]
            accepted.append(a)
            proposed.append(n)
        return SpecRun(out[:max_new_tokens], accepted, proposed)


def reference_speculative_generate(port, prompt, draft, *, max_new_tokens: int, k: int, temperature: float = 0.0,
                                   seed: int | None = None, commit_path: str | None = None,
                                   loop_class=ReferenceLoop) -> SpecRun:
    """A ``speculative_generate`` for any port (see the module docstring)."""
    return loop_class(port, draft, k=k, temperature=temperature, seed=seed, commit_path=commit_path).run(prompt, max_new_tokens)


def plain_generate(port, prompt, *, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None) -> list[int]:
    """A ``generate`` for any port: prefill, then one ``step`` per token (greedy at T = 0)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    st = port.new_state()
    logits = np.asarray(port.prefill(st, list(prompt)).logits)[-1]
    out: list[int] = []
    while len(out) < max_new_tokens:
        out.append(int(np.argmax(logits)) if temperature <= 0 else _draw(_probs(logits, temperature), rng))
        if len(out) < max_new_tokens:
            logits = np.asarray(port.step(st, out[-1]).logits)[-1]
    return out


class ReferenceLoops:
    """``generate`` and ``speculative_generate`` from the loops above, for a port whose engine has no loop that
    speaks the draft protocol (``loop_class``: the speculative loop, a ``ReferenceLoop`` subclass to break one piece)."""

    loop_class = ReferenceLoop

    def generate(self, prompt, *, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None) -> list[int]:
        return plain_generate(self, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)

    def speculative_generate(self, prompt, draft, *, max_new_tokens: int, k: int, temperature: float = 0.0,
                             seed: int | None = None, commit_path: str | None = None) -> SpecRun:
        return reference_speculative_generate(self, prompt, draft, max_new_tokens=max_new_tokens, k=k,
                                              temperature=temperature, seed=seed, commit_path=commit_path,
                                              loop_class=self.loop_class)
