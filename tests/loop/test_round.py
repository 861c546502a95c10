"""The loop's round is one function (``speculative_round``); ``speculative_generate`` only drives it.

* rounds run by hand reproduce ``speculative_generate``: the same tokens, per-round counts, target
  state and draft state, greedy and sampled (fixed seed);
* the loop computes no provenance (no git, no NPU probe): the reporting caller does;
* a draft without ``block_size`` is refused with one ConfigError naming it.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from onebit_engine import ConfigError
from onebit_engine.draft import load_draft
from onebit_engine.draft.synthetic import write_synthetic_draft
from onebit_engine.loop import generate as generate_module
from onebit_engine.loop import speculative as spec
from onebit_engine.loop.generate import generate
from onebit_engine.loop.speculative import (
    Round,
    speculative_generate,
    speculative_round,
)
from onebit_engine.measure import provenance
from onebit_engine.ops.sampling import choose, finite_row
from onebit_engine.hybrid.synthetic import random_target, tiny_config

from .stubs import BigramDraft, BigramTarget, ScriptedDraft


def real_pair(tmp_path, seed=1, version=2):
    cfg = tiny_config(vocab_size=64, num_hidden_layers=4, full_attention_interval=2)
    target = random_target(cfg, seed, backend="reference", row_set=8, scale=2.0)
    return target, load_draft(write_synthetic_draft(tmp_path / f"d{seed}", cfg, version=version, seed=seed), target)


def kept_states(monkeypatch, target, draft):
    """Record the states ``speculative_generate`` makes (its own, not returned)."""
    made = []
    for obj in (target, draft):
        orig = obj.new_state
        monkeypatch.setattr(obj, "new_state", lambda orig=orig: made.append(orig()) or made[-1])
    return made


def by_hand(target, draft, prompt, *, max_new_tokens, k, temperature=0.0, seed=None, commit_path="keep"):
    """The driver's loop without stops, fallback or timing, written out with ``speculative_round``."""
    rng = np.random.default_rng(seed)
    state, dstate = target.new_state(), draft.new_state()
    pre = target.forward(prompt, state)
    draft.append_context(dstate, pre.hidden)
    out = [choose(finite_row(pre.logits[-1], "prefill"), temperature, rng)]
    rounds: list[Round] = []
    while len(out) < max_new_tokens:
        n = min(k, max_new_tokens - len(out) - 1)
        if n < 1:
            o = target.forward([out[-1]], state)
            draft.append_context(dstate, o.hidden)
            out.append(choose(finite_row(o.logits[0], "step"), temperature, rng))
            continue
        r = speculative_round(target, draft, state, dstate, out[-1], n, temperature=temperature, rng=rng,
                              commit_path=commit_path)
        assert r.proposed == n and 0 <= r.accepted <= n and r.tokens == list(r.drafts[: r.accepted]) + [r.bonus]
        rounds.append(r)
        out += r.tokens[: max_new_tokens - len(out)]
    return out, rounds, state, dstate


def same_draft_state(a, b) -> bool:
    if hasattr(a, "kt"):
        return a.length == b.length and all(np.array_equal(x[..., : a.length], y[..., : b.length]) for x, y in zip(a.kt, b.kt)) \
            and all(np.array_equal(x[:, : a.length], y[:, : b.length]) for x, y in zip(a.v, b.v))
    return vars(a) == vars(b)


def same_target_state(a, b) -> bool:
    if hasattr(a, "arrays"):
        x, y = a.arrays(), b.arrays()
        return x.keys() == y.keys() and all(np.array_equal(x[n], y[n]) for n in x)
    return vars(a) == vars(b)


def check_rounds_equal_driver(monkeypatch, make, prompt, **kw):
    target, draft = make()
    made = kept_states(monkeypatch, target, draft)
    got = speculative_generate(target, draft, prompt, stop_tokens=[], **kw)
    monkeypatch.undo()
    target2, draft2 = make()
    tokens, rounds, state, dstate = by_hand(target2, draft2, prompt, **kw)
    assert got.tokens == tokens
    assert [(r.proposed, r.accepted) for r in got.rounds] == [(r.proposed, r.accepted) for r in rounds]
    assert same_target_state(made[0], state) and same_draft_state(made[1], dstate)
    return got


@pytest.mark.parametrize("commit_path", ["keep", "checkpoint", "replay"])
def test_rounds_by_hand_equal_the_driver_greedy(monkeypatch, tmp_path, commit_path):
    target, draft = real_pair(tmp_path)
    check_rounds_equal_driver(monkeypatch, lambda: (target, draft), [3, 1, 4, 1, 5], max_new_tokens=23, k=4,
                              commit_path=commit_path)
    # a scripted draft: every accept count 0..k and full accepts, on the real target
    prompt = [2, 7, 1, 8]
    wrong = lambda r: [0, None, 2, 1, None, 3][r % 6]  # noqa: E731
    got = check_rounds_equal_driver(
        monkeypatch, lambda: (target, ScriptedDraft(target, prompt, 30, block_size=5, wrong_at=wrong)), prompt,
        max_new_tokens=30, k=4, commit_path=commit_path)
    assert {r.accepted for r in got.rounds} >= {0, 1, 2, 3, 4}
    assert got.tokens == generate(target, prompt, max_new_tokens=30).tokens


@pytest.mark.parametrize("seed", [0, 7])
def test_rounds_by_hand_equal_the_driver_sampled(monkeypatch, tmp_path, seed):
    target, draft = real_pair(tmp_path, version=1)
    check_rounds_equal_driver(monkeypatch, lambda: (target, draft), [9, 2, 6], max_new_tokens=20, k=3,
                              temperature=0.8, seed=seed)
    rng = np.random.default_rng(5)
    P, Q = rng.dirichlet(np.ones(6), size=6), rng.dirichlet(np.ones(6), size=6)
    got = check_rounds_equal_driver(monkeypatch, lambda: (BigramTarget(P), BigramDraft(Q, block_size=4)), [0],
                                    max_new_tokens=40, k=3, temperature=1.0, seed=seed)
    assert len({r.accepted for r in got.rounds}) > 1  # rejections and accepts both happened


def test_the_loop_runs_no_provenance(monkeypatch, tmp_path):
    target, draft = real_pair(tmp_path)
    want = speculative_generate(target, draft, [1, 2, 3], max_new_tokens=12, k=3).tokens

    def refuse(*a, **kw):
        raise AssertionError("the loop ran provenance (git / the NPU probe)")

    for mod in (provenance, spec, generate_module):  # wherever a name may have been imported
        for name in ("run_provenance", "device_provenance", "git_revision"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    got = speculative_generate(target, draft, [1, 2, 3], max_new_tokens=12, k=3, fallback="break-even")
    plain = generate(target, [1, 2, 3], max_new_tokens=12)
    assert got.tokens == want and got.provenance == {} and plain.provenance == {}


class NoBlockDraft:
    """A draft that speaks propose / append_context / new_state but declares no block size."""

    def new_state(self):
        return None

    def append_context(self, state, taps):
        pass

    def propose(self, state, anchor, n, *, temperature=0.0, rng=None):
        from types import SimpleNamespace

        return SimpleNamespace(tokens=np.arange(1, n + 1), q=np.full((n, 64), 1 / 64))


def test_a_draft_without_block_size_is_refused(tmp_path):
    target, draft = real_pair(tmp_path)
    assert draft.block_size == draft.config.block_size
    with pytest.raises(ConfigError, match=r"the draft \(NoBlockDraft\) has no 'block_size' attribute"):
        speculative_generate(target, NoBlockDraft(), [1, 2, 3], max_new_tokens=8, k=2)
    unbounded = NoBlockDraft()
    unbounded.block_size = None  # no fixed block: any k
    got = speculative_generate(target, unbounded, [1, 2, 3], max_new_tokens=12, k=9)
    assert got.tokens == generate(target, [1, 2, 3], max_new_tokens=12).tokens
