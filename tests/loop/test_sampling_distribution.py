"""Distribution preservation at T > 0, tested the strong way: the acceptance rule of Leviathan et al.
(arXiv 2211.17192) and Chen et al. (arXiv 2302.01318), docs/loop.md "Acceptance rules", must give the
target's own law.

A bigram target P and a bigram draft Q make the exact law of the loop's output computable. Many seeded
runs are compared with it by chi-square tests. Each check's false-alarm rate is ALPHA = 1e-4 (cells with
an expected count below 5 are pooled); seeds are fixed, so a run is deterministic. A zero-probability
token must never be emitted. The same harness run with a broken acceptance rule must fail (power).
"""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.loop import speculative as spec
from onebit_engine.loop.speculative import speculative_generate

from .stubs import BigramDraft, BigramTarget

stats = pytest.importorskip("scipy.stats")

ALPHA = 1e-4
V, K, RUNS, NEW = 6, 3, 6000, 5  # NEW = K + 2: round 1 proposes all K drafts
ZERO_TOKEN = 5  # the target never emits it; the draft proposes it often


def chain():
    rng = np.random.default_rng(1234)
    P = rng.dirichlet(np.ones(V), size=V)
    P[:, ZERO_TOKEN] = 0.0
    P[np.arange(V), (np.arange(V) + 2) % V] = 0.0  # more structural zeros
    P /= P.sum(1, keepdims=True)
    Q = rng.dirichlet(np.ones(V) * 0.7, size=V)
    Q[:, ZERO_TOKEN] += 0.3
    Q /= Q.sum(1, keepdims=True)
    return P, Q


def run_many(P, Q, runs=RUNS):
    target, draft = BigramTarget(P), BigramDraft(Q, block_size=K + 1)
    seqs, first_round = [], []
    for seed in range(runs):
        r = speculative_generate(target, draft, [0], max_new_tokens=NEW, k=K, temperature=1.0, seed=seed)
        seqs.append(r.tokens)
        first_round.append(r.rounds[0].accepted)
    return np.array(seqs), np.array(first_round)


def chi2_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    """Pearson chi-square with cells of expected count < 5 pooled; zero-expectation cells must be empty."""
    counts, expected = counts.ravel().astype(float), expected.ravel().astype(float)
    assert counts[expected == 0].sum() == 0, "a zero-probability outcome was observed"
    small = expected < 5
    c = np.append(counts[~small], counts[small].sum())
    e = np.append(expected[~small], expected[small].sum())
    keep = e > 0
    c, e = c[keep], e[keep]
    stat = float(((c - e) ** 2 / e).sum())
    return float(stats.chi2.sf(stat, df=max(len(c) - 1, 1)))


def law(P, Q):
    """Exact laws: joint of (t0, t1), marginal of t3, accept count of round 1, residual given a=0."""
    p0 = P[0]
    joint01 = p0[:, None] * P
    t3 = p0 @ P @ P @ P
    M = np.minimum(P, Q)  # P(draft accepted and equal to y | prev x)
    ge = [np.ones(V)] + [np.linalg.matrix_power(M, j).sum(1) for j in range(1, K + 1)]
    accept = [p0 @ (ge[j] - ge[j + 1]) for j in range(K)] + [p0 @ ge[K]]
    resid = np.maximum(P - Q, 0)
    resid = resid / resid.sum(1, keepdims=True)
    return joint01, t3, np.array(accept), resid


def checks(seqs, first, P, Q):
    joint01, t3, accept, resid = law(P, Q)
    n = len(seqs)
    obs01 = np.zeros((V, V))
    np.add.at(obs01, (seqs[:, 0], seqs[:, 1]), 1)
    out = {
        "first speculative token (t0, t1)": chi2_pvalue(obs01, n * joint01),
        "marginal of t3": chi2_pvalue(np.bincount(seqs[:, 3], minlength=V), n * t3),
        "accept count of round 1": chi2_pvalue(np.bincount(first, minlength=K + 1), n * accept),
    }
    a0 = first == 0
    x = np.bincount(seqs[a0, 0], minlength=V).argmax()  # most frequent anchor among rejections
    sel = a0 & (seqs[:, 0] == x)
    out["residual at a rejection"] = chi2_pvalue(np.bincount(seqs[sel, 1], minlength=V), sel.sum() * resid[x])
    return out


@pytest.fixture(scope="module")
def sampled():
    P, Q = chain()
    seqs, first = run_many(P, Q)
    return P, Q, seqs, first


def test_output_follows_target_distribution(sampled):
    P, Q, seqs, first = sampled
    pvals = checks(seqs, first, P, Q)
    print({k: f"{v:.3g}" for k, v in pvals.items()})
    assert all(v > ALPHA for v in pvals.values()), pvals


def test_zero_probability_tokens_never_emitted(sampled):
    P, Q, seqs, first = sampled
    assert not np.any(seqs == ZERO_TOKEN)
    pairs = np.stack([seqs[:, :-1].ravel(), seqs[:, 1:].ravel()])
    assert np.all(P[pairs[0], pairs[1]] > 0)


def test_accept_rate_is_far_from_trivial(sampled):
    _, _, _, first = sampled
    counts = np.bincount(first, minlength=K + 1)
    assert counts.min() > 100  # every accept count, including a full accept, was exercised


@pytest.mark.parametrize("mutant", ["residual_is_p", "accept_always", "residual_unclipped"])
def test_checks_have_power(monkeypatch, mutant):
    """A wrong acceptance rule must be caught by these checks (so they cannot pass vacuously)."""
    real = spec.sampled_accept

    def broken(drafts, q, logits, temperature, rng, final=True):
        if mutant == "accept_always":
            if not final:
                return len(drafts), None
            return len(drafts), spec.draw(spec.probs(logits[len(drafts)], temperature), rng)
        for i, d in enumerate(drafts):
            p = spec.probs(logits[i], temperature)
            if rng.random() * q[i][d] < p[d]:
                continue
            r = p if mutant == "residual_is_p" else np.abs(p - q[i])
            return i, spec.draw(r / r.sum(), rng)
        return real(drafts, q, logits, temperature, rng, final)

    monkeypatch.setattr(spec, "sampled_accept", broken)
    P, Q = chain()
    seqs, first = run_many(P, Q, runs=3000)
    try:
        pvals = checks(seqs, first, P, Q)
    except AssertionError:
        return  # a zero-probability outcome was emitted: caught
    assert min(pvals.values()) < ALPHA, pvals


def test_real_pair_first_speculative_token(tmp_path):
    """The hybrid target and a real DFlash draft at T = 0.8: t1 | t0 follows the target's p."""
    from onebit_engine.draft import load_draft
    from onebit_engine.draft.synthetic import write_synthetic_draft
    from onebit_engine.ops.sampling import probs
    from onebit_engine.hybrid.synthetic import random_target, tiny_config

    cfg = tiny_config(vocab_size=8)
    target = random_target(cfg, 4, scale=0.7)
    draft = load_draft(write_synthetic_draft(tmp_path / "d", cfg, version=1, seed=4), target)
    prompt, T, n = [1, 2], 0.8, 1500
    toks = np.array([speculative_generate(target, draft, prompt, max_new_tokens=2, k=2, temperature=T, seed=s).tokens for s in range(n)])
    p0 = probs(target.forward(prompt, target.new_state()).logits[-1], T)
    expected = np.stack([p0[a] * probs(target.forward(prompt + [a], target.new_state()).logits[-1], T) for a in range(8)])
    obs = np.zeros((8, 8))
    np.add.at(obs, (toks[:, 0], toks[:, 1]), 1)
    assert chi2_pvalue(obs, n * expected) > ALPHA
