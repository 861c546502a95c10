"""Distribution preservation of the port's loop at T > 0 (verification.md section 6).

One speculative round with a :class:`~.drafts.DistributionDraft` (fixed, known q) and k = 1, run
``samples`` times with seeds ``seed, seed+1, ...``. With ``t0`` the prefill's token, ``d`` the draft,
``p1 = p(. | prompt, t0)``, ``alpha(t0) = sum(min(p1, q))``, the exact rule implies:

* t0 ~ p0;  the round's first token x1 | t0 ~ p1 (the first speculative token's marginal);
* accepted | t0 ~ Bernoulli(alpha(t0));
* x1 | t0, rejected ~ normalize(max(0, p1 - q)) - tokens with q >= p1 must never appear;
* the bonus | t0, d accepted ~ p(. | prompt, t0, d).

Then ``samples`` more runs with k = 2 and a draft whose two q rows differ: whatever happened in the
round (d1 rejected, d1 accepted and d2 accepted or rejected), the second token x2 | t0, x1 ~
p(. | prompt, t0, x1). That is the claim for every draft position after the first, where a loop can
pair a draft with the wrong q row, or with the wrong target row, and stay right at k = 1.

Each is a pooled chi-square test at false-alarm rate ``alpha`` (zero-probability bins must be empty);
the k = 2 tokens are also tested along q[1] - q[0] (``stats.directional_fit``), the direction a swapped
q row pushes them, where the chi-square, split over many (t0, x1) contexts, has little power. Every
run's accepted / proposed counts must be possible (``checks._check_bookkeeping``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from .checks import CheckReport, _check_bookkeeping
from .compare import SpecVerifyFailure, owned_outputs
from .drafts import DistributionDraft
from .stats import conditional_fit, directional_fit, softmax


def draft_distribution(vocab: int, seed: int, sharpness: float = 1.5):
    """A fixed q [1, V] with two tokens of probability exactly 0 (never proposed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    q = softmax(sharpness * rng.standard_normal(vocab))
    q[rng.choice(vocab, size=2, replace=False)] = 0.0
    return (q / q.sum())[None, :]


def sampling_distribution(port, prompt: Sequence[int], *, samples: int, seed: int = 0, temperature: float = 1.0,
                          alpha: float = 1e-6, commit_path: str | None = None) -> CheckReport:
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    V = port.vocab_size
    prompt = list(prompt)
    q = draft_distribution(V, seed)
    draft = DistributionDraft(q, seed)
    cache: dict[tuple, np.ndarray] = {}
    # seeded determinism first: the same seed (and a fresh draft) must give the same run
    again = [port.speculative_generate(prompt, DistributionDraft(q, seed), max_new_tokens=8, k=1, temperature=temperature,
                                       seed=seed, commit_path=commit_path) for _ in range(2)]
    if (list(again[0].tokens), list(again[0].accepted)) != (list(again[1].tokens), list(again[1].accepted)):
        raise SpecVerifyFailure(
            f"two runs with seed {seed} at T={temperature} differ: tokens {list(again[0].tokens)} vs "
            f"{list(again[1].tokens)}, accepted {list(again[0].accepted)} vs {list(again[1].accepted)}; the loop "
            f"is not reproducible from its seed (a global or unseeded RNG, or state kept between runs)")

    def p_after(extra: tuple) -> np.ndarray:
        if extra not in cache:
            st = port.new_state()
            cache[extra] = softmax(np.asarray(port.prefill(st, prompt + list(extra)).logits)[-1], temperature)
        return cache[extra]

    t0s, x1 = defaultdict(lambda: np.zeros(V)), defaultdict(lambda: np.zeros(V))
    acc, rej = defaultdict(lambda: np.zeros(2)), defaultdict(lambda: np.zeros(V))
    bonus = defaultdict(lambda: np.zeros(V))
    rounds_seen = 0
    for s in range(samples):
        run = port.speculative_generate(prompt, draft, max_new_tokens=3, k=1, temperature=temperature,
                                        seed=seed + s, commit_path=commit_path)
        toks = list(run.tokens)
        _check_bookkeeping(run, 1)
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
    # k = 2, two different q rows: the second token, whichever way the round produced it
    q2 = np.concatenate([q, draft_distribution(V, seed + 1)])
    draft2 = DistributionDraft(q2, seed)
    x1_k2, x2 = defaultdict(lambda: np.zeros(V)), defaultdict(lambda: np.zeros(V))
    second_drafts = 0
    for s in range(samples):
        run = port.speculative_generate(prompt, draft2, max_new_tokens=4, k=2, temperature=temperature,
                                        seed=seed + samples + s, commit_path=commit_path)  # t0, d1, d2, bonus
        toks = list(run.tokens)
        _check_bookkeeping(run, 2)
        if len(toks) >= 2:
            x1_k2[toks[0]][toks[1]] += 1
        if len(toks) >= 3:
            x2[(toks[0], toks[1])][toks[2]] += 1
            second_drafts += any(n == 2 and a >= 1 for a, n in zip(run.accepted, run.proposed))
    if rounds_seen < samples // 2:
        raise SpecVerifyFailure(f"only {rounds_seen} of {samples} runs recorded a speculative round; the sampling check "
                                f"needs the loop's per-round accepted counts")
    q0 = q[0]
    fits = [conditional_fit("prefill token t0 ~ p0", {None: (t0s[None], p_after(()))}, alpha)]
    fits.append(conditional_fit("round's first token x1 | t0 ~ p(. | t0)",
                                {f"t0={t}": (c, p_after((t,))) for t, c in x1.items()}, alpha))
    acc_groups = {}
    for t, c in acc.items():
        al = float(np.minimum(p_after((t,)), q0).sum())
        acc_groups[f"t0={t}"] = (c, np.array([1 - al, al]))
    fits.append(conditional_fit("accept count | t0 ~ Bernoulli(sum min(p, q))", acc_groups, alpha))
    res_groups = {}
    for t, c in rej.items():
        r = np.maximum(p_after((t,)) - q0, 0.0)
        if r.sum() > 0:
            res_groups[f"t0={t}, rejected"] = (c, r / r.sum())
    fits.append(conditional_fit("token at a rejection ~ normalize(max(0, p - q))", res_groups, alpha))
    fits.append(conditional_fit("bonus after a full accept ~ p(. | t0, d)",
                                {f"t0={t}, d={d}": (c, p_after((t, d))) for (t, d), c in bonus.items() if c.sum() >= 8}, alpha))
    g1 = {f"t0={t}": (c, p_after((t,))) for t, c in x1_k2.items()}
    g2 = {f"t0={t}, x1={u}": (c, p_after((t, u))) for (t, u), c in x2.items()}
    fits.append(conditional_fit("k=2: the first token x1 | t0 ~ p(. | t0)", g1, alpha))
    fits.append(conditional_fit("k=2: the second token x2 | t0, x1 ~ p(. | t0, x1)",
                                {key: v for key, v in g2.items() if v[0].sum() >= 8}, alpha))
    # a draft position paired with the other q row biases its tokens along q[1] - q[0]: test that direction
    # (the chi-square above splits x2 over many contexts and has little power against it)
    tilt = q2[1] - q2[0]
    fits.append(directional_fit("k=2: x1 | t0 along q[1] - q[0]", g1, tilt, alpha))
    fits.append(directional_fit("k=2: x2 | t0, x1 along q[1] - q[0]", g2, tilt, alpha))
    report = CheckReport("sampling_distribution")
    report.counts.update(rounds=rounds_seen, rejections=int(sum(c.sum() for c in rej.values())),
                         full_accepts=int(sum(c[1] for c in acc.values())), second_drafts_reached=second_drafts)
    report.metrics.update({f.label: f.describe().splitlines()[0].split(": ", 1)[1] for f in fits})
    failed = [f for f in fits if not f.passed]
    if failed:
        raise SpecVerifyFailure(
            f"the loop's samples at T={temperature} do not follow the target distribution ({samples} seeded runs from "
            f"seed {seed}, k=1, then {samples} with k=2, false-alarm rate {alpha:g} per test):\n" +
            "\n".join(f.describe() for f in failed))
    for what in ("rejections", "full_accepts", "second_drafts_reached"):
        if report.counts[what] < 20:
            raise SpecVerifyFailure(f"only {report.counts[what]} {what.replace('_', ' ')} in {samples} runs; the check cannot "
                                    f"claim to have tested that path (draft q too close to / too far from p)")
    return report
