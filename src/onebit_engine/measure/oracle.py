"""An oracle draft: the real draft's whole cost, the target's own tokens at a declared acceptance.

The scale benchmark asks what the loop gives at a model's size when the draft is as good as a named
one. :class:`OracleDraft` runs the real draft every round (its context update, its forward over the
block, its lm_head over the drafted rows and its selector: everything ``Draft.propose`` does) and then
proposes the target's own greedy continuation instead of what the draft said, each token kept with the
profile's probability for its position until the first miss (a miss proposes another token). The loop
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
        raise ConfigError(f"--acceptance {a} must lie in [0, 1] (the chance each draft token is kept)")
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


class OracleDraft:
    """Wraps a real draft (see the module docstring). ``truth``: the target's greedy tokens after the
    prompt (plain decoding's output, at least as long as the loop will emit); misses are seeded by
    position, so every repeat of a run proposes the same tokens."""

    def __init__(self, draft, truth: list[int], prompt_len: int, prof: Profile, vocab: int, seed: int = 0):
        self.inner, self.truth, self.prompt_len, self.profile, self.vocab, self.seed = draft, truth, prompt_len, prof, vocab, seed
        self.config, self.block_size, self.backend = draft.config, draft.block_size, getattr(draft, "backend", None)

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
        toks = np.array((self.truth[i + 1 : i + 1 + n] + [0] * n)[:n], np.int64)
        r = np.random.default_rng([self.seed, i])
        for j in range(n):
            if r.random() >= self.profile.keep[j]:
                toks[j] = (toks[j] + 1) % self.vocab  # a miss: anything but the target's token
                break
        return SimpleNamespace(tokens=toks, q=prop.q)
