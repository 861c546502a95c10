"""The forcing draft's context-row check: bitwise for exact profiles; for the others a row counts as
position p's when it is within the profile or p is its unambiguous nearest reference row - a step's
rounding drifts from one long prefill's (a false alarm at position 255 on the transformers port, seed 113),
a wrong row (another position's, or garbage) does not."""
import numpy as np
import pytest

from pytest_specverify.drafts import ContextState, ForcingDraft, cycle_script
from pytest_specverify.tolerance import PROFILES


def _draft(ref, nearest):
    tol = PROFILES["fp32"]
    return ForcingDraft(list(range(len(ref))), 64, cycle_script([0]), reference_taps=ref,
                        same_taps=lambda a, b: tol.close(a, b, "taps"), prompt_length=4, nearest=nearest)


@pytest.fixture
def ref():
    return np.random.default_rng(0).normal(size=(40, 2, 16)).astype(np.float32)


def _feed(draft, rows):
    st = ContextState()
    draft.append_context(st, rows)
    return draft.problems


def test_rounding_drift_past_the_profile_is_not_a_wrong_row(ref):
    drift = ref[:10] + 3e-4  # 30x the fp32 profile's atol, far from every other position
    assert _feed(_draft(ref, nearest=True), drift) == []
    assert _feed(_draft(ref, nearest=False), drift)  # exact-style judgement: the old false alarm


@pytest.mark.parametrize("wrong", ["shifted", "garbage", "zeros"])
def test_a_wrong_row_is_still_caught(ref, wrong):
    rows = ref[:10].copy()
    rows[5] = {"shifted": ref[6], "garbage": np.random.default_rng(1).normal(size=ref[0].shape), "zeros": 0 * ref[0]}[wrong]
    problems = _feed(_draft(ref, nearest=True), rows)
    assert problems and "position 5" in problems[0]
    if wrong == "shifted":
        assert "equals the taps of position 6" in problems[0]


def test_a_snapshot_port_missing_a_method_fails_when_built():
    from pytest_specverify.helpers import SnapshotCommit

    class NoRestore(SnapshotCommit):
        def forward(self, state, tokens):
            return None

        def snapshot(self, state):
            return None

    with pytest.raises(TypeError, match="restore"):
        NoRestore()
