"""An oracle draft: the real draft's whole cost, the target's own tokens at a declared acceptance.

The scale benchmark asks what the loop gives at a model's size when the draft is as good as a named
one. :class:`OracleDraft` runs the real draft every round (its context update, its forward over the
block, its lm_head over the drafted rows and its selector: everything ``Draft.propose`` does) and then
proposes the target's own greedy continuation instead of what the draft said, each token kept with the
profile's probability for its position until the first miss (a miss proposes another token); a round's
count of kept drafts is drawn by inverse CDF from a Weyl sequence, one number a round, so a run of a
dozen rounds already averages what the profile says. The loop
verifies as always, so its output must still equal plain greedy decoding, which the benchmark checks.

Profiles (:func:`profile`), as per-position probabilities ``c[i]`` that draft ``i + 1`` is kept given
that the ones before it were:

* a number ``a``: every position ``a`` (tokens per round ``1 + a + ... + a^k``);
* ``seed``: every draft kept (the seed PR's loop: 6 of 6 rounds fully accepted);
* ``pair``: the built-in 2.6M-parameter pair's measured profile on held-out code and prose
  (``data/builtin/EVAL_NUMPY_HOST_INT.json``: about 2.1 tokens per round at k = 7; a weak draft, for contrast);
* ``published``: the tau a shape's draft's model card reports, as the constant ``a`` that gives it at the
  published block (Qwen3.8-27B-DFlash2: tau 5.46 at block 8, so a = 0.879 at k = 7).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ..errors import ConfigError

PAIR_EVAL = Path(__file__).resolve().parents[1] / "data" / "builtin" / "EVAL_NUMPY_HOST_INT.json"


@dataclass(frozen=True)
class Profile:
    """``keep[i]``: P(draft i + 1 kept | drafts 1..i kept), for i = 0..k-1; ``name`` says where it came from."""

    name: str
    keep: tuple[float, ...]

    def expected_tokens(self) -> float:
        """Mean tokens a round emits (accepted drafts + the bonus)."""
        alive, total = 1.0, 1.0
        for c in self.keep:
            alive *= c
            total += alive
        return total


def profile(spec: str, k: int, *, published_tau: "float | None" = None, block: "int | None" = None) -> Profile:
    """The profile named by ``spec`` (a number in [0, 1], ``seed``, ``pair`` or ``published``) for k drafts."""
    if spec == "seed":
        return Profile("seed (every draft kept)", (1.0,) * k)
    if spec == "pair":
        return Profile("pair (the built-in pair's held-out code + prose profile)", _pair_keep(k))
    if spec == "published":
        if published_tau is None or block is None:
            raise ConfigError("--acceptance published: this shape has no published draft tau (only qwen3.6-27b's "
                              "Qwen3.8-27B-DFlash2 reports one); give a number such as 0.8, or seed or pair")
        a = constant_for_tau(published_tau, block - 1)
        return Profile(f"published (tau {published_tau} at block {block}: a = {a:.4f})", (a,) * k)
    try:
        a = float(spec)
    except ValueError:
        raise ConfigError(f"--acceptance {spec!r} is not a number in [0, 1], seed, pair or published") from None
    if not 0.0 <= a <= 1.0:
        raise ConfigError(f"--acceptance {spec.strip()!r} must lie in [0, 1] (the chance each draft token is kept)")
    a += 0.0  # -0.0 -> 0.0: the label reads "0 per token"
    return Profile(f"{a:g} per token", (a,) * k)


def constant_for_tau(tau: float, k: int) -> float:
    """The a in [0, 1] with 1 + a + ... + a^k = tau (bisection; tau in [1, k + 1])."""
    if not 1.0 <= tau <= k + 1:
        raise ConfigError(f"tau {tau} is outside [1, {k + 1}], what k = {k} drafts per round can give")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(k + 1)) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _pair_keep(k: int) -> tuple[float, ...]:
    """Conditional keep rates from the shipped evaluation: rounds pooled over its kinds, at the smallest
    evaluated k >= the asked k (positions past the evaluated ones: 0)."""
    doc = json.loads(PAIR_EVAL.read_text())
    ks = sorted(int(x) for x in next(iter(doc["kinds"].values()))["by_k"])
    use = str(next((x for x in ks if x >= k), ks[-1]))
    rounds = sum(kind["by_k"][use]["rounds"] for kind in doc["kinds"].values())
    surv = np.zeros(int(use))  # P(accepted > i), pooled over rounds
    for kind in doc["kinds"].values():
        e = kind["by_k"][use]
        surv += np.asarray(e["acceptance_by_position"]) * e["rounds"] / rounds
    prev, keep = 1.0, []
    for i in range(k):
        s = float(surv[i]) if i < len(surv) else 0.0
        keep.append(s / prev if prev > 0 else 0.0)
        prev = s
    return tuple(keep)


def weyl(r: int, seed: int = 0) -> float:
    """Round r's number in [0, 1): the golden-ratio (Weyl) sequence from a seeded start. Spread evenly, so the
    accept counts drawn from it average to the profile's mean within a few rounds (independent draws of a
    ten-round run scatter by +-20%)."""
    return (0.5 + seed * 0.1234567 + r * 0.6180339887498949) % 1.0


def accepted_count(keep, u: float) -> int:
    """How many drafts a round keeps, by the inverse CDF at u: the largest m with P(at least m kept) =
    keep[0] x ... x keep[m-1] > u."""
    alive, m = 1.0, 0
    for c in keep:
        alive *= c
        if alive <= u:
            break
        m += 1
    return m


class OracleDraft:
    """Wraps a real draft (see the module docstring). ``truth``: the target's greedy tokens after the
    prompt (plain decoding's output, at least as long as the loop will emit). A round's accept count is
    drawn from one number of a Weyl sequence over the run's rounds, so every repeat of a run proposes the
    same tokens and even a short run keeps, on average, what the profile says."""

    def __init__(self, draft, truth: list[int], prompt_len: int, prof: Profile, vocab: int, seed: int = 0):
        self.inner, self.truth, self.prompt_len, self.profile, self.vocab, self.seed = draft, truth, prompt_len, prof, vocab, seed
        self.config, self.block_size, self.backend = draft.config, draft.block_size, getattr(draft, "backend", None)
        self.round = 0

    def new_state(self):
        return self.inner.new_state()

    def append_context(self, state, taps) -> None:
        self.inner.append_context(state, taps)

    def propose(self, state, anchor: int, n: int, *, temperature: float = 0.0, rng=None):
        prop = self.inner.propose(state, anchor, n)  # the whole cost of the real draft
        i = state.length - self.prompt_len  # the anchor's index in the generated tokens
        if not 0 <= i < len(self.truth) or self.truth[i] != anchor:
            raise ConfigError(f"the oracle's truth does not hold the anchor at generated token {i}: the loop left plain "
                              f"greedy decoding, or the truth is too short ({len(self.truth)} tokens)")
        self.round = 0 if i == 0 else self.round + 1  # a run's first round proposes after generated token 0
        toks = np.array((self.truth[i + 1 : i + 1 + n] + [0] * n)[:n], np.int64)
        kept = accepted_count(self.profile.keep[:n], weyl(self.round, self.seed))
        if kept < n:
            toks[kept] = (toks[kept] + 1) % self.vocab  # the first miss: anything but the target's token
        return SimpleNamespace(tokens=toks, q=prop.q)
