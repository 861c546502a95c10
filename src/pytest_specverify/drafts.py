"""Drafts the checks bring along (they speak the engine's draft protocol, ``protocol.DraftLike``).

* :class:`ForcingDraft` proposes the target's own greedy continuation with a wrong token injected at a
  scripted position each round, so every accept count 0..k happens on purpose. It also checks what the
  loop feeds it: the anchor must be the committed token at its position and every context row must be
  the target's taps of that position.
* :class:`SelfDraft` is the target drafting for itself (draft == target: every draft is accepted).
* :class:`DistributionDraft` samples from fixed, known distributions ``q`` (the sampling checks).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .owned import owned


@dataclass
class Proposal:
    """``tokens`` int64 [n]; ``q`` float64 [n, V] (the distribution each token came from)."""

    tokens: Any
    q: Any
    hidden: Any = None
    logits: Any = None


@dataclass
class ContextState:
    """A check draft's state: how many context rows it has, and (for the self-draft) their tokens."""

    length: int = 0
    tokens: list[int] = field(default_factory=list)


def _count(taps) -> int | None:
    """Rows in one ``append_context`` call; None when the port has no taps (``Rows.taps is None``)."""
    return None if taps is None else len(taps)


def _one_hot(tokens, vocab: int):
    import numpy as np

    q = np.zeros((len(tokens), vocab))
    q[np.arange(len(tokens)), tokens] = 1.0
    return q


Script = Callable[[int, int], int]  # (round index, n drafted) -> correct drafts before the wrong one


def cycle_script(pattern: Sequence[int]) -> Script:
    """Round r keeps ``pattern[r % len]`` correct drafts (a value >= n means a full accept)."""
    pattern = list(pattern)
    return lambda r, n: pattern[r % len(pattern)]


class ForcingDraft:
    """Proposes ``sequence[pos + 1 : pos + 1 + n]`` (the plain greedy text) with the token at index
    ``script(round, n)`` replaced by a wrong one, so round r accepts exactly ``min(script(r, n), n)``.

    ``sequence``: prompt + the plain greedy continuation (long enough for the last round);
    ``reference_taps``: the target's taps of ``sequence`` rows (from one prefill), or None to skip the
    context-row check; ``same_taps(a, b)``: the port's tolerance for comparing two tap rows;
    ``prompt_length``: the prompt's length, which a port without taps (``append_context(dstate, None)``)
    cannot tell the draft (the rows of a later append are then the ones the script made acceptable).
    """

    block_size = None  # no fixed block: proposes any number of drafts (the engine's loop reads it)

    def __init__(self, sequence: Sequence[int], vocab_size: int, script: Script, *, reference_taps=None,
                 same_taps: Callable[[Any, Any], bool] | None = None, prompt_length: int | None = None,
                 nearest: bool = False):
        self.sequence = [int(t) for t in sequence]
        # not bitwise: a row outside the profile still counts as position p's when p is its unambiguous
        # nearest reference row (a step's rounding drifts from one long prefill's; a wrong row does not)
        self.nearest = nearest
        self.vocab_size = vocab_size
        self.script = script
        self.reference_taps = reference_taps
        self.same_taps = same_taps
        self.prompt_length = prompt_length
        self._round_open = False
        self.rounds = 0
        self.expected: list[int] = []  # accept count each round should have
        self.asked: list[int] = []  # n_draft of each propose call
        self.problems: list[str] = []

    def new_state(self) -> ContextState:
        return ContextState()

    def append_context(self, state: ContextState, taps) -> None:
        n = _count(taps)
        if n is None:  # no taps: the prompt, then the rows the script made acceptable, then single plain steps
            if state.length == 0:
                if self.prompt_length is None:
                    raise ValueError("ForcingDraft: the port passes no taps, so the draft needs prompt_length to know its context")
                n = self.prompt_length
            else:
                n = 1 + self.expected[-1] if self._round_open else 1
            self._round_open = False
            state.length += n
            return
        if self.reference_taps is not None and self.same_taps is not None:
            for j in range(n):
                pos = state.length + j
                if pos >= len(self.reference_taps):
                    break
                if not self.same_taps(taps[j], self.reference_taps[pos]) and not self._nearest_is(taps[j], pos):
                    hit = [p for p in range(len(self.reference_taps)) if self.same_taps(taps[j], self.reference_taps[p])]
                    where = (f"; it equals the taps of position {hit[0]}" if hit else
                             "; it matches no position of the text (the reference taps come from one prefill of the "
                             "whole text: if the port's prefill and its steps disagree, decode_prefill_consistency "
                             "says so directly)")
                    self._problem(f"the loop fed the draft a context row for position {pos} that is not the target's "
                                  f"taps of that position{where} (the accepted rows are [last, d1..da] = verify rows 0..a)")
                    break
        state.length += n

    def _nearest_is(self, row, pos: int) -> bool:
        """``pos`` is the row's nearest reference position and at most half as far as any other one."""
        if not self.nearest:
            return False
        import numpy as np

        ref = np.asarray(self.reference_taps, np.float64)
        a = np.asarray(row, np.float64)
        if ref.shape[1:] != a.shape:
            return False
        d = np.abs(ref - a).reshape(len(ref), -1).max(axis=1)
        others = np.delete(d, pos)
        return bool(np.isfinite(d[pos]) and (others.size == 0 or 2 * d[pos] < others.min()))

    def propose(self, state: ContextState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None) -> Proposal:
        import numpy as np

        pos = state.length
        if pos < len(self.sequence) and int(anchor_token) != self.sequence[pos]:
            self._problem(f"round {self.rounds}: the anchor is token {int(anchor_token)} but the committed text has "
                          f"{self.sequence[pos]} at position {pos} (the draft's context holds {pos} rows)")
        want = [self.sequence[p] if p < len(self.sequence) else 0 for p in range(pos + 1, pos + 1 + n_draft)]
        keep = self.script(self.rounds, n_draft)
        tokens = list(want)
        if keep < n_draft:
            tokens[keep] = (want[keep] + 1) % self.vocab_size
        self.expected.append(min(keep, n_draft))
        self.asked.append(int(n_draft))
        self._round_open = True
        self.rounds += 1
        arr = np.asarray(tokens, dtype=np.int64)
        return Proposal(arr, _one_hot(arr, self.vocab_size))

    def _problem(self, text: str) -> None:
        if len(self.problems) < 5:
            self.problems.append(text)


class SelfDraft:
    """Draft == target: proposes what the port's target itself would produce after the committed
    context (greedy at T = 0, sampled with the loop's rng at T > 0, with q = the target's p).

    It reconstructs the committed tokens from the loop contract: the first context is ``prompt``; a
    later append of T rows is ``[anchor, d1..d(T-1)]`` of the last proposal.
    """

    block_size = None  # no fixed block: proposes any number of drafts (the engine's loop reads it)

    def __init__(self, port, prompt: Sequence[int]):
        self.port = port
        self.prompt = [int(t) for t in prompt]
        self._last: tuple[int, list[int]] | None = None
        self.proposals = 0

    def new_state(self) -> ContextState:
        return ContextState()

    def append_context(self, state: ContextState, taps) -> None:
        n = _count(taps)
        if n is None:  # a port without taps: the prompt first, then the last proposal, taken as fully accepted
            n = len(self.prompt) if state.length == 0 else (1 + len(self._last[1]) if self._last is not None else 1)
        if state.length == 0:
            if n != len(self.prompt):
                raise ValueError(f"SelfDraft: the first context has {n} rows but the prompt has {len(self.prompt)} tokens")
            state.tokens = list(self.prompt)
        elif self._last is not None:
            anchor, drafts = self._last
            state.tokens += ([anchor] + drafts)[:n]
            self._last = None
        else:
            state.tokens += [-1] * n  # a plain step: token unknown (only happens after the last round)
        state.length += n

    def propose(self, state: ContextState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None) -> Proposal:
        import numpy as np

        if any(t < 0 for t in state.tokens):
            raise ValueError("SelfDraft: a plain step fed a row whose token it cannot know; do not mix plain steps and rounds")
        st = self.port.new_state()
        logits = np.asarray(self.port.prefill(st, state.tokens + [int(anchor_token)]).logits)[-1]
        tokens, qs = [], []
        for i in range(n_draft):
            if temperature > 0:
                from .stats import softmax

                p = softmax(logits, temperature)
                tok = int(rng.choice(len(p), p=p)) if rng is not None else int(np.argmax(p))
                qs.append(p)
            else:
                tok = int(np.argmax(logits))
                qs.append(_one_hot([tok], len(logits))[0])
            tokens.append(tok)
            if i < n_draft - 1:
                logits = np.asarray(self.port.step(st, tok).logits)[-1]
        self._last = (int(anchor_token), tokens)
        self.proposals += 1
        return Proposal(np.asarray(tokens, dtype=np.int64), np.asarray(qs))


class DistributionDraft:
    """Proposes d_i ~ q[i] with the loop's rng (its own seeded ``rng`` when the loop passes none), whatever
    the context (q [k, V], rows sum to 1)."""

    block_size = None  # no fixed block: proposes any number of drafts (the engine's loop reads it)

    def __init__(self, q, seed: int = 0):
        import numpy as np

        self.q = np.asarray(q, np.float64)
        self.rng = np.random.default_rng(seed)

    def new_state(self) -> ContextState:
        return ContextState()

    def append_context(self, state: ContextState, taps) -> None:
        state.length += _count(taps) or 0

    def propose(self, state: ContextState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None) -> Proposal:
        import numpy as np

        g = rng if rng is not None else self.rng
        q = self.q[:n_draft]
        tokens = np.array([int(np.searchsorted(np.cumsum(row), g.random() * row.sum(), side="right")) for row in q])
        tokens = np.minimum(tokens, q.shape[1] - 1)
        return Proposal(tokens.astype(np.int64), q)


@dataclass
class AuditState:
    inner: Any
    appends: list = field(default_factory=list)  # deep copies of every append_context's taps, in order
    proposals: int = 0


class AuditedDraft:
    """Wraps a port's own draft and, at every greedy ``propose``, asks a *fresh* draft state that got the
    very same ``append_context`` calls (and no ``propose``) for the same proposal. A draft whose
    propose leaves something behind in its state (its block's K/V, a moved position) proposes from
    a stale context afterwards: the output stays right (the target verifies) but acceptance drops,
    and no output-level check sees it. ``same_q(a, b)`` compares two proposals' ``q`` rows when their
    tokens differ (the port's tolerance); None (exact profiles) requires equal tokens."""

    def __init__(self, draft, same_q: Callable[[Any, Any], bool] | None = None):
        self.draft = draft
        self.same_q = same_q
        self.problems: list[str] = []
        self.checked = 0

    @property
    def block_size(self) -> "int | None":
        """The wrapped draft's (None when it declares none)."""
        return getattr(self.draft, "block_size", None)

    def new_state(self) -> AuditState:
        return AuditState(self.draft.new_state())

    def append_context(self, state: AuditState, taps) -> None:
        import copy

        state.appends.append(copy.deepcopy(taps))
        self.draft.append_context(state.inner, taps)

    def propose(self, state: AuditState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None):
        import numpy as np

        state.proposals += 1
        if temperature > 0:
            return self.draft.propose(state.inner, anchor_token, n_draft, temperature=temperature, rng=rng)
        # the fresh state's proposal first, copied: a draft may return views of a buffer its next propose()
        # overwrites, and the loop's own proposal, made last, must reach the loop as the draft made it
        fresh = self.draft.new_state()
        for taps in state.appends:
            self.draft.append_context(fresh, taps)
        ref = self.draft.propose(fresh, anchor_token, n_draft, temperature=0.0, rng=None)
        want, ref_q = [int(t) for t in np.asarray(ref.tokens)[:n_draft]], owned(np.asarray(ref.q)[:n_draft])
        out = self.draft.propose(state.inner, anchor_token, n_draft, temperature=temperature, rng=rng)
        got = [int(t) for t in np.asarray(out.tokens)[:n_draft]]
        self.checked += 1
        if got != want and not (self.same_q is not None and self.same_q(np.asarray(out.q)[:n_draft], ref_q)):
            ctx = sum(len(t) for t in state.appends)
            self.problems.append(
                f"proposal {state.proposals} (anchor {anchor_token}, {ctx} context rows from {len(state.appends)} "
                f"append_context calls): the draft proposed {got}, a fresh draft state given the same context "
                f"proposes {want}")
        return out
