"""At T = 0 the loop's output is token-for-token plain greedy decoding of the same build and row set."""
import numpy as np
import pytest

from onebit_engine import ConfigError, COMMIT_PATHS
from onebit_engine.draft import load_draft
from onebit_engine.draft.synthetic import write_synthetic_draft
from onebit_engine.loop.generate import generate
from onebit_engine.gemm import available_backends, get_backend
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.measure.provenance import loop_provenance
from onebit_engine.hybrid.synthetic import random_target, tiny_config

from .stubs import ScriptedDraft

EXACT = [b for b in available_backends() if get_backend(b).exact]
PAIRS = [(seed, version) for seed in range(4) for version in (1, 2)]
COUNTS = {"prompts": 0, "pairs": 0}


def pair(tmp_path, seed, version, backend="reference", **draft_kw):
    cfg = tiny_config(vocab_size=64 + 8 * seed, num_hidden_layers=4 + seed % 2, full_attention_interval=2 + seed % 3)
    target = random_target(cfg, seed, backend=backend, row_set=8, scale=2.0)
    folder = write_synthetic_draft(tmp_path / f"d{seed}{version}", cfg, version=version, seed=seed, **draft_kw)
    return target, load_draft(folder, target)


@pytest.mark.parametrize("seed,version", PAIRS)
def test_real_draft_loop_equals_plain_greedy(tmp_path, seed, version):
    target, draft = pair(tmp_path, seed, version)
    rng = np.random.default_rng(seed)
    for i in range(4):
        prompt = rng.integers(0, target.config.vocab_size, int(rng.integers(1, 30))).tolist()
        n = int(rng.integers(1, 40))
        want = generate(target, prompt, max_new_tokens=n).tokens
        for path in COMMIT_PATHS:
            k = int(rng.integers(1, draft.config.block_size))
            got = speculative_generate(target, draft, prompt, max_new_tokens=n, k=k, commit_path=path, replay_check=True)
            assert got.tokens == want, f"prompt {prompt} k={k} path={path}"
            assert sum(r.emitted for r in got.rounds) + got.plain_steps + 1 == len(want)


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("path", COMMIT_PATHS)
def test_forced_every_accept_count(backend, path):
    """A scripted draft makes round r fail at position r % (k+1): every count 0..k, and full accepts."""
    target = random_target(tiny_config(), 5, backend=backend, scale=2.0)
    k = 5
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    draft = ScriptedDraft(target, prompt, 60, block_size=k + 1, wrong_at=lambda r: r % (k + 1))
    got = speculative_generate(target, draft, prompt, max_new_tokens=60, k=k, commit_path=path, replay_check=True)
    assert got.tokens == generate(target, prompt, max_new_tokens=60).tokens
    seen = {r.accepted for r in got.rounds}
    assert seen == set(range(k + 1)), seen  # 0..k-1 partial and k = full accept all ran
    assert got.full_accepts > 0
    # the draft's context grows by exactly accepted + 1 rows per round (the anchor and the accepted drafts)
    assert draft.contexts[1:] == [r.accepted + 1 for r in got.rounds][: len(draft.contexts) - 1]


@pytest.mark.parametrize("pattern", ["all", "none"])
def test_forced_all_or_nothing(pattern):
    target = random_target(tiny_config(), 6, scale=2.0)
    prompt = [7, 7, 2]
    draft = ScriptedDraft(target, prompt, 50, block_size=8, wrong_at=(lambda r: None) if pattern == "all" else (lambda r: 0))
    got = speculative_generate(target, draft, prompt, max_new_tokens=50)
    assert got.tokens == generate(target, prompt, max_new_tokens=50).tokens
    if pattern == "all":
        assert got.acceptance_rate == 1.0 and got.tokens_per_round > 6
    else:
        assert got.acceptance_rate == 0.0 and got.tokens_per_round == 1.0


@pytest.mark.parametrize("max_new", [0, 1, 2, 3, 7, 8, 9, 17])
def test_length_limit_shrinks_last_block(max_new):
    target = random_target(tiny_config(), 2, scale=2.0)
    prompt = [1, 2, 3]
    draft = ScriptedDraft(target, prompt, 40, block_size=8)
    got = speculative_generate(target, draft, prompt, max_new_tokens=max_new, k=7)
    assert got.tokens == generate(target, prompt, max_new_tokens=max_new).tokens
    assert len(got.tokens) == max_new
    assert all(r.emitted == r.accepted + 1 for r in got.rounds)  # never proposes past the end


def test_stop_token_cuts_exactly_like_plain():
    target = random_target(tiny_config(), 9, scale=2.0)
    prompt = [5, 6, 7]
    plain = generate(target, prompt, max_new_tokens=40).tokens
    stop = plain[13]
    want = plain[: plain.index(stop) + 1]
    draft = ScriptedDraft(target, prompt, 40, block_size=8)
    got = speculative_generate(target, draft, prompt, max_new_tokens=40, stop_tokens=[stop])
    assert got.tokens == want == generate(target, prompt, max_new_tokens=40, stop_tokens=[stop]).tokens
    assert got.stop_reason == "stop_token"


def test_fallback_finishes_with_plain_steps(tmp_path):
    target, draft = pair(tmp_path, 1, 2)
    prompt = [4, 8, 15, 16, 23, 42]
    always = lambda rounds, step_ms: len(rounds) >= 3  # noqa: E731
    got = speculative_generate(target, draft, prompt, max_new_tokens=30, k=3, fallback=always)
    assert got.tokens == generate(target, prompt, max_new_tokens=30).tokens
    assert len(got.rounds) == 3 and got.plain_steps > 0 and got.fallback_at == 1 + sum(r.emitted for r in got.rounds)
    timed = speculative_generate(target, draft, prompt, max_new_tokens=30, k=3, fallback="break-even")
    assert timed.tokens == got.tokens and timed.step_ms > 0


def test_result_and_provenance(tmp_path):
    target, draft = pair(tmp_path, 0, 2)
    got = speculative_generate(target, draft, [1, 2, 3], max_new_tokens=20, k=4, commit_path="replay")
    s = got.summary()
    assert s["tokens"] == 20 and s["rounds"] == len(got.rounds)
    assert got.provenance == {}  # the loop computes none; the reporting caller does
    prov = loop_provenance(target, draft, k=4, commit_path="replay")
    for key in ("engine_version", "git_revision", "backend", "row_set", "kernel_set", "commit_path", "k"):
        assert key in prov
    assert prov["commit_path"] == "replay" and prov["k"] == 4 and prov["mode"] == "speculative"
    assert all(r.draft_ms >= 0 and r.verify_ms > 0 and r.commit_ms >= 0 for r in got.rounds)


def test_bad_arguments(tmp_path):
    target, draft = pair(tmp_path, 0, 1)
    with pytest.raises(ConfigError, match="k=6 is out of range: it must be 1..5"):
        speculative_generate(target, draft, [1], max_new_tokens=4, k=6)
    with pytest.raises(ConfigError, match="k=0"):
        speculative_generate(target, draft, [1], max_new_tokens=4, k=0)
    with pytest.raises(ConfigError, match="commit_path"):
        speculative_generate(target, draft, [1], max_new_tokens=4, commit_path="fast")
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(target, draft, [], max_new_tokens=4)
