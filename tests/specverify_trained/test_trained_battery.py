"""Greedy identity, forced acceptance and commit equivalence on the built-in trained pair."""


def test_greedy_identity_on_default_prompts(check_greedy_identity, specverify_prompt_ids):
    report = check_greedy_identity(specverify_prompt_ids, k=7, max_new_tokens=48)
    print(f"acceptance {report.metrics['acceptance_rate']:.2f}, tokens/round {report.metrics['tokens_per_round']:.2f}")
    assert report.metrics["tokens_per_round"] > 1.0  # the trained draft does get tokens accepted


def test_commit_equivalence(check_commit_equivalence, specverify_port):
    report = check_commit_equivalence(specverify_port.encode("def parse_args(argv):\n    "))
    assert {p for p, _, _ in report.counts} == set(specverify_port.commit_paths)


def test_forced_acceptance(check_forced_acceptance, specverify_port, specverify_settings):
    report = check_forced_acceptance(specverify_port.encode("The quick brown fox"))
    assert all(report.counts[a] > 0 for a in range(specverify_settings.spec_k + 1)), report.counts
