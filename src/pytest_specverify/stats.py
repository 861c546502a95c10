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


def normal_power(shift: float, limit: float) -> float:
    """Power of a two-sided z-test at critical value ``limit`` when the statistic's mean is ``shift``."""
    nd = NormalDist()
    return nd.cdf(abs(shift) - limit) + nd.cdf(-abs(shift) - limit)


@dataclass
class FitResult:
    """A pooled chi-square: ``df`` degrees of freedom (0 = it could not test anything: ``vacuous``),
    ``tv`` the observed total variation over the bins it tested, ``tv_resolvable`` the total variation
    it detects about half the time (``sqrt((critical - df) / 4n)``, since chi-square >= 4 TV^2)."""

    label: str
    n: int
    stat: float = 0.0
    df: int = 0
    critical: float = 0.0
    zero_hits: list[tuple[str, int, int]] = field(default_factory=list)  # (group, token, count)
    worst: list[tuple[str, int, int, float]] = field(default_factory=list)  # (group, token, observed, expected)
    tv: float = 0.0
    tv_resolvable: float = 0.0

    @property
    def vacuous(self) -> bool:
        return self.n > 0 and self.df == 0 and not self.zero_hits

    @property
    def passed(self) -> bool:
        return not self.zero_hits and self.stat <= self.critical

    def describe(self) -> str:
        if self.df == 0:
            head = f"{self.label}: no degrees of freedom (n = {self.n}): it cannot see any difference"
        else:
            head = (f"{self.label}: chi-square {self.stat:.1f} on {self.df} df (limit {self.critical:.1f}), n = {self.n}, "
                    f"TV resolvable {self.tv_resolvable:.3f}, observed {self.tv:.3f}")
        lines = [head]
        for g, tok, c in self.zero_hits[:5]:
            lines.append(f"  token {tok}{g} has probability 0 but was emitted {c} times")
        if self.stat > self.critical:
            for g, tok, o, e in self.worst[:5]:
                lines.append(f"  token {tok}{g}: observed {o}, expected {e:.1f}")
        return "\n".join(lines)


MIN_EXPECTED = 5.0


def _chunks(exp):
    """Token indices (sorted by expected count, largest first) cut into chunks of expected >= 5 each;
    a short tail joins the last chunk."""
    import numpy as np

    order = np.argsort(-exp, kind="stable")
    chunks, cur, acc = [], [], 0.0
    for t in order:
        if exp[t] <= 0:
            continue
        cur.append(int(t))
        acc += float(exp[t])
        if acc >= MIN_EXPECTED:
            chunks.append(cur)
            cur, acc = [], 0.0
    if cur:
        if chunks:
            chunks[-1] += cur
        else:
            chunks.append(cur)
    return chunks


def conditional_fit(label: str, groups: dict, alpha: float, *, pool_small: bool = True) -> FitResult:
    """Pooled chi-square over independent groups: ``groups[key] = (counts[V], probs[V])``, counts drawn
    from ``probs`` given the group. Within a group, tokens are merged (largest expected first) into
    bins of expected >= 5; groups too small for two such bins are pooled together through the
    randomized probability integral transform (each draw becomes a uniform u on [0, 1] under the
    null, tokens ordered by probability), so many small contexts still test something
    (``pool_small=False``: they are left out, the old behaviour). Zero-probability bins must stay empty."""
    import numpy as np

    res = FitResult(label, 0)
    contrib = []
    tv_num = 0.0
    pit: list[float] = []
    urng = np.random.default_rng(0x5EC)
    for key, (counts, p) in groups.items():
        counts, p = np.asarray(counts, np.float64), np.asarray(p, np.float64)
        n = counts.sum()
        if n == 0:
            continue
        res.n += int(n)
        g = "" if key is None else f" (given {key})"
        for tok in np.flatnonzero((p <= 0) & (counts > 0)):
            res.zero_hits.append((g, int(tok), int(counts[tok])))
        exp = n * p / p.sum() if p.sum() > 0 else n * p
        chunks = _chunks(exp)
        if len(chunks) < 2:
            if pool_small and p.sum() > 0:
                order = np.argsort(-p, kind="stable")
                cdf = np.concatenate([[0.0], np.cumsum(p[order] / p.sum())])
                rank = np.empty(len(p), np.int64)
                rank[order] = np.arange(len(p))
                for tok in np.flatnonzero(counts > 0):
                    lo, width = cdf[rank[tok]], cdf[rank[tok] + 1] - cdf[rank[tok]]
                    pit.extend((lo + urng.random(int(counts[tok])) * width).tolist())
            continue
        o = np.array([counts[c].sum() for c in chunks])
        e = np.array([exp[c].sum() for c in chunks])
        o[-1] += n - o.sum()  # tokens outside every chunk (probability 0) land in the last one; zero_hits names them
        res.stat += float(((o - e) ** 2 / e).sum())
        res.df += len(e) - 1
        tv_num += 0.5 * float(np.abs(o - e).sum())
        for tok in np.flatnonzero(exp >= MIN_EXPECTED):
            contrib.append(((counts[tok] - exp[tok]) ** 2 / exp[tok], g, int(tok), int(counts[tok]), float(exp[tok])))
    if len(pit) >= 2 * MIN_EXPECTED:
        bins = int(max(2, min(20, len(pit) // (2 * MIN_EXPECTED))))
        o = np.bincount(np.minimum((np.asarray(pit) * bins).astype(np.int64), bins - 1), minlength=bins).astype(np.float64)
        e = np.full(bins, len(pit) / bins)
        res.stat += float(((o - e) ** 2 / e).sum())
        res.df += bins - 1
        tv_num += 0.5 * float(np.abs(o - e).sum())
        for b in np.argsort(-np.abs(o - e))[:3]:
            contrib.append(((o[b] - e[b]) ** 2 / e[b], f" (small contexts pooled, probability-ranked bin {b + 1} of {bins})",
                            -1, int(o[b]), float(e[b])))
    res.critical = chi2_critical(res.df, alpha) if res.df else math.inf
    res.worst = [(g, t, o, e) for _, g, t, o, e in sorted(contrib, key=lambda c: -c[0])]
    res.tv = tv_num / res.n if res.n else 0.0
    res.tv_resolvable = math.sqrt(max(res.critical - res.df, 1.0) / (4 * res.n)) if res.df and res.n else math.inf
    return res


@dataclass
class DirectionResult:
    """A z-test of one direction: does the mean of ``g(token)`` match its expectation under each group's
    probs? Far more power than the chi-square against a bias known to lie along ``g``."""

    label: str
    n: int
    z: float
    limit: float
    effect: str = ""  # the named effect the power is computed against
    power: float | None = None

    @property
    def passed(self) -> bool:
        return abs(self.z) <= self.limit

    def describe(self) -> str:
        seen = f", power {self.power:.3f} against {self.effect}" if self.power is not None else ""
        return f"{self.label}: z = {self.z:.2f} (two-sided limit {self.limit:.2f}), n = {self.n}{seen}"


def directional_fit(label: str, groups: dict, g, alpha: float, *, alternative: dict | None = None,
                    effect: str = "") -> DirectionResult:
    """``groups[key] = (counts[V], probs[V])`` as in :func:`conditional_fit`; ``g`` [V] a fixed score per
    token, or a dict ``key -> g`` (a score per group). z = sum over tokens drawn of (g - E_probs g) /
    sqrt(sum of Var_probs g): N(0, 1) when every group's tokens follow its probs. ``alternative[key]``:
    the probs a named bug (``effect``) would draw from; the result then carries the test's power
    against it (at the observed group sizes)."""
    import numpy as np

    dev = var = shift = 0.0
    n = 0
    for key, (counts, p) in groups.items():
        gk = np.asarray(g[key] if isinstance(g, dict) else g, np.float64)
        counts, p = np.asarray(counts, np.float64), np.asarray(p, np.float64)
        m = float(counts.sum())
        if m == 0:
            continue
        mean = float(p @ gk)
        dev += float(counts @ gk) - m * mean
        var += m * max(float(p @ (gk * gk)) - mean * mean, 0.0)
        if alternative is not None and key in alternative:
            shift += m * (float(np.asarray(alternative[key], np.float64) @ gk) - mean)
        n += int(m)
    z = dev / math.sqrt(var) if var > 0 else 0.0
    limit = NormalDist().inv_cdf(1 - alpha / 2)
    power = None
    if alternative is not None:
        power = normal_power(shift / math.sqrt(var), limit) if var > 0 else 0.0
    return DirectionResult(label, n, z, limit, effect, power)


def poisson_sf(r: int, mean: float) -> float:
    """P(X >= r) for X ~ Poisson(mean)."""
    term = cdf = math.exp(-mean)
    for i in range(1, r):
        term *= mean / i
        cdf += term
    return max(0.0, 1.0 - cdf) if r > 0 else 1.0
