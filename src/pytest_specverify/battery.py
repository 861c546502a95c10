"""The specverify battery: the checks as ready-made tests, for any port.

Use it from your own test file (the port comes from ``--specverify-port`` or your ``specverify_port``
fixture override)::

    from pytest_specverify.battery import *  # noqa: F401,F403

or run it straight from the installed package::

    pytest --pyargs pytest_specverify.battery --specverify-port myport
"""
import pytest


def test_commit_equivalence(specverify, specverify_port):
    report = specverify.commit_equivalence(specverify_port.encode("The capital of France is"))
    assert set(p for p, _, _ in report.counts) == set(specverify_port.commit_paths)


def test_greedy_identity(specverify, specverify_prompt_ids):
    report = specverify.greedy_identity(specverify_prompt_ids)
    print(f"acceptance {report.metrics['acceptance_rate']:.2f}, tokens/round {report.metrics['tokens_per_round']:.2f}")


def test_greedy_identity_sees_accepted_drafts(specverify):
    # over the prompt set: a draft that never matches leaves greedy identity with nothing but rejections
    report = specverify.greedy_acceptance()
    print(f"{report.metrics['accepted']} of {report.metrics['proposed']} drafts accepted over the first "
          f"{report.metrics['prompts']} of {report.metrics['prompts_given']} prompts")


def test_forced_acceptance_covers_every_accept_count(specverify, specverify_port, specverify_settings):
    # every k of the run (a loop may special-case k = 1) on every commit path (the loop passes the path on)
    for k in sorted({max(k, 1) for k in specverify_settings.k_values}):
        for path in specverify_port.commit_paths:
            report = specverify.forced_acceptance(specverify_port.encode("def fibonacci(n):"), k=k, commit_path=path)
            assert all(report.counts[a] > 0 for a in range(k + 1)), (k, path, report.counts)


def test_loop_with_zero_drafts(specverify, specverify_port):
    # k = 0 through the loop itself (the commit checks reach it through verify / commit only); a port whose
    # loop refuses k < 1 declares min_k = 1 and this is a visible skip
    for path in specverify_port.commit_paths:
        report = specverify.forced_acceptance(specverify_port.encode("def fibonacci(n):"), k=0, commit_path=path)
        assert report.metrics["tokens"] > 0, report.metrics


def test_draft_consistency(specverify, specverify_port):
    report = specverify.draft_consistency(specverify_port.encode("def fibonacci(n):"))
    assert report.metrics["proposals_checked"] >= 2


def test_self_draft_accepts_everything(specverify, specverify_port):
    report = specverify.self_draft(specverify_port.encode("Once upon a time"))
    assert report.metrics["acceptance_rate"] >= 0.9


def test_decode_prefill_consistency(specverify, specverify_port):
    report = specverify.prefill_consistency(specverify_port.encode("The quick brown fox"))
    print(f"k3 KL {report.metrics['k3_kl']:.2e}, max |dlogprob| {report.metrics['max_abs_logprob_diff']:.2e}, "
          f"bitwise {report.metrics['bitwise']}")


def test_prefill_onto_a_state_that_holds_tokens(specverify, specverify_port):
    report = specverify.prefill_onto_state(specverify_port.encode("The quick brown fox"))
    print(f"max |dlogprob| against one prefill of the whole text {report.metrics['max_abs_logprob_diff']:.2e}")


@pytest.mark.parametrize("n", [1, 2])  # shorter than a conv window or a prefill chunk: the prefill's edge cases
def test_short_prompts(specverify, specverify_port, n):
    ids = specverify_port.encode("The quick brown fox")[:n]
    specverify.prefill_consistency(ids)
    specverify.commit_equivalence(ids)


def test_long_context(specverify, specverify_port, specverify_settings):
    report = specverify.long_context(specverify_port.encode("The quick brown fox"))
    assert sum(report.counts.values()) == len(specverify_port.commit_paths), report.counts
    print(f"{report.metrics['length']} tokens: max |dlogprob| {report.metrics['max_abs_logprob_diff']:.2e}, "
          f"worst window k3 KL {report.metrics['max_window_k3_kl']:.2e}, bitwise {report.metrics['bitwise']}")


def test_reference_agreement(specverify):
    # skipped, saying how to give one, when neither --specverify-reference nor the port's reference_path names one
    report = specverify.reference()
    print(f"{report.counts['prompts']} prompts, {report.counts['rows']} rows: max |dlogit| vs the float32 reference "
          f"{report.metrics['max_abs_logit_diff']:.2e} ({report.metrics['share_of_bound']:.0%} of the bound)")


@pytest.mark.replay_check
def test_replay_check(specverify, specverify_port):
    specverify.replay(specverify_port.encode("for (int i = 0; i < n; i++)"))


@pytest.mark.parametrize("temperature", [1.0, 0.7])  # T != 1 also catches a temperature left out of p or q
def test_sampling_distribution(specverify, specverify_port, temperature):
    specverify.sampling(specverify_port.encode("ab"), temperature=temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.7])  # a q computed at T = 1 is right at 1.0 only
def test_draft_sampling(specverify, specverify_port, temperature):
    report = specverify.draft_sampling(specverify_port.encode("The quick brown fox"), temperature=temperature)
    print(f"draft token 1 vs its q: chi-square {report.metrics['chi2']}, TV {report.metrics['tv']:.4f}")


def test_stateful_fuzz(specverify, specverify_port):
    totals = specverify.fuzz(specverify_port.encode("Hello"), max_examples=10, steps=6)
    assert totals["zero_draft"] > 0 and totals["full_accepts"] > 0, totals
