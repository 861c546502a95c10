"""Proof that the checks catch bugs: every mutant is caught by its check with a message that points at
the fault, and no check fails on the correct ports. The table is printed in docs/verify-your-port.md."""
import pytest

from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.checks import commit_equivalence, draft_consistency, forced_acceptance, greedy_identity
from pytest_specverify.draft_sampling import draft_sampling
from pytest_specverify.fuzz import run_commit_fuzz
from pytest_specverify.long_context import long_context
from pytest_specverify.prefill_state import prefill_onto_state
from pytest_specverify.reprefill import decode_prefill_consistency
from pytest_specverify.sampling_check import sampling_distribution
from pytest_specverify.session import Settings
from tests.specverify.ports import mutants

PROMPT = "The capital of France is"
K = 3


def _commit(port, k_values=Settings.k_values):  # the battery's default k list
    return commit_equivalence(port, port.encode(PROMPT), k_values, profile(port.tolerance))


def _greedy(port):
    return greedy_identity(port, port.encode(PROMPT), port.make_draft(), max_new_tokens=24, k=K, tol=profile(port.tolerance))


def _forced(port):
    return forced_acceptance(port, port.encode(PROMPT), k=K, tol=profile(port.tolerance))


def _forced_k0(port):  # the battery's loop check with no drafts (a port whose loop refuses k = 0 says so: a skip)
    from pytest_specverify import NotSupported

    try:
        return forced_acceptance(port, port.encode(PROMPT), k=0, tol=profile(port.tolerance))
    except NotSupported as exc:
        pytest.skip(str(exc))


def _forced_k1(port):  # the battery runs forced acceptance at every k of the run
    return forced_acceptance(port, port.encode(PROMPT), k=1, tol=profile(port.tolerance))


def _sampling(port, temperature=1.0):
    return sampling_distribution(port, port.encode("ab"), samples=500, temperature=temperature)


def _sampling_cold(port):
    return _sampling(port, temperature=0.7)


def _fuzz(port):
    return run_commit_fuzz(port, port.encode("Hello"), k_max=K, tol=profile(port.tolerance), max_examples=10, steps=6)


def _draft_consistency(port):
    return draft_consistency(port, port.encode(PROMPT), k=K, max_new_tokens=24, tol=profile(port.tolerance))


def _draft_sampling(port, temperature=1.0):
    return draft_sampling(port, port.encode(PROMPT), samples=500, k=K, tol=profile(port.tolerance), temperature=temperature)


def _draft_sampling_cold(port):
    return _draft_sampling(port, temperature=0.7)


def _reprefill(port):
    return decode_prefill_consistency(port, port.encode(PROMPT), max_new_tokens=16, tol=profile(port.tolerance))


def _reprefill_one_token(port):  # the battery's short-prompt test
    return decode_prefill_consistency(port, port.encode(PROMPT)[:1], max_new_tokens=16, tol=profile(port.tolerance))


def _commit_one_token(port):
    return commit_equivalence(port, port.encode(PROMPT)[:1], Settings.k_values, profile(port.tolerance))


def _long_context(port):
    return long_context(port, port.encode(PROMPT), length=Settings.context, k=K, tol=profile(port.tolerance))


def _prefill_onto_state(port):
    return prefill_onto_state(port, port.encode(PROMPT), tol=profile(port.tolerance), k=K)


CHECKS = {"prefill_onto_state": _prefill_onto_state, "long_context": _long_context, "forced_acceptance_k0": _forced_k0, "forced_acceptance_k1": _forced_k1, "decode_prefill_consistency_1_token": _reprefill_one_token,
          "commit_equivalence_1_token": _commit_one_token, "draft_sampling": _draft_sampling, "draft_sampling_T0.7": _draft_sampling_cold, "draft_consistency": _draft_consistency, "decode_prefill_consistency": _reprefill, "commit_equivalence": _commit, "greedy_identity": _greedy, "forced_acceptance": _forced,
          "sampling_distribution": _sampling, "sampling_distribution_T0.7": _sampling_cold, "stateful_fuzz": _fuzz}

# mutant -> (the check that catches it, text its failure message must contain)
TABLE = {
    "conv_not_restored": ("commit_equivalence", "array 'layer.0.conv'"),
    "recurrent_not_restored": ("commit_equivalence", "array 'layer.0.recurrent'"),
    "full_accept_branch_on_partial": ("commit_equivalence", "commit path 'keep', k=1, rows"),
    "snapshot_after_verify": ("commit_equivalence", "array 'layer.0."),
    "kv_not_trimmed": ("commit_equivalence", "too many along axis 1"),
    "kv_trimmed_one_short": ("commit_equivalence", "1 row too few along axis 1"),
    "kv_trimmed_one_long": ("commit_equivalence", "1 row too many along axis 1"),
    "zero_draft_round_advances": ("commit_equivalence", "k=0, rows"),
    "bonus_dropped": ("forced_acceptance", "it is the bonus token"),
    "bonus_duplicated": ("greedy_identity", "differs from plain greedy decoding"),
    "draft_context_wrong_rows": ("forced_acceptance", "context row for position"),
    "residual_wrong": ("sampling_distribution", "has probability 0 but was emitted"),
    "draft_stale_row_after_propose": ("draft_consistency", "propose() must leave the draft state as it found it"),
    "seed_ignored": ("sampling_distribution", "is not reproducible from its seed"),
    "temperature_ignored_in_accept": ("sampling_distribution_T0.7", "round's first token x1 | t0 ~ p(. | t0)"),
    "prefill_conv_off_by_one": ("decode_prefill_consistency", "one-pass prefill of prompt + output disagrees"),
    "prefill_rope_offset": ("decode_prefill_consistency", "one-pass prefill of prompt + output disagrees"),
    "checkpoint_ring_of_four": ("commit_equivalence", "commit path 'checkpoint', k=7"),
    "draft_q_at_temperature_one": ("draft_sampling_T0.7", "the draft's tokens do not follow the q it reports"),
    "decode_rope_table_of_256": ("long_context", "from position 256 on: |dlogprob|"),
    "decode_window_of_128": ("long_context", "from position 128 on: |dlogprob|"),
    "verify_window_of_128": ("long_context", "verify row 0 (token"),
    "bonus_counted_as_accepted": ("greedy_identity", "the loop's round counts do not fit its output"),
    "accept_uses_first_q_row": ("sampling_distribution", "k=2: x2 | t0, x1 along q[1] - q[0]: z ="),
    "short_prefill_drops_conv": ("decode_prefill_consistency_1_token", "one-pass prefill of prompt + output disagrees"),
    "states_share_caches": ("commit_equivalence", "new_state() does not give independent states"),
    "replay_record_of_eight": ("commit_equivalence", "k=15, rows [last, d1..d15]"),
    "bonus_dropped_at_k1": ("forced_acceptance_k1", "it is the bonus token"),
    "proposed_reported_as_accepted": ("forced_acceptance", "reports 0 proposed drafts but asked the draft for 3"),
    # issue 19's held-out bugs: the residual by its distribution (no zero gap in q), the loop at k = 0
    "residual_from_p": ("sampling_distribution", "token at a rejection ~ normalize(max(0, p - q))"),
    "zero_draft_steps_twice": ("forced_acceptance_k0", "at k = 0 (no drafts"),
    # issue 27: a prefill onto a state that already holds tokens
    "prefill_ignores_offset": ("prefill_onto_state", "chunks of"),
    # a sampler a few percent off at a later draft position: the sampling check's probe rounds count it
    "later_draft_bias": ("sampling_distribution", "rounds of many (part 3), later drafts"),
}
ALSO = {"zero_draft_round_advances": ("stateful_fuzz", "kept=0"),  # a second check that catches it
        # a port that never rolls back fails the T = 1 sampling check too (its rounds after a rejection)
        "kv_not_trimmed": ("sampling_distribution", "rounds of many (part 3), first draft"),
        "proposed_reported_as_accepted": ("sampling_distribution", "the loop's accepted / proposed counts do not"),
        "bonus_counted_as_accepted": ("forced_acceptance", "reports 4 accepted drafts but the forcing draft made exactly 3")}


def test_table_covers_every_mutant():
    assert sorted(TABLE) == sorted(mutants.NAMES)


@pytest.mark.parametrize("mutant", sorted(TABLE))
def test_mutant_is_caught(mutant):
    check, fragment = TABLE[mutant]
    with pytest.raises(SpecVerifyFailure) as info:
        CHECKS[check](mutants.build(mutant))
    assert fragment in str(info.value), str(info.value)


# Bugs the output checks cannot see, hence the two consistency checks: a prefill that is wrong in itself
# passes every check that compares against the port's own prefill + steps (forced_acceptance sees it
# only indirectly, in ports with taps: its reference taps come from one prefill of the whole text), and
# a draft whose propose() leaves state behind only costs acceptance.
UNSEEN_BY = {
    "prefill_conv_off_by_one": ("commit_equivalence", "greedy_identity", "stateful_fuzz"),
    "prefill_rope_offset": ("commit_equivalence", "greedy_identity", "stateful_fuzz"),
    "draft_stale_row_after_propose": ("commit_equivalence", "greedy_identity", "forced_acceptance", "stateful_fuzz",
                                      "decode_prefill_consistency"),
    "draft_q_at_temperature_one": ("greedy_identity", "draft_consistency", "sampling_distribution",
                                   "sampling_distribution_T0.7", "draft_sampling"),
    # faults that wait for position 128 or 256: every other check stays in the first few dozen positions
    "decode_rope_table_of_256": ("commit_equivalence", "greedy_identity", "decode_prefill_consistency", "stateful_fuzz"),
    "decode_window_of_128": ("commit_equivalence", "greedy_identity", "decode_prefill_consistency", "stateful_fuzz"),
    "verify_window_of_128": ("commit_equivalence", "greedy_identity", "forced_acceptance", "stateful_fuzz"),
    # the output is right, only the reported counts are not: acceptance rate and tokens/round lie
    "proposed_reported_as_accepted": ("greedy_identity", "stateful_fuzz"),
    # right at T = 0 and at k = 1: only the sampling check's k = 2 runs see it
    "accept_uses_first_q_row": ("greedy_identity", "forced_acceptance", "draft_sampling"),
    # the greedy checks run at the largest k only, hence forced acceptance at every k in the battery (the
    # sampling check's k = 1 runs pass it too: after a dropped bonus the next token comes from p given the
    # draft twice, too close to p for the pooled chi-square over small groups)
    "bonus_dropped_at_k1": ("greedy_identity", "forced_acceptance", "sampling_distribution"),
    # a prompt of K - 1 tokens or more is right: only the one-token prompt shows it
    "short_prefill_drops_conv": ("decode_prefill_consistency", "commit_equivalence", "commit_equivalence_1_token",
                                 "greedy_identity", "long_context"),
    # the loop at k = 0 only: every other check reaches k = 0 through verify / commit, or runs k >= 1
    "zero_draft_steps_twice": ("commit_equivalence", "greedy_identity", "forced_acceptance", "stateful_fuzz",
                               "sampling_distribution"),
    # every other check prefills a fresh state only
    "prefill_ignores_offset": ("commit_equivalence", "greedy_identity", "forced_acceptance", "stateful_fuzz",
                               "decode_prefill_consistency", "long_context"),
}


@pytest.mark.parametrize("mutant,check", [(m, c) for m, cs in UNSEEN_BY.items() for c in cs])
def test_the_output_checks_do_not_see_these(mutant, check):
    CHECKS[check](mutants.build(mutant))


def test_the_replay_record_of_eight_needs_more_than_eight_rows():
    """k up to 7 verifies at most 8 rows (one row set) and passes it; the default list reaches 15."""
    _commit(mutants.build("replay_record_of_eight"), k_values=(0, 1, 3, 7))


def test_the_checkpoint_ring_needs_more_than_four_rows():
    """The old default k list (0, 1, 3) verifies at most 4 rows and passes the 4-slot ring."""
    _commit(mutants.build("checkpoint_ring_of_four"), k_values=(0, 1, 3))


@pytest.mark.parametrize("mutant", sorted(ALSO))
def test_mutant_is_also_caught_by(mutant):
    check, fragment = ALSO[mutant]
    with pytest.raises(SpecVerifyFailure) as info:
        CHECKS[check](mutants.build(mutant))
    assert fragment in str(info.value), str(info.value)


def test_a_loop_that_asks_for_a_whole_block_and_uses_part_of_it_near_the_end_passes():
    """Legal: ask the draft for k, use only what fits before max_new_tokens, report what was used."""
    from tests.specverify.ports.qwen3_numpy import Qwen3Port, SpecLoop

    class WholeBlock(SpecLoop):
        def ask(self, n):
            return self.k

    port = Qwen3Port()
    port.loop_class = WholeBlock
    for check in ("forced_acceptance", "greedy_identity", "sampling_distribution"):
        CHECKS[check](port)


@pytest.fixture(scope="module", params=["onebit", "qwen3-numpy"])
def correct_port(request):
    from pytest_specverify.protocol import PortOptions

    if request.param == "onebit":
        from pytest_specverify.adapters.onebit import make_port
    else:
        from tests.specverify.ports.qwen3_numpy import make_port
    return make_port(PortOptions())


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_no_check_fails_on_a_correct_port(correct_port, check):
    CHECKS[check](correct_port)
