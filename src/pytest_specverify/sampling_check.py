"""Distribution preservation of the port's loop at T > 0 (verification.md section 6).

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

from .checks import CheckReport, check_bookkeeping
from .compare import SpecVerifyFailure, owned_outputs
from .drafts import ContextState, DistributionDraft, Proposal
from .stats import conditional_fit, directional_fit, softmax

POWER = 0.99  # the power every named effect must be seen with
MAX_RUNS_FACTOR = 4  # steering: at most this many times the starting runs in each part
AUTO_SAMPLES = 200  # the starting runs when the run does not set --specverify-samples
MIN_PATH = 20  # each path (rejection, full accept, a second draft) must have run this often
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


def _poisson_sf(r: int, mean: float) -> float:
    """P(X >= r) for X ~ Poisson(mean)."""
    import math

    term = cdf = math.exp(-mean)
    for i in range(1, r):
        term *= mean / i
        cdf += term
    return max(0.0, 1.0 - cdf) if r > 0 else 1.0


def sampling_distribution(port, prompt: Sequence[int], *, samples: int | None = None, seed: int = 0,
                          temperature: float = 1.0, alpha: float = 1e-6, commit_path: str | None = None,
                          tol=None) -> CheckReport:
    """``samples``: the runs each part starts with (None: ``AUTO_SAMPLES``); each part adds runs, up to
    ``MAX_RUNS_FACTOR`` times that, until what it must see it sees with power ``POWER``."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import math

    import numpy as np

    samples = AUTO_SAMPLES if samples is None else int(samples)

    V = port.vocab_size
    prompt = list(prompt)
    q = draft_distribution(V, seed)
    cache: dict[tuple, np.ndarray] = {}
    raw: dict[tuple, np.ndarray] = {}

    def logits_after(extra: tuple) -> np.ndarray:
        if extra not in raw:
            raw[extra] = np.asarray(port.prefill(port.new_state(), prompt + list(extra)).logits, np.float64)[-1]
        return raw[extra]

    def p_after(extra: tuple, t: float = temperature) -> np.ndarray:
        if (extra, t) not in cache:
            cache[(extra, t)] = softmax(logits_after(extra), t)
        return cache[(extra, t)]

    def make_draft():
        return ControlledDraft(lambda t0: p_after((t0,)), q, seed)

    # seeded determinism first: the same seed (and a fresh draft) must give the same run
    again = [port.speculative_generate(prompt, make_draft(), max_new_tokens=8, k=1, temperature=temperature,
                                       seed=seed, commit_path=commit_path) for _ in range(2)]
    if (list(again[0].tokens), list(again[0].accepted)) != (list(again[1].tokens), list(again[1].accepted)):
        raise SpecVerifyFailure(
            f"two runs with seed {seed} at T={temperature} differ: tokens {list(again[0].tokens)} vs "
            f"{list(again[1].tokens)}, accepted {list(again[0].accepted)} vs {list(again[1].accepted)}; the loop "
            f"is not reproducible from its seed (a global or unseeded RNG, or state kept between runs)")

    t0s, x1 = defaultdict(lambda: np.zeros(V)), defaultdict(lambda: np.zeros(V))
    acc, rej = defaultdict(lambda: np.zeros(2)), defaultdict(lambda: np.zeros(V))
    bonus = defaultdict(lambda: np.zeros(V))
    runs = rounds_seen = 0

    def run_part1(n_runs: int) -> None:
        nonlocal runs, rounds_seen
        for s in range(runs, runs + n_runs):
            run = port.speculative_generate(prompt, make_draft(), max_new_tokens=3, k=1, temperature=temperature,
                                            seed=seed + s, commit_path=commit_path)
            toks = list(run.tokens)
            check_bookkeeping(run, 1)
            t0s[None][toks[0]] += 1
            if not run.accepted or len(toks) < 2:
                continue
            rounds_seen += 1
            a = run.accepted[0]
            x1[toks[0]][toks[1]] += 1
            acc[toks[0]][a] += 1
            if a == 0:
                rej[toks[0]][toks[1]] += 1
            elif len(toks) >= 3:
                bonus[(toks[0], toks[1])][toks[2]] += 1
        runs += n_runs

    def residual_power() -> float:
        """P(at least one token of A after a rejection) if the residual were drawn from p (named effect)."""
        log_miss = 0.0
        for t, c in rej.items():
            _, in_a = controlled_q(p_after((t,)), seed + t)
            log_miss += c.sum() * math.log(max(1.0 - float(p_after((t,))[in_a].sum()), 1e-300))
        return 1.0 - math.exp(log_miss)

    def temperature_fit():
        groups = {t: (c, p_after((t,))) for t, c in x1.items()}
        score = {t: np.log(np.maximum(p_after((t,), 1.0), 1e-300)) - np.log(np.maximum(p_after((t,)), 1e-300)) for t in x1}
        return directional_fit("round's first token x1 | t0 ~ p(. | t0), along log(p at T=1 / p at T)", groups, score,
                               alpha, alternative={t: p_after((t,), 1.0) for t in x1},
                               effect="p computed at T=1 (temperature left out of p)")

    steer = []
    def temperature_probe() -> dict:
        """Part 0 (T != 1): the draft proposes from q = p at T itself, so a correct loop accepts every
        draft (min(1, p/q) = 1; a rejection only from the port's own rounding of p, at most ``null``
        per run) while a loop whose p leaves the temperature out (p at T = 1) rejects with probability
        TV(p at T = 1, p at T) per run: a count test, sized until its power reaches POWER."""
        label = ("round's first token x1 | t0 ~ p(. | t0): with q = p at T (the check's draft) a correct loop accepts "
                 "every draft")
        atol, rtol = tol.bounds("logits") if tol is not None and not tol.exact else (0.0, 0.0)
        scale = float(np.abs(logits_after(())).max())
        null = max(1e-4, min(0.25, math.expm1(2 * (atol + rtol * scale) / temperature)))
        n = rejected = 0
        bug = 0.0
        while True:
            for s in range(n, n + samples):
                run = port.speculative_generate(prompt, ControlledDraft(lambda t0: p_after((t0,)), q, seed, exact=True),
                                                max_new_tokens=3, k=1, temperature=temperature,
                                                seed=seed + 2 * MAX_RUNS_FACTOR * samples + s, commit_path=commit_path)
                toks = list(run.tokens)
                check_bookkeeping(run, 1)
                if run.accepted and run.proposed[0] == 1:
                    rejected += run.accepted[0] == 0
                    bug += 0.5 * float(np.abs(p_after((toks[0],), 1.0) - p_after((toks[0],))).sum())
            n += samples
            limit = next(r for r in range(1, 10 * n + 2) if _poisson_sf(r, n * null) < alpha)
            power = _poisson_sf(limit, bug)
            if rejected >= limit:
                raise SpecVerifyFailure(
                    f"{label}, but it rejected {rejected} of {n} (limit {limit}: at most {null:.1e} a run from rounding); "
                    f"a loop whose p leaves the temperature out rejects about {bug:.1f} (seeded runs from seed {seed} at "
                    f"T={temperature}): is p computed at T = 1, or is q compared with p at another temperature?")
            if power >= POWER or n >= MAX_RUNS_FACTOR * samples:
                return {"runs": n, "rejected": rejected, "limit": limit, "power": power, "bug_expected": bug}
            steer.append(f"+{samples} part-0 runs for the temperature")

    probe = temperature_probe() if temperature != 1.0 else None
    run_part1(samples)
    while runs < MAX_RUNS_FACTOR * samples:  # steering: more runs until each named effect is seen with POWER
        need = []
        if residual_power() < POWER:
            need.append("residual")
        if not need:
            break
        extra = min(samples, MAX_RUNS_FACTOR * samples - runs)
        steer.append(f"+{extra} runs for {'/'.join(need)}")
        run_part1(extra)
    # k = 2: q[0] controlled (as in part 1), q[1] a fixed row: the second token, whichever way the round made it
    q2 = np.concatenate([q, draft_distribution(V, seed + 1)])
    draft2 = ControlledDraft(lambda t0: p_after((t0,)), q2, seed, second=q2[1])
    x1_k2, x2 = defaultdict(lambda: np.zeros(V)), defaultdict(lambda: np.zeros(V))
    second_drafts = runs2 = 0
    while runs2 < MAX_RUNS_FACTOR * samples and (runs2 == 0 or second_drafts < 2 * MIN_PATH):
        if runs2:
            steer.append(f"+{samples} k=2 runs for second drafts")
        for s in range(runs2, runs2 + samples):  # t0, d1, d2, bonus
            run = port.speculative_generate(prompt, draft2, max_new_tokens=4, k=2, temperature=temperature,
                                            seed=seed + MAX_RUNS_FACTOR * samples + s, commit_path=commit_path)
            toks = list(run.tokens)
            check_bookkeeping(run, 2)
            if len(toks) >= 2:
                x1_k2[toks[0]][toks[1]] += 1
            if len(toks) >= 3:
                x2[(toks[0], toks[1])][toks[2]] += 1
                second_drafts += any(n == 2 and a >= 1 for a, n in zip(run.accepted, run.proposed))
        runs2 += samples
    if rounds_seen < runs // 2:
        raise SpecVerifyFailure(f"only {rounds_seen} of {runs} runs recorded a speculative round; the sampling check "
                                f"needs the loop's per-round accepted counts")
    fits = [conditional_fit("prefill token t0 ~ p0", {None: (t0s[None], p_after(()))}, alpha)]
    fits.append(conditional_fit("round's first token x1 | t0 ~ p(. | t0)",
                                {f"t0={t}": (c, p_after((t,))) for t, c in x1.items()}, alpha))
    acc_groups = {}
    res_groups = {}
    for t, c in acc.items():
        qt, _ = controlled_q(p_after((t,)), seed + t)
        al = float(np.minimum(p_after((t,)), qt).sum())
        acc_groups[f"t0={t}"] = (c, np.array([1 - al, al]))
        r = np.maximum(p_after((t,)) - qt, 0.0)
        if t in rej and r.sum() > 0:
            res_groups[f"t0={t}, rejected"] = (rej[t], r / r.sum())
    fits.append(conditional_fit("accept count | t0 ~ Bernoulli(sum min(p, q))", acc_groups, alpha))
    fits.append(conditional_fit("token at a rejection ~ normalize(max(0, p - q))", res_groups, alpha))
    fits.append(conditional_fit("bonus after a full accept ~ p(. | t0, d)",
                                {f"t0={t}, d={d}": (c, p_after((t, d))) for (t, d), c in bonus.items()}, alpha))
    g1 = {f"t0={t}": (c, p_after((t,))) for t, c in x1_k2.items()}
    g2 = {f"t0={t}, x1={u}": (c, p_after((t, u))) for (t, u), c in x2.items()}
    fits.append(conditional_fit("k=2: the first token x1 | t0 ~ p(. | t0)", g1, alpha))
    fits.append(conditional_fit("k=2: the second token x2 | t0, x1 ~ p(. | t0, x1)", g2, alpha))
    # a draft position paired with the other q row biases its tokens along q[1] - q[0]: test that direction
    # (the chi-square above splits x2 over many contexts and has less power against it)
    tilt = {t: q2[1] - controlled_q(p_after((t,)), seed + t)[0] for t in x1_k2}
    fits.append(directional_fit("k=2: x1 | t0 along q[1] - q[0]", g1, {f"t0={t}": tilt[t] for t in x1_k2}, alpha))
    fits.append(directional_fit("k=2: x2 | t0, x1 along q[1] - q[0]", g2,
                                {f"t0={t}, x1={u}": tilt[t] for (t, u) in x2}, alpha))
    temp = temperature_fit() if temperature != 1.0 else None
    if temp is not None:
        fits.append(temp)
    report = CheckReport("sampling_distribution")
    report.counts.update(runs=runs, runs_k2=runs2, rounds=rounds_seen, rejections=int(sum(c.sum() for c in rej.values())),
                         full_accepts=int(sum(c[1] for c in acc.values())), second_drafts_reached=second_drafts)
    report.metrics.update({f.label: f.describe().splitlines()[0][len(f.label) + 2:] for f in fits})
    res_power = residual_power()
    report.metrics["power: residual drawn from p instead of normalize(max(0, p - q))"] = round(res_power, 4)
    if probe is not None:
        report.metrics["power: temperature left out of p"] = round(probe["power"], 4)
        report.metrics["part 0: q = p at T"] = (f"{probe['rejected']} rejections in {probe['runs']} runs (limit "
                                                f"{probe['limit']}; p at T=1 would give ~{probe['bug_expected']:.1f})")
        report.counts["runs_part0"] = probe["runs"]
    if steer:
        report.notes.append(f"steered for power: {', '.join(steer)}")
    where = (f"{runs} seeded runs from seed {seed} at T={temperature}, k=1, then {runs2} with k=2, false-alarm "
             f"rate {alpha:g} per test")
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
                                f"at T={temperature} are too close on this prompt: use a lower temperature, a prompt whose "
                                f"next-token distribution has more spread, or raise --specverify-samples")
    for what in ("rejections", "full_accepts", "second_drafts_reached"):
        if report.counts[what] < MIN_PATH:
            raise SpecVerifyFailure(f"only {report.counts[what]} {what.replace('_', ' ')} in {runs} runs; the check cannot "
                                    f"claim to have tested that path (draft q too close to / too far from p)")
    return report
