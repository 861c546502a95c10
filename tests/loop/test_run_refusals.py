"""What no run may do: emit a token chosen from non-finite logits, or run past the model's context."""
import dataclasses

import numpy as np
import pytest

from onebit_engine import ConfigError, ContextLimitError, NumericalError
from onebit_engine.loop.generate import generate
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.hybrid.synthetic import random_target, tiny_config

from .stubs import ScriptedDraft


@pytest.fixture(scope="module")
def target():
    return random_target(tiny_config(), 3)


class NanAfter:
    """The target, except that its logits turn NaN from the ``n``-th forward / verify on (counting from 0)."""

    def __init__(self, target, n: int, value=np.nan):
        self.inner, self.n, self.value, self.calls = target, n, value, 0
        self.config = target.config
        self.logits = None  # no lazy lm_head: acceptance reads the verify's (spoiled) logits

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _spoil(self, out):
        self.calls += 1
        if self.calls > self.n:
            out.logits[..., 5] = self.value
        return out

    def forward(self, tokens, state):
        return self._spoil(self.inner.forward(tokens, state))

    def verify(self, tokens, state, **kw):
        return self._spoil(self.inner.verify(tokens, state, **kw))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_plain_decoding_stops_at_the_step(target, value, temperature):
    with pytest.raises(NumericalError) as e:
        generate(NanAfter(target, 3, value), [1, 2, 3], max_new_tokens=10, temperature=temperature, seed=0)
    assert "token 3" in str(e.value) and "no token is emitted" in str(e.value)


def test_prefill_nan_is_named(target):
    with pytest.raises(NumericalError, match="token 0"):
        generate(NanAfter(target, 0), [1, 2], max_new_tokens=4)


class FixedDraft:
    """Proposes tokens 1, 2, 3 with a uniform q whatever the context (a valid draft at any T)."""

    config = type("C", (), {"block_size": 4, "version": 0})()
    block_size = 4

    def new_state(self):
        return None

    def append_context(self, state, taps):
        pass

    def propose(self, state, anchor, n, *, temperature=0.0, rng=None):
        from types import SimpleNamespace

        return SimpleNamespace(tokens=np.arange(1, n + 1), q=np.full((n, 96), 1 / 96))


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_loop_stops_at_the_round(target, temperature):
    prompt = [4, 5, 6]
    draft = FixedDraft()
    with pytest.raises(NumericalError) as e:
        speculative_generate(NanAfter(target, 2), draft, prompt, max_new_tokens=20, k=3, temperature=temperature, seed=1)
    assert "round 2" in str(e.value) and "verify row 0" in str(e.value)


def test_good_logits_are_untouched(target):
    """The finiteness check changes no token: the same run without spoiling equals the plain target's."""
    assert generate(NanAfter(target, 10**9), [1, 2, 3], max_new_tokens=8).tokens == \
        generate(target, [1, 2, 3], max_new_tokens=8).tokens


def _short(target, limit):
    cfg = dataclasses.replace(target.config, max_position_embeddings=limit)
    return random_target(cfg, 3)


def test_context_limit_refused_up_front(target):
    t = _short(target, 12)
    assert len(generate(t, [1, 2, 3, 4], max_new_tokens=9).tokens) == 9  # 4 + 9 - 1 = 12 positions: fits
    with pytest.raises(ContextLimitError, match="max_position_embeddings=12"):
        generate(t, [1, 2, 3, 4], max_new_tokens=10)
    draft = ScriptedDraft(t, [1, 2, 3, 4], 2, block_size=4)
    with pytest.raises(ContextLimitError, match="at most 9"):
        speculative_generate(t, draft, [1, 2, 3, 4], max_new_tokens=10, k=3)


def test_target_refuses_positions_past_the_limit(target):
    t = _short(target, 6)
    s = t.new_state()
    t.forward([1, 2, 3, 4, 5], s)
    with pytest.raises(ContextLimitError, match="position 5"):
        t.verify([1, 2], s)
    assert s.pending is None and s.pos == 5  # refused before anything changed
    t.forward([1], s)


@pytest.mark.parametrize("kw, words", [
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=-1.0), "temperature"),
    (dict(seed=-3, temperature=0.5), "seed"),
])
def test_bad_run_arguments(target, kw, words):
    args = dict(max_new_tokens=3, temperature=0.0, seed=0) | kw
    with pytest.raises(ConfigError, match=words):
        generate(target, [1, 2], **args)
    with pytest.raises(ConfigError, match=words):
        speculative_generate(target, ScriptedDraft(target, [1, 2], 4, block_size=4), [1, 2], k=2, **args)


def test_out_of_vocab_token_is_a_config_error(target):
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        target.forward([target.config.vocab_size], target.new_state())
    for bad in ([10**30], ["a"], [[1, 2], [3]]):
        with pytest.raises(ConfigError, match="integer ids"):
            target.forward(bad, target.new_state())


def test_numpy_scalars_are_accepted(target):
    want = generate(target, [1, 2], max_new_tokens=4, temperature=0.5, seed=3).tokens
    got = generate(target, [1, 2], max_new_tokens=np.int64(4), temperature=np.float32(0.5), seed=np.uint32(3)).tokens
    assert got == want


def test_loop_in_passes_names_the_pass(target):
    """With the verify in passes, a non-finite row of a later pass is named by its pass (its row numbers are the
    pass's own): prefill (call 0) and round 1's first pass (call 1) are clean, its second pass (call 2) is not."""
    prompt = [4, 5, 6]
    draft = ScriptedDraft(target, prompt, 20, block_size=5)  # the target's own tokens: every draft kept
    with pytest.raises(NumericalError) as e:
        speculative_generate(NanAfter(target, 2), draft, prompt, max_new_tokens=20, k=4, stages=2)
    assert "round 1" in str(e.value) and "verify pass 2 (from round row 2)" in str(e.value) and "verify row 0" in str(e.value)
