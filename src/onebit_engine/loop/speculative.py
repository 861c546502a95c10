"""The speculative loop: draft k tokens, verify ``[last, d1..dk]`` in one pass, accept, commit, emit.

One round (the seed PR's ``dflash2_probe loop``):

1. the draft proposes ``d1..dn`` from the anchor ``last`` (the previous round's bonus token) and its
   context of committed target taps;
2. the target verifies ``[last, d1..dn]`` in one batched pass; row i's logits score the token after
   row i's token (or in passes, the next only after a full accept of the one before: ``stages.py``);
3. greedy (T = 0): accept the longest prefix with ``d_{i+1} == argmax(logits_i)``; the bonus is
   ``argmax(logits_a)``. Sampled (T > 0): accept ``d_i`` with probability ``min(1, p/q)``; on the first
   rejection draw the bonus from ``normalize(max(0, p - q))``; after a full accept draw it from ``p``;
4. ``commit(a + 1)`` keeps ``last`` and the accepted drafts; the accepted rows' taps go to the draft;
5. emit ``d1..da`` and the bonus (cut at a stop token or at ``max_new_tokens``).

``speculative_round`` is steps 1-4 (no timing, no provenance); ``speculative_generate`` is the driver:
prefill, rounds, step 5, the length limit and stop tokens, the fallback policy, and each round's timing,
measured around the round call. Provenance is the reporting caller's
(``measure.provenance.loop_provenance``).

At T = 0 the output is token-for-token plain greedy decoding of the same build and row set, because
the verify's rows are bitwise single steps (see ``hybrid/model.py``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ..errors import ConfigError, NumericalError
from ..ops.sampling import choose, draw, finite_row, probs
from ..hybrid.commit import COMMIT_PATHS
from .inputs import check_run
from .stages import StagePlanner, planner


class DraftLike(Protocol):
    """What the loop needs of a draft (``onebit_engine.draft.Draft`` or a scripted stand-in).
    ``block_size``: the anchor plus the most drafts one proposal makes (k <= block_size - 1); None for a
    draft with no fixed block (any k >= 1)."""

    block_size: int | None

    def new_state(self) -> Any: ...
    def append_context(self, state: Any, taps: np.ndarray) -> None: ...
    def propose(self, state: Any, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None) -> Any: ...


@dataclass(frozen=True)
class RoundStats:
    """One round: proposed drafts, accepted drafts, tokens emitted (accepted + bonus, cut at a stop
    token or the length limit), and where the time went."""

    proposed: int
    accepted: int
    emitted: int
    draft_ms: float
    verify_ms: float
    commit_ms: float
    passes: tuple[int, ...] = ()  # rows of each verify pass (stages.py); verify_ms covers them all

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.commit_ms


@dataclass
class SpecResult:
    tokens: list[int]
    prompt_tokens: int
    stop_reason: str
    rounds: list[RoundStats]
    prefill_s: float
    decode_s: float
    fallback_at: int | None = None  # index of the first token produced by plain steps after a fallback
    plain_steps: int = 0
    step_ms: float | None = None  # measured plain-step cost, when the fallback needed it
    provenance: dict[str, Any] = field(default_factory=dict)  # empty: the reporting caller fills it (loop_provenance)

    @property
    def tokens_per_s(self) -> float:
        n = max(len(self.tokens) - 1, 0)  # the first token comes from the prefill
        return n / self.decode_s if self.decode_s > 0 else float("nan")

    @property
    def tokens_per_round(self) -> float:
        return float(np.mean([r.emitted for r in self.rounds])) if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        proposed = sum(r.proposed for r in self.rounds)
        return sum(r.accepted for r in self.rounds) / proposed if proposed else 0.0

    def acceptance_by_position(self) -> list[float]:
        """Share of rounds that proposed a draft at position i whose draft i was accepted."""
        n = max((r.proposed for r in self.rounds), default=0)
        out = []
        for i in range(n):
            asked = [r for r in self.rounds if r.proposed > i]
            out.append(sum(r.accepted > i for r in asked) / len(asked))
        return out

    @property
    def full_accepts(self) -> int:
        return sum(r.accepted == r.proposed and r.proposed > 0 for r in self.rounds)

    def summary(self) -> dict[str, Any]:
        return {
            "tokens": len(self.tokens), "rounds": len(self.rounds), "tokens_per_s": self.tokens_per_s,
            "tokens_per_round": self.tokens_per_round, "acceptance_rate": self.acceptance_rate,
            "acceptance_by_position": self.acceptance_by_position(), "fallback_at": self.fallback_at,
            "plain_steps": self.plain_steps, "stop_reason": self.stop_reason,
            "draft_ms_per_round": float(np.mean([r.draft_ms for r in self.rounds])) if self.rounds else 0.0,
            "verify_ms_per_round": float(np.mean([r.verify_ms for r in self.rounds])) if self.rounds else 0.0,
            "commit_ms_per_round": float(np.mean([r.commit_ms for r in self.rounds])) if self.rounds else 0.0,
            "verify_passes_per_round": float(np.mean([len(r.passes) or 1 for r in self.rounds])) if self.rounds else 0.0,
        }


FallbackPolicy = Callable[[Sequence[RoundStats], float], bool]


def below_break_even(rounds: Sequence[RoundStats], step_ms: float, window: int = 3) -> bool:
    """The seed's DFLASH2_FALLBACK rule: the last ``window`` rounds each produced tokens more slowly
    than plain steps would have (round time > emitted x plain-step time)."""
    last = rounds[-window:]
    return len(last) == window and all(r.total_ms > r.emitted * step_ms for r in last)


def greedy_accept(drafts: Sequence[int], logits, final: bool = True) -> tuple[int, "int | None"]:
    """(accepted count a, bonus token) for greedy verification. logits [n+1, V] (an array, or
    :class:`RowLogits`: rows past the first rejection are then never computed). ``final=False``: a pass
    that checks the drafts only (logits [n, V], ``stages.py``); a full accept returns (n, None)."""
    a = 0
    while True:
        if a == len(drafts) and not final:
            return a, None
        top = int(np.argmax(finite_row(logits[a], f"verify row {a}")))
        if a == len(drafts) or int(drafts[a]) != top:
            return a, top
        a += 1


class RowLogits:
    """A verify's logits computed on demand, in blocks of rows (2, then doubling): acceptance reads rows
    in order and stops at the first rejection, so the lm_head of later rows is never run. ``head``
    maps rows [lo, hi) to their logits (``Target.logits`` of the verify's last-layer hidden rows)."""

    def __init__(self, rows: int, head: Callable[[int, int], np.ndarray]):
        self.rows, self.head = rows, head
        self.done: np.ndarray | None = None

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.rows:
            raise IndexError(f"row {i} of a verify of {self.rows} rows")
        have = 0 if self.done is None else len(self.done)
        while i >= have:
            hi = min(self.rows, max(2, 2 * have))
            block = self.head(have, hi)
            self.done = block if self.done is None else np.concatenate([self.done, block])
            have = hi
        return self.done[i]


def sampled_accept(drafts: Sequence[int], q: np.ndarray, logits: np.ndarray, temperature: float, rng: np.random.Generator,
                   final: bool = True) -> tuple[int, "int | None"]:
    """Distribution-preserving acceptance (Leviathan et al. / Chen et al.). q [n, V], logits [n+1, V].
    ``final=False``: as :func:`greedy_accept`; the draws are the ones a single pass makes, in its order."""
    for i, d in enumerate(drafts):
        p = probs(finite_row(logits[i], f"verify row {i}"), temperature)
        qi = np.asarray(q[i], np.float64)
        if rng.random() * qi[d] < p[d]:  # accept with probability min(1, p/q)
            continue
        residual = np.maximum(p - qi, 0.0)
        total = residual.sum()
        return i, draw(residual / total if total > 0 else p, rng)
    if not final:
        return len(drafts), None
    return len(drafts), draw(probs(finite_row(logits[len(drafts)], f"verify row {len(drafts)}"), temperature), rng)


@dataclass(frozen=True)
class Round:
    """What one round did: the ``proposed`` drafts, how many were ``accepted`` and the ``bonus`` token.
    ``tokens`` (accepted drafts + bonus) is what the round emits, before the driver's stop/length cut.
    ``passes``: the rows of each verify pass (one pass of ``proposed + 1`` rows unless staged)."""

    drafts: tuple[int, ...]
    accepted: int
    bonus: int
    passes: tuple[int, ...] = ()

    @property
    def proposed(self) -> int:
        return len(self.drafts)

    @property
    def tokens(self) -> list[int]:
        return list(self.drafts[: self.accepted]) + [self.bonus]


def _no_phase(name: str) -> None:
    pass


def speculative_round(
    target, draft: DraftLike, state, dstate, last: int, n: int, *, temperature: float = 0.0,
    rng: np.random.Generator | None = None, commit_path: str = "keep", replay_check: bool = False,
    label: str = "", phase: Callable[[str], None] = _no_phase, lazy_logits: bool = True,
    stages: "StagePlanner | None" = None,
) -> Round:
    """One round from the anchor ``last``: draft ``n`` tokens, verify ``[last, d1..dn]`` (n + 1 rows),
    accept (greedy at T = 0, rejection sampling at T > 0), ``commit(a + 1)``, append the kept rows' taps
    to the draft's context. No timing: ``phase("draft" | "verify" | "commit")`` is called as each part
    ends (the driver's clock). ``label`` prefixes a NumericalError of the acceptance (where in the run).
    ``lazy_logits``: compute the verify's logits a block of rows at a time, up to the first rejection (pays
    where the lm_head is compute-bound: its weights in the CPU cache); False: every row in one lm_head call
    (pays where its weights stream from memory: one pass over them instead of up to three).
    ``stages``: a :class:`StagePlanner` that splits the verify into passes (``stages.py``: the same output,
    the same draws; a pass that keeps all its drafts is committed inside the "verify" phase and the next
    one starts from there), and that times them; None: one pass."""
    sampling = temperature > 0
    prop = draft.propose(dstate, last, n, temperature=temperature, rng=rng if sampling else None)
    drafts = [int(t) for t in np.asarray(prop.tokens).reshape(-1)[:n]]
    phase("draft")
    # A target that can compute a verify's logits later (``Target.logits``) skips the lm_head of the rows
    # past the first rejection; any other target returns them all from verify.
    lazy = {"logits": False} if lazy_logits and callable(getattr(target, "logits", None)) else {}
    done, bonus, passes, taps = 0, None, [], []
    while bonus is None:
        left = n - done
        rows_n = stages.rows(done, left) if stages is not None else left + 1
        final = rows_n == left + 1
        toks = [last if done == 0 else drafts[done - 1]] + drafts[done: done + rows_n - 1]
        t0 = time.perf_counter()
        ver = target.verify(toks, state, checkpoints=(commit_path == "checkpoint"), **lazy)
        rows = RowLogits(len(toks), lambda lo, hi, h=ver.hidden: target.logits(h[lo:hi, -1])) if lazy else ver.logits
        checked = drafts[done: done + (left if final else rows_n)]
        try:
            if sampling:
                kept, bonus = sampled_accept(checked, prop.q[done:], rows, temperature, rng, final)
            else:
                kept, bonus = greedy_accept(checked, rows, final)
        except NumericalError as e:  # name where in the run it happened (the row numbers are the pass's)
            where = ", ".join(x for x in (label, f"verify pass {len(passes) + 1} (from round row {done})" if done else "") if x)
            if not where:
                raise
            raise NumericalError(f"{where}, {e}") from None
        passes.append(rows_n)
        if bonus is None:  # every draft this pass checked was kept: commit it whole, go on from its last draft
            target.commit(state, rows_n, path=commit_path, replay_check=replay_check)
            taps.append(ver.hidden)
        if stages is not None:
            stages.observe_pass(rows_n, time.perf_counter() - t0)
        done += kept
    phase("verify")
    target.commit(state, kept + 1, path=commit_path, replay_check=replay_check)
    phase("commit")
    taps.append(ver.hidden[: kept + 1])
    draft.append_context(dstate, taps[0] if len(taps) == 1 else np.concatenate(taps))
    if stages is not None:
        stages.observe_round(n, done)
    return Round(tuple(drafts), done, bonus, tuple(passes))


def draft_block_size(draft) -> int:
    """The draft's block size (anchor + drafts per round); 0 for a draft with no fixed block (None)."""
    if not hasattr(draft, "block_size"):
        raise ConfigError(f"the draft ({type(draft).__name__}) has no 'block_size' attribute: the loop's draft protocol "
                          f"needs it (the draft's block, anchor + drafts per round; None for a draft with no fixed block)")
    return int(draft.block_size or 0)


def speculative_generate(
    target, draft: DraftLike, prompt: Sequence[int], *, max_new_tokens: int, k: int | None = None,
    temperature: float = 0.0, fallback: "str | FallbackPolicy | None" = None, commit_path: str = "keep",
    replay_check: bool = False, seed: int | None = None, stop_tokens: Sequence[int] | None = None,
    lazy_logits: bool = True, stages: "str | int | StagePlanner | None" = None,
) -> SpecResult:
    """Speculative decoding of ``max_new_tokens`` tokens. ``k``: drafts per round (default block - 1).

    ``fallback``: None (never), ``"break-even"`` (finish with plain steps once the last 3 rounds were
    slower per token than a measured plain step) or a callable ``(rounds, step_ms) -> bool``.
    ``lazy_logits``: see :func:`speculative_round` (same output either way; only the cost differs).
    ``stages``: the verify's passes (``stages.py``): None or ``"one"`` (one pass of k + 1 rows), ``"auto"``,
    a first-pass row count, or a :class:`StagePlanner` to reuse across runs (same output either way).
    The result's ``provenance`` is left empty: a caller that reports computes it
    (``measure.provenance.loop_provenance``).
    """
    block = draft_block_size(draft)
    max_k = block - 1 if block else None
    k = max_k if k is None else int(k)
    if k is None or k < 1 or (max_k is not None and k > max_k):
        raise ConfigError(f"k={k} is out of range: it must be 1..{max_k} (the draft's block size {block} minus 1)")
    if commit_path not in COMMIT_PATHS:
        raise ConfigError(f"commit_path {commit_path!r} is not one of {COMMIT_PATHS}")
    prompt = check_run(target, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    plan = planner(stages)
    policy = below_break_even if fallback == "break-even" else fallback
    if policy is not None and not callable(policy):
        raise ConfigError(f"fallback {fallback!r} must be None, 'break-even' or a callable (rounds, step_ms) -> bool")
    stops = set(target.config.eos_token_ids if stop_tokens is None else stop_tokens)
    rng = np.random.default_rng(seed)

    state, dstate = target.new_state(), draft.new_state()
    out: list[int] = []
    rounds: list[RoundStats] = []
    res = SpecResult(out, len(prompt), "max_new_tokens", rounds, 0.0, 0.0)
    t0 = time.perf_counter()
    pre = target.forward(prompt, state)
    draft.append_context(dstate, pre.hidden)
    t1 = time.perf_counter()
    res.prefill_s = t1 - t0

    def emit(tokens: Sequence[int]) -> int:
        n = 0
        for t in tokens:
            if len(out) >= max_new_tokens or res.stop_reason == "stop_token":
                break
            out.append(int(t))
            n += 1
            if t in stops:
                res.stop_reason = "stop_token"
        return n

    def done() -> bool:
        return res.stop_reason == "stop_token" or len(out) >= max_new_tokens

    marks: dict[str, float] = {}

    def clock(name: str) -> None:
        marks[name] = time.perf_counter()

    if max_new_tokens > 0:
        emit([choose(finite_row(pre.logits[-1], "token 0 (prefill)"), temperature, rng)])
    if policy is not None and not done():
        res.step_ms = _plain_step_ms(target, state, out[-1])
    while not done():
        last = out[-1]
        n = min(k, max_new_tokens - len(out) - 1)  # the last block shrinks near the end
        if n < 1 or res.fallback_at is not None:
            o = target.forward([last], state)
            draft.append_context(dstate, o.hidden)
            res.plain_steps += 1
            emit([choose(finite_row(o.logits[0], f"token {len(out)} (plain step)"), temperature, rng)])
            continue
        ta = time.perf_counter()
        r = speculative_round(target, draft, state, dstate, last, n, temperature=temperature, rng=rng,
                              commit_path=commit_path, replay_check=replay_check,
                              label=f"round {len(rounds) + 1} (after token {len(out) - 1})", phase=clock,
                              lazy_logits=lazy_logits, stages=plan)
        te = time.perf_counter()
        tb, tc, td = marks["draft"], marks["verify"], marks["commit"]
        emitted = emit(r.tokens)
        rounds.append(RoundStats(r.proposed, r.accepted, emitted, 1e3 * (tb - ta + te - td), 1e3 * (tc - tb), 1e3 * (td - tc),
                                 r.passes))
        if policy is not None and res.fallback_at is None and policy(rounds, res.step_ms or 0.0):
            res.fallback_at = len(out)
    res.decode_s = time.perf_counter() - t1
    return res


def _plain_step_ms(target, state, token: int, repeats: int = 3) -> float:
    """Median cost of one plain step, measured on a scratch copy (the live state is untouched)."""
    times = []
    for _ in range(repeats):
        scratch = state.copy()
        t = time.perf_counter()
        target.forward([token], scratch)
        times.append(1e3 * (time.perf_counter() - t))
    return float(np.median(times))
