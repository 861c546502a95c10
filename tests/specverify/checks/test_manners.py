"""Protocol manners for native engines (issue 27 item 5): close(state), failures that read as rounding when
the engine merely rounds, a replay skip that says why, no needless warnings, no .hypothesis/ left behind,
shallow snapshots caught for any SnapshotCommit port."""
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from pytest_specverify import NotSupported, SpecVerifyFailure, profile
from pytest_specverify.checks import forced_acceptance
from pytest_specverify.compare import first_logit_difference, first_state_difference
from pytest_specverify.helpers.shallow import ShallowSnapshotWarning
from pytest_specverify.replay import replay_matches_keep
from pytest_specverify.session import Settings
from pytest_specverify.verifier import Verifier
from tests.specverify.ports.qwen3_numpy import Qwen3Port
from tests.specverify.ports.tiny_rnn import TinyRnnPort

ROOT = Path(__file__).resolve().parents[3]
IDS = [3, 1, 4, 1, 5, 9, 2, 6]


class CountingPort(Qwen3Port):
    """Counts the states it hands out and the close() calls it gets."""

    def __init__(self):
        super().__init__()
        self.opened, self.closed = [], []

    def new_state(self):
        st = super().new_state()
        self.opened.append(st)  # held: a state nothing holds is closed early (owned._close_unheld), its id reused
        return st

    def close(self, state):
        self.closed.append(state)


@pytest.mark.parametrize("method, args", [
    ("commit_equivalence", dict(k_values=(0, 3))), ("forced_acceptance", dict(k=3)),
    ("prefill_consistency", {}), ("long_context", dict(length=80)), ("fuzz", dict(max_examples=3, steps=3)),
    ("prefill_onto_state", {}), ("sampling", dict(samples=100)),
])
def test_the_battery_closes_every_state_it_opened_once(method, args):
    port = CountingPort()
    v = Verifier(port, profile(port.tolerance), Settings())
    try:
        getattr(v, method)(port.encode("The capital of France is"), **args)
    except SpecVerifyFailure:
        pass  # a failure closes its states too (sampling with 100 runs may lack power)
    # the port's own loops make states of their own (plain generate): those the check never saw
    closed = [id(s) for s in port.closed]
    assert closed and len(closed) == len(set(closed)), method
    opened = {id(s) for s in port.opened}
    assert set(closed) <= opened


def test_a_state_is_closed_when_the_check_fails_too():
    from tests.specverify.ports import mutants

    port = mutants.build("kv_not_trimmed")
    closed = []
    port.close = closed.append
    with pytest.raises(SpecVerifyFailure):
        Verifier(port, profile(port.tolerance), Settings()).commit_equivalence(port.encode("hello"), k_values=(1,))
    assert closed


def test_a_tolerance_failure_names_the_measure_and_the_declared_bound():
    fp32 = profile("fp32")
    text = first_logit_difference(np.array([1.0, 2.0]), np.array([1.0, 2.001]), fp32)
    assert "measured max |diff| 1.000e-03 exceeds the declared bound atol=1e-05 rtol=1e-05 of profile 'fp32': " \
           "declare a profile if your engine rounds this way" in text, text
    text = first_state_difference({"a": np.float32([1.0 + 2e-5])}, {"a": np.float32([1.0])}, profile("exact"))
    assert "where profile 'exact' declares bitwise equality: if your engine rounds this way" in text, text


def test_the_replay_skip_says_why_it_did_not_run():
    with pytest.raises(NotSupported, match=r"the replay check did not run: port 'qwen3-numpy' names its commit paths "
                                           r"\['trim'\].*named 'keep'.*named 'replay'"):
        replay_matches_keep(Qwen3Port(), IDS, (1,), tol=profile("fp32"))


def test_forced_acceptance_on_a_port_without_taps_does_not_warn():
    report = forced_acceptance(TinyRnnPort(), IDS, k=3, tol=profile("fp32"))
    assert report.notes == [] and report.metrics["context_rows_checked"] is False


def test_the_battery_leaves_no_hypothesis_folder(tmp_path):
    code = ("from pytest_specverify.fuzz import run_commit_fuzz\nfrom pytest_specverify import profile\n"
            "from tests.specverify.ports.tiny_rnn import TinyRnnPort\n"
            "print(run_commit_fuzz(TinyRnnPort(), [3, 1, 4, 1, 5], k_max=3, tol=profile('fp32'), max_examples=3, steps=3))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / ".hypothesis").exists(), sorted(p.name for p in tmp_path.iterdir())


class InPlaceRnn(TinyRnnPort):
    """Updates its hidden state in place; ``shallow`` snapshots share it."""

    def __init__(self, shallow: bool):
        super().__init__(batch_ulps=False)
        self.shallow = shallow

    def forward(self, state, tokens):
        h = state.h
        out = super().forward(state, tokens)
        h[:] = state.h  # the same values, written into the array the state started with
        state.h = h
        return out

    def snapshot(self, state):
        return (state.h, state.conv.copy(), state.length) if self.shallow else super().snapshot(state)


def test_a_shallow_snapshot_of_an_array_updated_in_place_warns():
    port = InPlaceRnn(shallow=True)
    st = port.new_state()
    port.prefill(st, IDS)
    with pytest.warns(ShallowSnapshotWarning, match=r"snapshot\[0\]"):
        port.verify(st, [1, 2, 3], path="keep")


def test_a_deep_snapshot_does_not_warn():
    port = InPlaceRnn(shallow=False)
    st = port.new_state()
    port.prefill(st, IDS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShallowSnapshotWarning)
        port.verify(st, [1, 2, 3], path="keep")


def test_a_state_the_check_drops_is_closed_before_the_check_ends():
    """The sweep: a check that goes through many states closes those nothing holds any more as it goes."""
    from pytest_specverify.owned import closing_states, owned_outputs

    port = Qwen3Port()
    closed = []
    port.close = closed.append
    wrapped = owned_outputs(port)
    with closing_states(port):
        for _ in range(40):
            wrapped.new_state()  # dropped at once
        assert len(closed) >= 20  # closed while the block still runs
    assert len(closed) == 40 and len({id(s) for s in closed}) <= 40
