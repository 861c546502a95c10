"""Distribution preservation of the port's loop at T > 0 (the rule of Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", and Chen et al. 2023: min(1, p/q) acceptance, the residual max(0, p - q)).

Part 1: ``samples`` runs of one speculative round with k = 1 (seeds ``seed, seed+1, ...``) and a draft
of the check's own whose q is *built from the target's p*: for the prefill's token ``t0`` it takes
``p1 = p(. | prompt, t0)``, splits the vocabulary (seeded) into a half A holding about half of p1's mass
and the rest B, and proposes from ``q = c_A p1`` on A, ``0.25 p1`` on B (``controlled_q``). So the
check knows, exactly, what a correct loop's round must produce:

* t0 ~ p0;  the round's first token x1 | t0 ~ p1;  accepted | t0 ~ Bernoulli(alpha(t0)), alpha = sum min(p1, q);
* x1 | t0, rejected ~ normalize(max(0, p1 - q)) = p1 restricted to B: a token of A after a rejection is
  a zero-probability hit, and a residual drawn from p1 instead (the named effect, total variation
  p1(A) ~ 1/2 from the truth) puts half its rejections there; the run's power against it is computed
  and must reach ``POWER`` (more runs are made, up to ``MAX_RUNS_FACTOR`` x samples, until it does);
* at T != 1, x1 | t0 is also tested along log(p at T = 1 / p at T): the direction a temperature left
  out of p pushes it (the named effect: a loop using p at T = 1 emits x1 ~ p at T = 1); its power is
  computed and steered the same way;
* the bonus | t0, d accepted ~ p(. | prompt, t0, d).

Part 2: ``samples`` runs with k = 2, q[0] controlled as in part 1 and q[1] a fixed row: whatever happened in
the round, the second token x2 | t0, x1 ~ p(. | prompt, t0, x1) - the claim for every draft position
after the first, where a loop can pair a draft with the wrong q row and stay right at k = 1; also
tested along q[1] - q[0] (``stats.directional_fit``), the direction a swapped q row pushes it.

Every chi-square has degrees of freedom by construction (small contexts are pooled, ``stats.
conditional_fit``) and says what it could resolve ("TV resolvable 0.05, observed 0.01"); one without
any fails. Every run's accepted / proposed counts must be possible (``checks.check_bookkeeping``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from .checks import check_bookkeeping
from .failure import SpecVerifyFailure
from .owned import owned_outputs
from .report import CheckReport
from .controlled import ControlledDraft, controlled_q, draft_distribution
from .sampling_rounds import RoundsPhase
from .stats import conditional_fit, directional_fit, poisson_sf, softmax

POWER = 0.99  # the power every named effect must be seen with
MAX_RUNS_FACTOR = 4  # steering: at most this many times the starting runs in each part
AUTO_SAMPLES = 200  # the starting runs when the run does not set --specverify-samples
MIN_PATH = 20  # each path (rejection, full accept, a second draft) must have run this often
def sampling_distribution(port, prompt: Sequence[int], *, samples: int | None = None, seed: int = 0,
                          temperature: float = 1.0, alpha: float = 1e-6, commit_path: str | None = None,
                          tol=None) -> CheckReport:
    """``samples``: the runs each part starts with (None: ``AUTO_SAMPLES``); each part adds runs, up to
    ``MAX_RUNS_FACTOR`` times that, until what it must see it sees with power ``POWER``."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    return SamplingCheck(port, prompt, samples=samples, seed=seed, temperature=temperature, alpha=alpha,
                         commit_path=commit_path, tol=tol).run()


class SamplingCheck:
    """The check's phases, one method each: :meth:`determinism`, :meth:`temperature_probe` (part 0, T != 1),
    :meth:`part1` steered by :meth:`residual_power`, :meth:`part2`, then :meth:`fits` and :meth:`verdict`."""

    def __init__(self, port, prompt: Sequence[int], *, samples: int | None, seed: int, temperature: float,
                 alpha: float, commit_path: str | None, tol):
        import numpy as np

        self.port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
        self.prompt = list(prompt)
        self.samples = AUTO_SAMPLES if samples is None else int(samples)
        self.seed, self.temperature, self.alpha, self.commit_path, self.tol = seed, temperature, alpha, commit_path, tol
        self.V = self.port.vocab_size
        self.q = draft_distribution(self.V, seed)
        self._p: dict[tuple, np.ndarray] = {}
        self._logits: dict[tuple, np.ndarray] = {}
        self.steer: list[str] = []
        zeros = lambda: np.zeros(self.V)  # noqa: E731
        self.t0s, self.x1, self.rej, self.bonus = defaultdict(zeros), defaultdict(zeros), defaultdict(zeros), defaultdict(zeros)
        self.acc = defaultdict(lambda: np.zeros(2))
        self.runs = self.rounds_seen = 0
        self.x1_k2, self.x2 = defaultdict(zeros), defaultdict(zeros)
        self.second_drafts = self.runs2 = 0
        self.probe = None

    # -- the target's distributions after the prompt -----------------------------------------------
    def logits_after(self, extra: tuple):
        import numpy as np

        if extra not in self._logits:
            rows = self.port.prefill(self.port.new_state(), self.prompt + list(extra)).logits
            self._logits[extra] = np.asarray(rows, np.float64)[-1]
        return self._logits[extra]

    def p_after(self, extra: tuple, t: float | None = None):
        t = self.temperature if t is None else t
        if (extra, t) not in self._p:
            self._p[(extra, t)] = softmax(self.logits_after(extra), t)
        return self._p[(extra, t)]

    def draft(self, q=None, second=None, exact: bool = False) -> "ControlledDraft":
        return ControlledDraft(lambda t0: self.p_after((t0,)), self.q if q is None else q, self.seed, second=second,
                               exact=exact)

    def generate(self, draft, *, max_new_tokens: int, k: int, seed: int):
        return self.port.speculative_generate(self.prompt, draft, max_new_tokens=max_new_tokens, k=k,
                                              temperature=self.temperature, seed=seed, commit_path=self.commit_path)

    # -- phases ------------------------------------------------------------------------------------
    def determinism(self) -> None:
        """The same seed (and a fresh draft) must give the same run."""
        __tracebackhide__ = True
        again = [self.generate(self.draft(), max_new_tokens=8, k=1, seed=self.seed) for _ in range(2)]
        if (list(again[0].tokens), list(again[0].accepted)) != (list(again[1].tokens), list(again[1].accepted)):
            raise SpecVerifyFailure(
                f"two runs with seed {self.seed} at T={self.temperature} differ: tokens {list(again[0].tokens)} vs "
                f"{list(again[1].tokens)}, accepted {list(again[0].accepted)} vs {list(again[1].accepted)}; the loop "
                f"is not reproducible from its seed (a global or unseeded RNG, or state kept between runs)")

    def part1(self, n_runs: int) -> None:
        """k = 1, one round: t0, x1 and the accept count, the token at a rejection, the bonus."""
        __tracebackhide__ = True
        for s in range(self.runs, self.runs + n_runs):
            run = self.generate(self.draft(), max_new_tokens=3, k=1, seed=self.seed + s)
            toks = list(run.tokens)
            check_bookkeeping(run, 1)
            self.t0s[None][toks[0]] += 1
            if not run.accepted or len(toks) < 2:
                continue
            self.rounds_seen += 1
            a = run.accepted[0]
            self.x1[toks[0]][toks[1]] += 1
            self.acc[toks[0]][a] += 1
            if a == 0:
                self.rej[toks[0]][toks[1]] += 1
            elif len(toks) >= 3:
                self.bonus[(toks[0], toks[1])][toks[2]] += 1
        self.runs += n_runs

    def residual_power(self) -> float:
        """P(at least one token of A after a rejection) if the residual were drawn from p (named effect)."""
        import math

        log_miss = 0.0
        for t, c in self.rej.items():
            _, in_a = controlled_q(self.p_after((t,)), self.seed + t)
            log_miss += c.sum() * math.log(max(1.0 - float(self.p_after((t,))[in_a].sum()), 1e-300))
        return 1.0 - math.exp(log_miss)

    def steer_part1(self) -> None:
        """More part-1 runs until the residual's named effect is seen with POWER (up to the bound)."""
        cap = MAX_RUNS_FACTOR * self.samples
        while self.runs < cap and self.residual_power() < POWER:
            extra = min(self.samples, cap - self.runs)
            self.steer.append(f"+{extra} runs for residual")
            self.part1(extra)

    def rounding_null(self) -> float:
        """The most a draft drawn from q = p is rejected by a correct loop, from the rounding the port's profile
        allows between its verify rows and the prefill the check computes p from (at least 1e-4): logits off by at
        most d = atol + rtol |logit| each, both ways, give TV <= tanh(d / T)."""
        import math

        import numpy as np

        tol = self.tol
        atol, rtol = tol.bounds("logits") if tol is not None and not tol.exact else (0.0, 0.0)
        scale = float(np.abs(self.logits_after(())).max())
        # logits each within d of the truth move p by at most TV tanh(d / 2) (the worst: half the mass up by d,
        # half down by d); at temperature T the logits are divided by T
        return max(1e-4, min(0.25, math.tanh((atol + rtol * scale) / self.temperature)))

    def part3(self) -> None:
        """Runs of many rounds (``sampling_rounds``), added until its named effects are seen with POWER."""
        __tracebackhide__ = True
        self.rounds = RoundsPhase(self, self.rounding_null())
        first, step, cap = max(self.samples // 8, 10), max(self.samples // 40, 5), self.samples * MAX_RUNS_FACTOR // 2
        self.rounds.batch(first)
        while self.rounds.runs < cap and not self.rounds.done():  # small steps: each run costs ~12 rounds
            self.steer.append(f"+{step} part-3 runs")
            self.rounds.batch(min(step, cap - self.rounds.runs))

    def temperature_probe(self) -> dict:
        """Part 0 (T != 1): the draft proposes from q = p at T itself, so a correct loop accepts every
        draft (min(1, p/q) = 1; a rejection only from the port's own rounding of p, at most ``null``
        per run) while a loop whose p leaves the temperature out (p at T = 1) rejects with probability
        TV(p at T = 1, p at T) per run: a count test, sized until its power reaches POWER."""
        __tracebackhide__ = True

        import numpy as np

        label = ("round's first token x1 | t0 ~ p(. | t0): with q = p at T (the check's draft) a correct loop accepts "
                 "every draft")
        T, samples = self.temperature, self.samples
        null = self.rounding_null()
        n = rejected = 0
        bug = 0.0
        while True:
            for s in range(n, n + samples):
                run = self.generate(self.draft(exact=True), max_new_tokens=3, k=1,
                                    seed=self.seed + 2 * MAX_RUNS_FACTOR * samples + s)
                toks = list(run.tokens)
                check_bookkeeping(run, 1)
                if run.accepted and run.proposed[0] == 1:
                    rejected += run.accepted[0] == 0
                    bug += 0.5 * float(np.abs(self.p_after((toks[0],), 1.0) - self.p_after((toks[0],))).sum())
            n += samples
            limit = next(r for r in range(1, 10 * n + 2) if poisson_sf(r, n * null) < self.alpha)
            power = poisson_sf(limit, bug)
            if rejected >= limit:
                raise SpecVerifyFailure(
                    f"{label}, but it rejected {rejected} of {n} (limit {limit}: at most {null:.1e} a run from rounding); "
                    f"a loop whose p leaves the temperature out rejects about {bug:.1f} (seeded runs from seed {self.seed} "
                    f"at T={T}): is p computed at T = 1, or is q compared with p at another temperature?")
            if power >= POWER or n >= MAX_RUNS_FACTOR * samples:
                return {"runs": n, "rejected": rejected, "limit": limit, "power": power, "bug_expected": bug}
            self.steer.append(f"+{samples} part-0 runs for the temperature")

    def part2(self) -> None:
        """k = 2: q[0] controlled (as in part 1), q[1] a fixed row: the second token, whichever way the round
        made it."""
        __tracebackhide__ = True
        import numpy as np

        self.q2 = np.concatenate([self.q, draft_distribution(self.V, self.seed + 1)])
        draft2 = self.draft(q=self.q2, second=self.q2[1])
        samples = self.samples
        while self.runs2 < MAX_RUNS_FACTOR * samples and (self.runs2 == 0 or self.second_drafts < 2 * MIN_PATH):
            if self.runs2:
                self.steer.append(f"+{samples} k=2 runs for second drafts")
            for s in range(self.runs2, self.runs2 + samples):  # t0, d1, d2, bonus
                run = self.generate(draft2, max_new_tokens=4, k=2, seed=self.seed + MAX_RUNS_FACTOR * samples + s)
                toks = list(run.tokens)
                check_bookkeeping(run, 2)
                if len(toks) >= 2:
                    self.x1_k2[toks[0]][toks[1]] += 1
                if len(toks) >= 3:
                    self.x2[(toks[0], toks[1])][toks[2]] += 1
                    self.second_drafts += any(n == 2 and a >= 1 for a, n in zip(run.accepted, run.proposed))
            self.runs2 += samples

    def fits(self) -> list:
        """Every sub-test, on what the parts counted."""
        import numpy as np

        p_after, seed, alpha = self.p_after, self.seed, self.alpha
        fits = [conditional_fit("prefill token t0 ~ p0", {None: (self.t0s[None], p_after(()))}, alpha)]
        fits.append(conditional_fit("round's first token x1 | t0 ~ p(. | t0)",
                                    {f"t0={t}": (c, p_after((t,))) for t, c in self.x1.items()}, alpha))
        acc_groups, res_groups = {}, {}
        for t, c in self.acc.items():
            qt, _ = controlled_q(p_after((t,)), seed + t)
            al = float(np.minimum(p_after((t,)), qt).sum())
            acc_groups[f"t0={t}"] = (c, np.array([1 - al, al]))
            r = np.maximum(p_after((t,)) - qt, 0.0)
            if t in self.rej and r.sum() > 0:
                res_groups[f"t0={t}, rejected"] = (self.rej[t], r / r.sum())
        fits.append(conditional_fit("accept count | t0 ~ Bernoulli(sum min(p, q))", acc_groups, alpha))
        fits.append(conditional_fit("token at a rejection ~ normalize(max(0, p - q))", res_groups, alpha))
        fits.append(conditional_fit("bonus after a full accept ~ p(. | t0, d)",
                                    {f"t0={t}, d={d}": (c, p_after((t, d))) for (t, d), c in self.bonus.items()}, alpha))
        g1 = {f"t0={t}": (c, p_after((t,))) for t, c in self.x1_k2.items()}
        g2 = {f"t0={t}, x1={u}": (c, p_after((t, u))) for (t, u), c in self.x2.items()}
        fits.append(conditional_fit("k=2: the first token x1 | t0 ~ p(. | t0)", g1, alpha))
        fits.append(conditional_fit("k=2: the second token x2 | t0, x1 ~ p(. | t0, x1)", g2, alpha))
        # a draft position paired with the other q row biases its tokens along q[1] - q[0]: test that direction
        # (the chi-square above splits x2 over many contexts and has less power against it)
        tilt = {t: self.q2[1] - controlled_q(p_after((t,)), seed + t)[0] for t in self.x1_k2}
        fits.append(directional_fit("k=2: x1 | t0 along q[1] - q[0]", g1, {f"t0={t}": tilt[t] for t in self.x1_k2}, alpha))
        fits.append(directional_fit("k=2: x2 | t0, x1 along q[1] - q[0]", g2,
                                    {f"t0={t}, x1={u}": tilt[t] for (t, u) in self.x2}, alpha))
        if self.temperature != 1.0:
            fits.append(self.temperature_fit())
        return fits

    def temperature_fit(self):
        import numpy as np

        p_after = self.p_after
        groups = {t: (c, p_after((t,))) for t, c in self.x1.items()}
        score = {t: np.log(np.maximum(p_after((t,), 1.0), 1e-300)) - np.log(np.maximum(p_after((t,)), 1e-300))
                 for t in self.x1}
        return directional_fit("round's first token x1 | t0 ~ p(. | t0), along log(p at T=1 / p at T)", groups, score,
                               self.alpha, alternative={t: p_after((t,), 1.0) for t in self.x1},
                               effect="p computed at T=1 (temperature left out of p)")

    def run(self) -> CheckReport:
        __tracebackhide__ = True
        self.determinism()
        self.probe = self.temperature_probe() if self.temperature != 1.0 else None
        self.part1(self.samples)
        self.steer_part1()
        self.part2()
        self.part3()
        if self.rounds_seen < self.runs // 2:
            raise SpecVerifyFailure(f"only {self.rounds_seen} of {self.runs} runs recorded a speculative round; the "
                                    f"sampling check needs the loop's per-round accepted counts")
        return self.verdict(self.fits())

    def verdict(self, fits) -> CheckReport:
        """The report, or the first failed sub-test, the first vacuous one, or what the check could not see."""
        __tracebackhide__ = True
        probe, runs = self.probe, self.runs
        report = CheckReport("sampling_distribution")
        report.counts.update(runs=runs, runs_k2=self.runs2, rounds=self.rounds_seen,
                             rejections=int(sum(c.sum() for c in self.rej.values())),
                             full_accepts=int(sum(c[1] for c in self.acc.values())), second_drafts_reached=self.second_drafts)
        report.metrics.update({f.label: f.describe().splitlines()[0][len(f.label) + 2:] for f in fits})
        res_power = self.residual_power()
        report.metrics["power: residual drawn from p instead of normalize(max(0, p - q))"] = round(res_power, 4)
        if probe is not None:
            report.metrics["power: temperature left out of p"] = round(probe["power"], 4)
            report.metrics["part 0: q = p at T"] = (f"{probe['rejected']} rejections in {probe['runs']} runs (limit "
                                                    f"{probe['limit']}; p at T=1 would give ~{probe['bug_expected']:.1f})")
            report.counts["runs_part0"] = probe["runs"]
        if self.steer:
            report.notes.append(f"steered for power: {', '.join(self.steer)}")
        where = (f"{runs} seeded runs from seed {self.seed} at T={self.temperature}, k=1, then {self.runs2} with k=2, "
                 f"false-alarm rate {self.alpha:g} per test")
        failed = [f for f in fits if not f.passed]
        if failed:
            first = failed[0].describe().splitlines()
            raise SpecVerifyFailure(
                f"{first[0]}\n  the loop's samples do not follow the target distribution ({where})\n" +
                "\n".join(["\n".join(first[1:])] + [f.describe() for f in failed[1:]]).strip("\n"))
        vacuous = [f for f in fits if getattr(f, "vacuous", False)]
        if vacuous:
            raise SpecVerifyFailure(f"{vacuous[0].describe()}; a sub-test with no degrees of freedom would pass any loop "
                                    f"({where}): raise --specverify-samples or use a prompt with more spread")
        if res_power < POWER:
            raise SpecVerifyFailure(f"the residual test cannot see a residual drawn from p instead of normalize(max(0, p - q)): "
                                    f"power {res_power:.3f} < {POWER} after {runs} runs ({where}); raise --specverify-samples")
        if probe is not None and probe["power"] < POWER:
            raise SpecVerifyFailure(f"round's first token x1 | t0 ~ p(. | t0): the check cannot see a temperature left out of "
                                    f"p: power {probe['power']:.3f} < {POWER} after {probe['runs']} runs with q = p at T (a loop "
                                    f"using p at T=1 would reject ~{probe['bug_expected']:.1f} of them; {where}); p at T=1 and "
                                    f"at T={self.temperature} are too close on this prompt: use a lower temperature, a prompt "
                                    f"whose next-token distribution has more spread, or raise --specverify-samples")
        self.rounds.verdict(report, where, POWER)
        for what in ("rejections", "full_accepts", "second_drafts_reached"):
            if report.counts[what] < MIN_PATH:
                raise SpecVerifyFailure(f"only {report.counts[what]} {what.replace('_', ' ')} in {runs} runs; the check cannot "
                                        f"claim to have tested that path (draft q too close to / too far from p)")
        return report
