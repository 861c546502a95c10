"""No check passes without the power to see what it checks (issue 27): greedy identity must see accepted
drafts over its prompts, and the sampling check states its power against named effects at every position
of a round."""
import pytest

from pytest_specverify import NotSupported, SpecVerifyFailure, profile
from pytest_specverify.checks import greedy_acceptance, plain_greedy
from pytest_specverify.drafts import ForcingDraft, cycle_script
from pytest_specverify.protocol import PortOptions
from tests.specverify.ports.qwen3_numpy import make_port

PROMPT = "The capital of France is"


def _never_matching(port, ids, n=24):
    """A draft whose every first proposal is wrong (the plain text with its next token replaced)."""
    seq = ids + plain_greedy(port, ids, n + 20)
    return ForcingDraft(seq, port.vocab_size, cycle_script([0]), prompt_length=len(ids))


def test_a_draft_that_never_matches_fails_greedy_identity_power():
    port = make_port(PortOptions())
    ids = port.encode(PROMPT)
    with pytest.raises(SpecVerifyFailure) as info:
        greedy_acceptance(port, [ids], _never_matching(port, ids), k=3, max_new_tokens=24)
    text = str(info.value)
    assert "the draft ForcingDraft" in text and "acceptance 0 of" in text and "draft_may_never_match" in text, text


def test_the_opt_out_is_a_visible_skip():
    port = make_port(PortOptions())
    port.draft_may_never_match = True
    ids = port.encode(PROMPT)
    with pytest.raises(NotSupported, match="draft_may_never_match = True"):
        greedy_acceptance(port, [ids], _never_matching(port, ids), k=3, max_new_tokens=24)


def test_a_draft_that_matches_sometimes_passes_and_reports_what_it_saw():
    port = make_port(PortOptions())
    ids = port.encode(PROMPT)
    draft = ForcingDraft(ids + plain_greedy(port, ids, 44), port.vocab_size, cycle_script([1, 0]), prompt_length=len(ids))
    report = greedy_acceptance(port, [ids], draft, k=3, max_new_tokens=24)
    assert report.metrics["accepted"] > 0 and report.metrics["prompts"] == 1, report.metrics
    assert profile(port.tolerance).name == "fp32"


# -- the sampling check at every position of a round ----------------------------------------------------------
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_sampling_check_states_its_power_at_every_position(temperature):
    from pytest_specverify.sampling_check import sampling_distribution
    from pytest_specverify.sampling_rounds import TV_EFFECT

    port = make_port(PortOptions())
    r = sampling_distribution(port, port.encode("ab"), temperature=temperature, tol=profile(port.tolerance))
    assert len([k for k in r.metrics if not k.startswith("power")]) == (11 if temperature == 1.0 else 13)  # the docs' count
    for where in ("first draft", "later drafts"):
        assert r.metrics[f"power: {where}: p off by TV {TV_EFFECT}"] >= 0.99, r.metrics
    assert r.metrics["power: residual after a rejection drawn from p"] >= 0.99
    assert "TV resolvable" in r.metrics["part 3: bonus after a full accept ~ p given the text"]
    assert r.counts["probe_drafts"] >= 1000 and r.counts["residuals_part3"] > 0 and r.counts["bonuses_part3"] > 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_port_that_never_rolls_back_fails_the_sampling_check(temperature):
    """Its rounds after a rejection start from a state that still holds the rejected rows: the first round of a
    run (all that parts 0-2 judge) is right, the probe rounds after a rejection are not."""
    from pytest_specverify.sampling_check import sampling_distribution
    from tests.specverify.ports import mutants

    port = mutants.build("kv_not_trimmed")
    with pytest.raises(SpecVerifyFailure, match=r"rounds of many \(part 3\), first draft: .* after a rejection: \d+ of"):
        sampling_distribution(port, port.encode("ab"), temperature=temperature, tol=profile(port.tolerance))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_sampler_a_few_percent_off_at_a_later_position_fails(temperature):
    from pytest_specverify.sampling_check import sampling_distribution
    from tests.specverify.ports import mutants

    port = mutants.build("later_draft_bias")
    with pytest.raises(SpecVerifyFailure, match=r"rounds of many \(part 3\), later drafts"):
        sampling_distribution(port, port.encode("ab"), temperature=temperature, tol=profile(port.tolerance))


def test_too_few_runs_to_see_the_named_effect_fail_saying_what_they_cannot_see(monkeypatch):
    from pytest_specverify import sampling_check
    from pytest_specverify.sampling_check import sampling_distribution

    from pytest_specverify import sampling_rounds

    monkeypatch.setattr(sampling_check, "MAX_RUNS_FACTOR", 1)  # part 3: at most 50 runs
    monkeypatch.setattr(sampling_rounds, "ROUNDS", 3)  # of 3 rounds: ~100 probed first drafts, 500 are needed
    port = make_port(PortOptions())
    with pytest.raises(SpecVerifyFailure, match=r"part 3\): the check cannot see first draft: p off by TV 0.02: power"):
        sampling_distribution(port, port.encode("ab"), samples=100, tol=profile(port.tolerance))
