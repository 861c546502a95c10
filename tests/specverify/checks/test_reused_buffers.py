"""The checks compare a port's state with its sequential reference side by side, so they must never
read the same memory twice. Ports may return views of one output buffer that their next call
overwrites (zero-copy outputs of a C++ or device port): every check drives the port through
``owned.owned_outputs``, which copies them. And two states must not share storage:
``require_independent_states`` refuses a port whose states do (with shared caches a KV-not-trimmed
bug passed commit equivalence)."""
import numpy as np
import pytest

from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.checks import commit_equivalence
from pytest_specverify.fuzz import run_commit_fuzz
from pytest_specverify.long_context import long_context
from pytest_specverify.protocol import Rows
from pytest_specverify.reprefill import decode_prefill_consistency
from tests.specverify.ports.qwen3_numpy import Qwen3Port

PROMPT = "The capital of France is"


class ReusedBuffers(Qwen3Port):
    """Right, but every prefill / step / verify returns its logits and taps in the same two buffers."""

    nudge = 0.0

    def __init__(self):
        super().__init__()
        self._logits = self._taps = None

    def _out(self, rows: Rows, verify=False) -> Rows:
        logits, taps = np.asarray(rows.logits), np.asarray(rows.taps)
        if self._logits is None or self._logits.shape[0] < logits.shape[0]:
            self._logits = np.empty((max(logits.shape[0], 64),) + logits.shape[1:], logits.dtype)
            self._taps = np.empty((max(taps.shape[0], 64),) + taps.shape[1:], taps.dtype)
        n = logits.shape[0]
        self._logits[:n], self._taps[:n] = logits, taps
        if verify:
            self._logits[0, 0] += self.nudge
        return Rows(self._logits[:n], self._taps[:n])

    def prefill(self, state, tokens):
        return self._out(super().prefill(state, tokens))

    def step(self, state, token):
        return self._out(super().step(state, token))

    def verify(self, state, tokens, *, path):
        return self._out(super().verify(state, tokens, path=path), verify=True)


class SharedStateBuffers(ReusedBuffers):
    """Right, and ``state_arrays`` of any state is downloaded into the same host buffers."""

    def __init__(self):
        super().__init__()
        self._state = {}

    def state_arrays(self, state):
        out = {}
        for name, a in super().state_arrays(state).items():
            buf = self._state.get(name)
            if buf is None or buf.shape != a.shape:
                buf = self._state[name] = np.empty_like(a)
            buf[...] = a
            out[name] = buf
        return out


class KVNudgedOnCommit(SharedStateBuffers):
    """Also wrong: a commit moves one cached key of the last kept row by 1e-3 (same shapes everywhere)."""

    def commit(self, state, accepted_rows, *, path, replay_check=False):
        super().commit(state, accepted_rows, path=path, replay_check=replay_check)
        cache = state.caches[0]
        if cache.length:
            cache.keys[0, cache.length - 1, 0] += 1e-3


class VerifyNudged(ReusedBuffers):
    """Also wrong: the batched verify's first row is not the plain step's (one logit moved by 1e-2)."""

    nudge = 1e-2


def _tol(port):
    return profile(port.tolerance)


def test_a_correct_port_with_reused_buffers_passes():
    port = ReusedBuffers()
    commit_equivalence(port, port.encode(PROMPT), (0, 1, 3), _tol(port))
    run_commit_fuzz(port, port.encode("Hello"), k_max=3, tol=_tol(port), max_examples=5, steps=4)
    decode_prefill_consistency(port, port.encode(PROMPT), max_new_tokens=8, tol=_tol(port))
    long_context(port, port.encode(PROMPT), length=96, k=3, tol=_tol(port))


@pytest.mark.parametrize("check", ["commit_equivalence", "stateful_fuzz", "long_context"])
def test_a_verify_that_is_not_the_step_is_caught_through_reused_buffers(check):
    port = VerifyNudged()
    with pytest.raises(SpecVerifyFailure, match="verify row 0"):
        if check == "commit_equivalence":
            commit_equivalence(port, port.encode(PROMPT), (1,), _tol(port))
        elif check == "stateful_fuzz":
            run_commit_fuzz(port, port.encode("Hello"), k_max=3, tol=_tol(port), max_examples=10, steps=6)
        else:
            long_context(port, port.encode(PROMPT), length=96, k=3, tol=_tol(port))


def test_state_arrays_in_shared_buffers():
    port = SharedStateBuffers()
    commit_equivalence(port, port.encode(PROMPT), (0, 1, 3), _tol(port))
    run_commit_fuzz(port, port.encode("Hello"), k_max=3, tol=_tol(port), max_examples=5, steps=4)
    long_context(port, port.encode(PROMPT), length=96, k=3, tol=_tol(port))
    bad = KVNudgedOnCommit()
    with pytest.raises(SpecVerifyFailure, match="array 'layer.0.keys' first differs"):
        commit_equivalence(bad, bad.encode(PROMPT), (1,), _tol(bad))
    with pytest.raises(SpecVerifyFailure, match="array 'layer.0.keys' first differs"):
        long_context(bad, bad.encode(PROMPT), length=96, k=3, tol=_tol(bad))


def test_states_that_share_caches_are_refused_before_they_hide_a_bug():
    from tests.specverify.ports.mutants import SharedCaches

    class SharedAndUntrimmed(SharedCaches):  # and the KV is not trimmed on commit
        def commit(self, state, accepted_rows):
            start, rows = state.pending
            super().commit(state, accepted_rows)
            for c in state.caches:
                c.length = start + rows

    port = Qwen3Port(model_class=SharedAndUntrimmed)
    for run in (lambda: commit_equivalence(port, port.encode(PROMPT), (0, 1, 3, 7), _tol(port)),
                lambda: run_commit_fuzz(port, port.encode("Hello"), k_max=3, tol=_tol(port), max_examples=5, steps=4),
                lambda: long_context(port, port.encode(PROMPT), length=96, k=3, tol=_tol(port))):
        with pytest.raises(SpecVerifyFailure, match="new_state\\(\\) does not give independent states"):
            run()


class NoStateArrays(Qwen3Port):
    def state_arrays(self, state):
        return {}


class FrozenStateArrays(Qwen3Port):
    def state_arrays(self, state):
        return {"layer.0.keys": np.zeros((2, 3))}


@pytest.mark.parametrize("port_class,fragment", [(NoStateArrays, "returned no arrays"),
                                                 (FrozenStateArrays, "the same arrays .* before and after a step")])
def test_state_arrays_that_could_never_differ_are_refused(port_class, fragment):
    port = port_class()
    with pytest.raises(SpecVerifyFailure, match=fragment):
        commit_equivalence(port, port.encode(PROMPT), (1,), _tol(port))
