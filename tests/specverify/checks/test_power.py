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
