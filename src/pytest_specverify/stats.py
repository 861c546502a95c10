"""Goodness-of-fit for the sampling checks (numpy + the standard library; no scipy).

A test at false-alarm rate ``alpha`` fails a *correct* port with probability about ``alpha``; with
fixed seeds the outcome is deterministic, so a run never flakes, and a nightly unseeded sweep
(``--specverify-seed`` varied) is what measures seed luck.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist


def softmax(logits, temperature: float = 1.0):
    import numpy as np

    z = np.asarray(logits, np.float64) / float(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(logits):
    """log(softmax(logits)) over the last axis, in float64, without underflowing small probabilities."""
    import numpy as np

    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def chi2_critical(df: int, alpha: float) -> float:
    """Upper-``alpha`` quantile of chi-square(df): exact for df = 1, Wilson-Hilferty otherwise
    (relative error well under 1% for df >= 3 at alpha = 1e-6)."""
    z = NormalDist().inv_cdf(1.0 - alpha)
    if df <= 1:
        return NormalDist().inv_cdf(1.0 - alpha / 2) ** 2
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def tv_bound(bins: int, n: int, delta: float) -> float:
    """Bretagnolle-Huber-Carol: P(TV(empirical, p) > bound) <= delta for n draws over ``bins`` bins."""
    return math.sqrt((bins * math.log(2) + math.log(1 / delta)) / 2) / math.sqrt(n)


@dataclass
class FitResult:
    label: str
    n: int
    stat: float = 0.0
    df: int = 0
    critical: float = 0.0
    zero_hits: list[tuple[str, int, int]] = field(default_factory=list)  # (group, token, count)
    worst: list[tuple[str, int, int, float]] = field(default_factory=list)  # (group, token, observed, expected)
    tv: float = 0.0
    tv_limit: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.zero_hits and self.stat <= self.critical

    def describe(self) -> str:
        head = (f"{self.label}: chi-square {self.stat:.1f} on {self.df} df (limit {self.critical:.1f}), "
                f"n = {self.n}, TV {self.tv:.4f} (bound {self.tv_limit:.4f})")
        lines = [head]
        for g, tok, c in self.zero_hits[:5]:
            lines.append(f"  token {tok}{g} has probability 0 but was emitted {c} times")
        if self.stat > self.critical:
            for g, tok, o, e in self.worst[:5]:
                lines.append(f"  token {tok}{g}: observed {o}, expected {e:.1f}")
        return "\n".join(lines)


def conditional_fit(label: str, groups: dict, alpha: float) -> FitResult:
    """Pooled chi-square over independent groups: ``groups[key] = (counts[V], probs[V])``, counts drawn
    from ``probs`` given the group. Bins with expected < 5 are merged per group; zero-probability bins
    must stay empty."""
    import numpy as np

    res = FitResult(label, 0)
    contrib = []
    tv_num = 0.0
    for key, (counts, p) in groups.items():
        counts, p = np.asarray(counts, np.float64), np.asarray(p, np.float64)
        n = counts.sum()
        if n == 0:
            continue
        res.n += int(n)
        g = "" if key is None else f" (given {key})"
        for tok in np.flatnonzero((p <= 0) & (counts > 0)):
            res.zero_hits.append((g, int(tok), int(counts[tok])))
        exp = n * p
        tv_num += 0.5 * float(np.abs(counts - exp).sum())
        big = exp >= 5
        obs_b, exp_b = list(counts[big]), list(exp[big])
        if (~big).any() and exp[~big].sum() > 0:
            obs_b.append(counts[~big].sum())
            exp_b.append(exp[~big].sum())
        if len(exp_b) < 2:
            continue
        o, e = np.asarray(obs_b), np.asarray(exp_b)
        res.stat += float(((o - e) ** 2 / e).sum())
        res.df += len(e) - 1
        for tok in np.flatnonzero(big):
            contrib.append(((counts[tok] - exp[tok]) ** 2 / exp[tok], g, int(tok), int(counts[tok]), float(exp[tok])))
    res.critical = chi2_critical(res.df, alpha) if res.df else math.inf
    res.worst = [(g, t, o, e) for _, g, t, o, e in sorted(contrib, reverse=True)]
    res.tv = tv_num / res.n if res.n else 0.0
    vocab = max((len(p) for _, p in groups.values()), default=1)
    res.tv_limit = tv_bound(vocab, res.n, alpha) if res.n else math.inf
    return res


@dataclass
class DirectionResult:
    """A z-test of one direction: does the mean of ``g(token)`` match its expectation under each group's
    probs? Far more power than the chi-square against a bias known to lie along ``g``."""

    label: str
    n: int
    z: float
    limit: float

    @property
    def passed(self) -> bool:
        return abs(self.z) <= self.limit

    def describe(self) -> str:
        return f"{self.label}: z = {self.z:.2f} (two-sided limit {self.limit:.2f}), n = {self.n}"


def directional_fit(label: str, groups: dict, g, alpha: float) -> DirectionResult:
    """``groups[key] = (counts[V], probs[V])`` as in :func:`conditional_fit`; ``g`` [V] a fixed score per
    token. z = sum over tokens drawn of (g - E_probs g) / sqrt(sum of Var_probs g): N(0, 1) when every
    group's tokens follow its probs."""
    import numpy as np

    g = np.asarray(g, np.float64)
    dev = var = 0.0
    n = 0
    for counts, p in groups.values():
        counts, p = np.asarray(counts, np.float64), np.asarray(p, np.float64)
        m = float(counts.sum())
        if m == 0:
            continue
        mean = float(p @ g)
        dev += float(counts @ g) - m * mean
        var += m * max(float(p @ (g * g)) - mean * mean, 0.0)
        n += int(m)
    z = dev / math.sqrt(var) if var > 0 else 0.0
    return DirectionResult(label, n, z, NormalDist().inv_cdf(1 - alpha / 2))
