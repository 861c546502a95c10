"""Greedy identity, forced acceptance, commit equivalence and the draft checks on the built-in trained pair."""
import pytest


def test_greedy_identity_on_default_prompts(specverify, specverify_prompt_ids):
    report = specverify.greedy_identity(specverify_prompt_ids, k=7, max_new_tokens=48)
    print(f"acceptance {report.metrics['acceptance_rate']:.2f}, tokens/round {report.metrics['tokens_per_round']:.2f}")


def test_the_trained_draft_gets_tokens_accepted(specverify_port):
    """Over the plugin's shipped prompts (code and prose, not all Python): real acceptance, not a loop's.
    A single short prose prompt may accept nearly nothing, so the claim is about the set. (Identity with
    plain decoding is the test above; this one only reads the speculative runs' acceptance.)"""
    from pytest_specverify.prompts import shipped

    draft = specverify_port.make_draft()
    per_prompt = {p.id: specverify_port.speculative_generate(p.tokens(specverify_port), draft, max_new_tokens=48,
                                                             k=7).tokens_per_round
                  for p in shipped()}
    print(per_prompt)
    assert sum(per_prompt.values()) / len(per_prompt) > 1.3, per_prompt  # a draft that never matches: 1.0
    assert max(per_prompt.values()) > 2.0, per_prompt


def test_commit_equivalence(specverify, specverify_port):
    report = specverify.commit_equivalence(specverify_port.encode("def parse_args(argv):\n    "))
    assert {p for p, _, _ in report.counts} == set(specverify_port.commit_paths)


def test_forced_acceptance(specverify, specverify_port, specverify_settings):
    report = specverify.forced_acceptance(specverify_port.encode("The quick brown fox"))
    assert all(report.counts[a] > 0 for a in range(specverify_settings.spec_k + 1)), report.counts


def test_draft_consistency(specverify, specverify_port):
    """The trained draft accepts real tokens, so its rounds keep varied context lengths: propose() must
    leave its state alone across all of them."""
    report = specverify.draft_consistency(specverify_port.encode('def read_config(path):\n    """Read the file'), k=7,
                                     max_new_tokens=48)
    assert report.metrics["acceptance_rate"] > 0.1, report.metrics


def test_decode_prefill_consistency(specverify, specverify_port):
    report = specverify.prefill_consistency(specverify_port.encode("The license grants"), max_new_tokens=32)
    assert report.metrics["bitwise"], report.metrics


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_draft_sampling(specverify, specverify_port, temperature):
    """The trained DFlash 2 draft (candidate-path selector) draws its tokens from the q it reports."""
    report = specverify.draft_sampling(specverify_port.encode("def fibonacci(n):"), temperature=temperature, k=7)
    assert report.counts["proposals"] > 0
