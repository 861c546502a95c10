"""Part 3 of the sampling check: every position of every round, in runs of many rounds.

Parts 0-2 judge the first round of a run, so a loop that never rolls its state back after a rejection, or
whose p is off at a later position only, passes them. Here each run makes ``ROUNDS`` rounds of k = 2 with a
draft of the check's own (:class:`RoundDraft`) that knows the committed text and the target's p after it, and
makes two kinds of round (one stir, then five probes):

* *stir* rounds: q = ``controlled_q`` of p at each position (rejections, residuals, full accepts happen);
* *probe* rounds: q = p itself at each position, so a correct loop accepts every draft (min(1, p/q) = 1; a
  rejection only from the port's rounding of p, at most ``null`` a draft), while a loop whose p at that
  position is off by total variation e rejects with probability e: a count test per position (the first
  draft, the later drafts), whatever the round before it did. Its power against the named effect
  (``TV_EFFECT`` = 0.02 at that position) is exact: P(Poisson(0.02 n) >= limit).

The residual after a rejection (stir rounds; q = c p on a seeded half A, so a token of A there has
probability 0, and a residual drawn from p puts about half its draws in A) and the bonus after a full accept
(both kinds) are tested for their distribution given the whole text (pooled chi-square), each stating the
total variation it resolves. Runs are added until the named effects are seen with power ``POWER``, up to a
bound, else the check fails saying what it cannot see.
"""
from __future__ import annotations

import math

from .checks import check_bookkeeping
from .controlled import controlled_q
from .drafts import ContextState, Proposal
from .failure import SpecVerifyFailure
from .owned import release
from .stats import conditional_fit, poisson_sf, softmax

TV_EFFECT = 0.02  # the named effect: p off by this total variation at one position of a round
ROUNDS = 12  # rounds a run: a stir, five probes, a stir, ... (the probes' drafts are what the counts need most)
K = 2
CLASSES = ("first draft", "later drafts")


class RoundDraft:
    """Proposes from q built from the target's p after the committed text (reconstructed from the loop
    contract: the prompt, then each round's committed rows [anchor, d1..da]); every sixth round stirs (the
    first), the other five probe. ``records``: one per proposal (kind, the text through the anchor, drafts,
    q and p rows)."""

    block_size = None  # no fixed block: proposes any number of drafts (the engine's loop reads it)

    def __init__(self, port, prompt, temperature: float, seed: int):
        self.port, self.prompt, self.temperature, self.seed = port, [int(t) for t in prompt], temperature, seed
        self.records: list[dict] = []
        self._last = None
        self.tapless = False  # the port passes no taps: the rows a round committed are not known here
        self._st, self._text = None, None  # the check's own target state and the tokens it has consumed

    def new_state(self) -> ContextState:
        return ContextState()

    def append_context(self, state: ContextState, taps) -> None:
        n = None if taps is None else len(taps)
        self.tapless |= taps is None
        if state.length == 0:
            state.tokens = list(self.prompt)
            state.length = len(self.prompt)
            return
        if self._last is None:  # a plain step: its token is not known here (only at the end of a run)
            state.tokens.append(-1)
            state.length += 1
            return
        anchor, drafts = self._last
        rows = ([anchor] + drafts)[: (n if n is not None else 1 + len(drafts))]
        state.tokens += rows
        state.length += len(rows)
        self._last = None

    def propose(self, state: ContextState, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng=None):
        import numpy as np

        text = tuple(state.tokens) + (int(anchor_token),)
        if -1 in text:
            raise ValueError("RoundDraft: a plain step fed a row whose token it cannot know")
        kind = "probe" if len(self.records) % 6 else "stir"
        # the target's p after the text, then after each draft: single steps on the check's own state, which a
        # fresh prefill rebuilds whenever the round before did not keep everything this state went through
        if self._text == text[:-1]:
            logits = self.port.step(self._st, text[-1]).logits
        else:
            if self._st is not None:
                release(self.port, self._st)  # rebuilt from scratch: the old one is done (a native context each)
            self._st = self.port.new_state()
            logits = self.port.prefill(self._st, list(text)).logits
        st = self._st
        p = softmax(np.asarray(logits, np.float64)[-1], self.temperature)
        drafts, qs, ps = [], [], []
        # every other stir round probes its first position too (q = p there, controlled after it): more
        # first-draft counts for the same rounds, and rollbacks of one kept draft
        probes = set(range(n_draft)) if kind == "probe" else ({0} if len(self.records) % 12 == 6 else set())
        for i in range(n_draft):
            q = p if i in probes else controlled_q(p, self.seed + 7919 * len(self.records) + i)[0]
            tok = min(int(np.searchsorted(np.cumsum(q), rng.random() * q.sum(), side="right")), q.size - 1)
            while q[tok] <= 0:
                tok -= 1
            drafts.append(tok)
            qs.append(q)
            ps.append(p)
            p = softmax(np.asarray(self.port.step(st, tok).logits, np.float64)[-1], self.temperature)
        self.records.append({"kind": kind, "probes": probes, "text": text, "drafts": drafts, "q": qs, "p": ps,
                             "bonus_p": p})
        self._text = text + tuple(drafts)
        self._last = (int(anchor_token), list(drafts))
        return Proposal(np.asarray(drafts, np.int64), np.asarray(qs))


class RoundsPhase:
    """Runs, judges and sizes part 3 for one :class:`~pytest_specverify.sampling_check.SamplingCheck`."""

    def __init__(self, check, null: float):
        self.check, self.null = check, null
        self.trials = {c: 0 for c in CLASSES}
        self.rejected = {c: 0 for c in CLASSES}
        self.after = {}  # (class, what the round before did) -> [trials, rejections]
        self.residual: dict = {}  # group -> (counts, probs)
        self.in_a_mass: list[float] = []  # p(A) of each residual draw: the named effect's power
        self.zero_hits: list[str] = []
        self.bonus: dict = {}
        self.runs = 0
        self.tapless = False

    def batch(self, n_runs: int) -> None:
        __tracebackhide__ = True
        c = self.check
        for s in range(self.runs, self.runs + n_runs):
            draft = RoundDraft(c.port, c.prompt, c.temperature, c.seed + 104729 * s)
            run = c.generate(draft, max_new_tokens=1 + ROUNDS * (K + 1), k=K, seed=c.seed + 3 * MAX_SEED_SPAN + s)
            check_bookkeeping(run, K)
            if draft.tapless:  # its text after a partial accept is a guess: nothing here can be judged
                self.tapless = True
                break
            self.judge(run, draft)
        self.runs += n_runs

    def judge(self, run, draft) -> None:
        __tracebackhide__ = True
        import numpy as np

        tokens, records, prompt = list(run.tokens), iter(draft.records), tuple(self.check.prompt)
        pos, before = 1, "the prefill"
        for a, n in zip(run.accepted, run.proposed):
            if n == 0:
                pos, before = pos + 1, "a zero-draft round"
                continue
            rec = next(records, None)
            if rec is None or rec["text"] != prompt + tuple(tokens[:pos]) or n > len(rec["drafts"]):
                raise SpecVerifyFailure(
                    f"rounds of many (part 3): the loop reports a round of {a} of {n} drafts accepted at output token "
                    f"{pos}, but the draft was asked {len(draft.records)} times and its proposals do not line up with "
                    f"the reported rounds there (anchor, count): the loop's accepted / proposed counts do not describe "
                    f"the rounds it ran")
            for i in sorted(rec["probes"]):
                if i >= min(a + 1, n):
                    break
                cls = CLASSES[min(i, 1)]
                self.trials[cls] += 1
                self.rejected[cls] += i == a
                cell = self.after.setdefault((cls, before), [0, 0])
                cell[0] += 1
                cell[1] += i == a
            if a < n and a not in rec["probes"] and pos + a < len(tokens):
                x, p, q = tokens[pos + a], rec["p"][a], rec["q"][a]
                r = np.maximum(p - q, 0.0)
                in_a = q > p * (1 + 1e-9)  # the controlled half A: q = c p with c > 1
                if in_a[x] and len(self.zero_hits) < 5:
                    self.zero_hits.append(f"token {x} after a rejection at draft position {a + 1} (text of "
                                          f"{len(rec['text'])} tokens): it has probability 0 under normalize(max(0, p - q))")
                self.in_a_mass.append(float(p[in_a].sum()))
                counts = np.zeros(p.size)
                counts[x] = 1
                self.residual[(len(self.residual),)] = (counts, r / r.sum() if r.sum() > 0 else p)
            if a == n and pos + n < len(tokens):
                p = rec["bonus_p"] if n == len(rec["drafts"]) else rec["p"][n]
                counts = np.zeros(p.size)
                counts[tokens[pos + n]] = 1
                self.bonus[(len(self.bonus),)] = (counts, p)
            before = "a rejection" if a < n else "a full accept"
            pos += a + 1

    # -- what the counts can see ----------------------------------------------------------------------
    def limit(self, trials: int) -> int:
        return next(r for r in range(1, 10 * trials + 10) if poisson_sf(r, trials * self.null) < self.check.alpha)

    def power(self, cls: str) -> float:
        return poisson_sf(self.limit(self.trials[cls]), self.trials[cls] * TV_EFFECT) if self.trials[cls] else 0.0

    def residual_power(self) -> float:
        """P(a token of A after a rejection) if the residual were drawn from p itself."""
        return 1.0 - math.exp(sum(math.log(max(1.0 - m, 1e-300)) for m in self.in_a_mass))

    def done(self) -> bool:
        """Nothing more to learn: the named effects are seen with POWER, or the port passes no taps."""
        return self.tapless or min(self.powers().values()) >= POWER_GOAL

    def powers(self) -> dict:
        out = {f"{cls}: p off by TV {TV_EFFECT}": self.power(cls) for cls in CLASSES}
        out["residual after a rejection drawn from p"] = self.residual_power()
        return out

    def verdict(self, report, where: str, power_floor: float) -> None:
        __tracebackhide__ = True
        if self.tapless:
            report.notes.append("part 3 (rounds of many: every position of every round) did not run: the port passes "
                                "no taps, so the check's draft cannot tell how many rows a round committed; rounds "
                                "after the first are not judged (return taps from prefill / verify to enable it)")
            return
        for cls in CLASSES:
            n, r = self.trials[cls], self.rejected[cls]
            lim = self.limit(n) if n else 1
            if r >= lim:
                split = "; ".join(f"after {b}: {c[1]} of {c[0]}" for (k, b), c in sorted(self.after.items()) if k == cls)
                raise SpecVerifyFailure(
                    f"rounds of many (part 3), {cls}: with q = the target's p (the check's probe rounds) a correct loop "
                    f"accepts every draft, but it rejected {r} of {n} (limit {lim}: at most {self.null:.1e} a draft "
                    f"from rounding; by the round before: {split}) ({where}); the loop's p at that position is not the "
                    f"target's: a state not rolled back after a rejection, p of another row or temperature, the q row "
                    f"paired with another draft")
        if self.zero_hits:
            raise SpecVerifyFailure(f"rounds of many (part 3): {self.zero_hits[0]} ({len(self.zero_hits)} such) ({where})")
        fits = [conditional_fit("part 3: token after a rejection ~ normalize(max(0, p - q)) given the text", self.residual,
                                self.check.alpha),
                conditional_fit("part 3: bonus after a full accept ~ p given the text", self.bonus, self.check.alpha)]
        for f in fits:
            report.metrics[f.label] = f.describe().splitlines()[0][len(f.label) + 2:]
            if not f.passed:
                raise SpecVerifyFailure(f"{f.describe()}\n  the loop's samples do not follow the target distribution "
                                        f"({where})")
        for what, pw in self.powers().items():
            report.metrics[f"power: {what}"] = round(pw, 4)
            if pw < power_floor:
                raise SpecVerifyFailure(
                    f"rounds of many (part 3): the check cannot see {what}: power {pw:.3f} < {power_floor} after "
                    f"{self.runs} runs ({self.trials} probe drafts, {len(self.in_a_mass)} residual draws; {where}); raise "
                    f"--specverify-samples")
        report.counts.update(runs_part3=self.runs, probe_drafts=sum(self.trials.values()),
                             residuals_part3=len(self.residual), bonuses_part3=len(self.bonus))


POWER_GOAL = 0.99  # the sampling check's POWER (steering stops there)
MAX_SEED_SPAN = 1_000_000  # part 3's run seeds start past every other part's
