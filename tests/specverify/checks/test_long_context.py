"""long_context: its length rules, the port's optional max_context, and the per-window statistic."""
import types

import numpy as np
import pytest

from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.long_context import WINDOW, long_context
from pytest_specverify.protocol import PortOptions
from tests.specverify.ports import mutants
from tests.specverify.ports.qwen3_numpy import make_port


def test_a_port_s_max_context_bounds_the_check():
    port = make_port(PortOptions())
    port.max_context = 100
    report = long_context(port, port.encode("ab"), length=320, k=3, tol=profile(port.tolerance))
    assert report.metrics["length"] == 100


def test_a_port_too_small_for_the_check_is_a_skip_not_an_error():
    from pytest_specverify.protocol import NotSupported

    port = make_port(PortOptions())
    port.max_context = 30
    with pytest.raises(NotSupported, match="max_context = 30"):
        long_context(port, port.encode("The capital of France is"), length=320, k=3, tol=profile(port.tolerance))


def test_too_short_a_context_names_the_fix():
    port = make_port(PortOptions())
    with pytest.raises(ValueError, match="raise --specverify-context"):
        long_context(port, port.encode("The capital of France is"), length=30, k=3, tol=profile(port.tolerance))


class LateDrift:
    """A 2-token port whose steps and verifies (not its prefill) tilt the logits by +-a from position
    ``start`` on: |dlogprob| ~ a stays under fp16's logprob_max 0.1, k3 KL ~ a^2 / 2 does not stay under
    its kl_max 1e-3 - but only in the windows past ``start``, not averaged over the whole run."""

    name, vocab_size, tolerance, commit_paths = "late-drift", 2, "fp16", ("trim",)

    def __init__(self, start, a=0.08):
        self.start, self.a = start, a

    def new_state(self):
        return types.SimpleNamespace(pos=0, pending=None)

    def _rows(self, st, n, decode):
        from pytest_specverify.protocol import Rows

        pos = np.arange(st.pos, st.pos + n)
        tilt = np.where(decode & (pos >= self.start), self.a, 0.0)
        st.pos += n
        return Rows(np.stack([tilt, -tilt], 1).astype(np.float32))

    def prefill(self, st, tokens):
        return self._rows(st, len(tokens), False)

    def step(self, st, token):
        return self._rows(st, 1, True)

    def verify(self, st, tokens, *, path):
        st.pending = st.pos
        return self._rows(st, len(tokens), True)

    def commit(self, st, accepted_rows, *, path, replay_check=False):
        st.pos, st.pending = st.pending + accepted_rows, None

    def state_arrays(self, st):
        return {"pos": np.array([st.pos])}


def test_the_kl_is_judged_per_window_so_a_late_fault_is_not_averaged_away():
    tol = profile("fp16")
    long_context(LateDrift(start=10**6), [0, 1], length=320, k=3, tol=tol)  # no drift: passes
    with pytest.raises(SpecVerifyFailure, match=r"disagree \(315 tokens.* in positions 289\.\.313: k3 KL"):
        long_context(LateDrift(start=288), [0, 1], length=320, k=3, tol=tol)
    # the same drift over the whole run, averaged, would have passed
    a = 0.08
    r = np.log(0.5) - (a - np.logaddexp(a, -a))
    assert (np.expm1(r) - r) * (315 - 288) / 314 < tol.kl_max < np.expm1(r) - r and abs(r) < tol.logprob_max


def test_a_decode_window_is_reported_at_its_first_bad_position():
    """The decode window bites from position 128 on: the report names that position, and the positions
    before it agree."""
    port = mutants.build("decode_window_of_128")
    with pytest.raises(SpecVerifyFailure) as info:
        long_context(port, port.encode("The capital of France is"), length=320, k=3, tol=profile(port.tolerance))
    msg = str(info.value)
    assert "from position 128 on" in msg and "the 105 positions before it agree" in msg, msg
    start = int(msg.split("at positions ")[1].split("..")[0])
    assert start >= 128 - WINDOW, msg


def test_correct_ports_are_bitwise_or_within_the_profile():
    port = make_port(PortOptions())
    report = long_context(port, port.encode("The quick brown fox"), length=160, k=2, tol=profile(port.tolerance))
    assert report.metrics["max_abs_logprob_diff"] <= profile(port.tolerance).logprob_max
    assert sum(report.counts.values()) == len(port.commit_paths)
    assert np.isfinite(report.metrics["max_window_k3_kl"])
