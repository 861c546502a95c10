"""Issue 19: the plugin on engines it did not grow up with - the replay check judged by the profile, the
fuzz seeded with its coverage by construction, the loop at k = 0, NotSupported from the port's replay check
a skip, ports without taps, declared tolerances (object and ini table) with measured errors, the header
naming the real port, and sampling checks that cannot pass without power."""
import numpy as np
import pytest

from pytest_specverify import NotSupported, SpecVerifyFailure, Tolerance, profile
from pytest_specverify.checks import forced_acceptance, self_draft_accepts_all
from pytest_specverify.replay import replay_matches_keep
from pytest_specverify.compare import first_state_difference
from pytest_specverify.measure import measuring
from pytest_specverify.fuzz import run_commit_fuzz
from pytest_specverify.controlled import controlled_q
from pytest_specverify.sampling_check import sampling_distribution
from pytest_specverify.stats import conditional_fit
from pytest_specverify.tolerance import declared, from_table
from tests.specverify.ports import mutants
from tests.specverify.ports.tiny_rnn import TinyRnnPort

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


# -- 1: the replay check judged by the profile; 9: NotSupported from the port's own replay check is a skip --
def test_replay_check_passes_a_correct_non_exact_port_and_skips_only_its_own_check():
    with pytest.raises(NotSupported, match=r"keep and replay agree within profile 'fp32' \(max \|diff\| k=1 "):
        replay_matches_keep(TinyRnnPort(), IDS, (1, 3, 7), tol=profile("fp32"))


def test_replay_check_stays_bitwise_for_an_exact_profile():
    with pytest.raises(SpecVerifyFailure, match=r"beyond profile 'exact' \(bitwise\).*array 'layer.0.h'"):
        replay_matches_keep(TinyRnnPort(), IDS, (1, 3, 7), tol=profile("exact"))


def test_replay_check_on_the_engine_is_bitwise_and_its_own_check_runs():
    from pytest_specverify.adapters.onebit import make_port
    from pytest_specverify.protocol import PortOptions

    port = make_port(PortOptions())
    r = replay_matches_keep(port, IDS, (1, 3), tol=profile(port.tolerance))
    assert r.metrics["bitwise"] and r.metrics["max_diff_k3"] == 0.0


# -- 5: the fuzz is seeded and its coverage holds by construction; the useful line first ---------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fuzz_covers_zero_draft_rounds_and_full_accepts_whatever_the_seed(seed):
    port = TinyRnnPort()
    totals = run_commit_fuzz(port, IDS, k_max=3, tol=profile("fp32"), max_examples=3, steps=2, seed=seed)
    assert totals["zero_draft"] >= 3 and totals["full_accepts"] >= 3, totals


def test_fuzz_is_reproducible_from_its_seed():
    port = TinyRnnPort()
    runs = [run_commit_fuzz(port, IDS, k_max=3, tol=profile("fp32"), max_examples=4, steps=4, seed=7) for _ in range(2)]
    assert runs[0] == runs[1]


def test_a_fuzz_failure_leads_with_the_ports_failure():
    port = mutants.build("zero_draft_round_advances")
    with pytest.raises(SpecVerifyFailure) as info:
        run_commit_fuzz(port, port.encode("Hello"), k_max=3, tol=profile(port.tolerance), max_examples=10, steps=6, seed=0)
    first = str(info.value).splitlines()[0]
    assert "Hypothesis" not in first and "kept=0" in first, first


# -- 7: the loop at k = 0 ---------------------------------------------------------------------------
def test_the_loop_at_k0_catches_a_zero_draft_round_that_steps_twice():
    port = mutants.build("zero_draft_steps_twice")
    with pytest.raises(SpecVerifyFailure, match=r"at k = 0 \(no drafts"):
        forced_acceptance(port, port.encode("def fibonacci(n):"), k=0, tol=profile(port.tolerance))


def test_a_port_whose_loop_refuses_k0_declares_min_k_and_is_skipped():
    from pytest_specverify.adapters.onebit import make_port
    from pytest_specverify.protocol import PortOptions

    with pytest.raises(NotSupported, match="declares min_k = 1"):
        forced_acceptance(make_port(PortOptions()), IDS, k=0, tol=profile("exact"))


def test_fixtures_pass_an_explicit_k0_on(sv_pytester):
    _tiny_rnn_project(sv_pytester)
    sv_pytester.makepyfile("""
def test_k0(specverify, specverify_port):
    r = specverify.forced_acceptance(specverify_port.encode("hi there"), k=0)
    assert r.counts and set(r.counts) == {0}
    r = specverify.greedy_identity(specverify_port.encode("hi there"), k=0, max_new_tokens=6)
    assert r.metrics["tokens"] == 6 and r.metrics["acceptance_rate"] == 0.0
""")
    sv_pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


# -- 9: ports without taps ----------------------------------------------------------------------------
def test_self_draft_and_forcing_draft_work_without_taps_and_say_what_they_skipped():
    port = TinyRnnPort()
    assert self_draft_accepts_all(port, IDS, k=3, max_new_tokens=16, tol=profile("fp32")).metrics["acceptance_rate"] == 1.0
    r = forced_acceptance(port, IDS, k=3, tol=profile("fp32"))
    # said in the report; not a warning (issue 27: nothing is missing when a port has no taps)
    assert r.metrics["context_rows_checked"] is False and not r.notes


# -- 3: declared tolerances ----------------------------------------------------------------------------
def test_a_table_declares_bounds_per_kind_of_array():
    tol = from_table(["name = mine", "atol = 1e-6", "rtol = 0", "*.conv.atol = 1e-3", "logits.atol = 1e-2", "kl_max = 1e-4"])
    assert tol.name == "mine" and tol.kl_max == 1e-4
    assert tol.bounds("layer.0.conv") == (1e-3, 0.0) and tol.bounds("logits") == (1e-2, 0.0)
    assert tol.bounds("layer.0.keys") == (1e-6, 0.0)
    a = {"layer.0.conv": np.zeros(3), "layer.0.keys": np.zeros(3)}
    b = {"layer.0.conv": np.full(3, 5e-4), "layer.0.keys": np.zeros(3)}
    assert first_state_difference(a, b, tol) is None
    b["layer.0.keys"] = np.full(3, 5e-4)
    assert "layer.0.keys" in first_state_difference(a, b, tol)


@pytest.mark.parametrize("line, words", [("atol", "key = value"), ("atol = x", "not a number"), ("frob = 1", "unknown key"),
                                         ("atol = -1", ">= 0"), ("base = nope", "not known")])
def test_a_bad_table_line_is_named(line, words):
    with pytest.raises(ValueError, match=words):
        from_table([line])


def test_a_declared_object_is_its_own_profile_and_the_measurement_is_reported():
    tol = declared(name="mine", atol=1e-4, rtol=0.0, kinds={"logits": (1e-3, 0.0)})
    assert profile(tol) is tol and isinstance(tol, Tolerance) and tol.source == "declared by the port"
    with measuring() as m:
        assert first_state_difference({"layer.0.h": np.zeros(2)}, {"layer.0.h": np.full(2, 5e-5)}, tol) is None
    assert m.worst["h"][1] == pytest.approx(5e-5) and m.share == pytest.approx(0.5)
    assert "h max |diff| 5.00e-05" in m.describe() and "50% of the bound" in m.describe()


def test_the_ini_table_is_shown_in_the_header_and_used(sv_pytester):
    sv_pytester.makeini("""
[pytest]
specverify_tolerance =
    name = my-fp32
    atol = 2e-5
    logits.atol = 3e-4
""")
    sv_pytester.makepyfile("""
def test_profile(specverify_tolerance):
    assert specverify_tolerance.name == "my-fp32" and specverify_tolerance.bounds("logits") == (3e-4, 1e-5)
""")
    result = sv_pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*profile=ini table*",
                                 "specverify profile: my-fp32 (ini specverify_tolerance): atol=2e-05 rtol=1e-05 logits:atol=0.0003*"])


# -- 4: the header names the real port and the summary the measured error ----------------------------
def test_a_conftest_port_is_named_with_its_profile_and_measured_error(sv_pytester):
    _tiny_rnn_project(sv_pytester)
    sv_pytester.makepyfile("""
def test_commit(specverify, specverify_port):
    specverify.commit_equivalence(specverify_port.encode("hello"), k_values=(0, 3))
""")
    result = sv_pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "specverify: port=specverify_port fixture in conftest.py (--specverify-port onebit unused) backend=*",
        "specverify: the port comes from the specverify_port fixture in conftest.specverify_port*",
        "specverify port tiny-rnn: profile fp32 (shipped profile): atol=1e-05*",
        "specverify largest measured error: commit_equivalence: measured *logits max |diff|*of the bound*",
    ])


# -- 2 / 8: sampling checks with power -------------------------------------------------------------------
def test_many_small_contexts_still_have_degrees_of_freedom():
    rng = np.random.default_rng(0)
    groups = {i: (np.bincount(rng.integers(0, 256, size=2), minlength=256).astype(float), np.full(256, 1 / 256))
              for i in range(300)}
    fit = conditional_fit("x", groups, 1e-6)
    assert fit.df > 0 and fit.passed and not fit.vacuous
    assert "TV resolvable" in fit.describe() and "bound" not in fit.describe()


def test_the_controlled_q_makes_the_residual_p_outside_a():
    p = np.random.default_rng(1).dirichlet(np.ones(64))
    q, in_a = controlled_q(p, 5)
    assert abs(q.sum() - 1) < 1e-12 and (q > 0).all()  # no zero-probability gap in q
    r = np.maximum(p - q, 0)
    assert (r[in_a] == 0).all() and np.allclose(r[~in_a] / r.sum(), p[~in_a] / p[~in_a].sum())
    assert 0.4 < p[in_a].sum() < 0.7  # a residual drawn from p is ~1/2 in total variation from the truth


def test_a_residual_drawn_from_p_is_caught_by_its_distribution():
    port = mutants.build("residual_from_p")
    with pytest.raises(SpecVerifyFailure, match=r"token at a rejection ~ normalize\(max\(0, p - q\)\)"):
        sampling_distribution(port, port.encode("ab"), samples=300, temperature=1.0)


def test_a_sampling_check_without_power_fails_instead_of_passing():
    flat = TinyRnnPort(logit_scale=0.01)  # p is all but uniform: the temperature barely changes it
    with pytest.raises(SpecVerifyFailure, match=r"^round's first token x1 \| t0 ~ p\(\. \| t0\): the check cannot see a "
                                                r"temperature left out of p: power 0\.\d+ .*too close"):
        sampling_distribution(flat, IDS, samples=200, temperature=0.7)


def test_a_passing_sampling_check_reports_its_power():
    r = sampling_distribution(TinyRnnPort(), IDS, samples=300, temperature=0.7)
    assert len([k for k in r.metrics if not k.startswith("power")]) == 11  # no taps: part 3 does not run, and says so
    assert any("part 3 (rounds of many" in n and "passes no taps" in n for n in r.notes), r.notes
    assert r.metrics["power: temperature left out of p"] >= 0.99
    assert r.metrics["power: residual drawn from p instead of normalize(max(0, p - q))"] >= 0.99


def _root():
    from pathlib import Path

    return Path(__file__).resolve().parents[3]


def _tiny_rnn_project(pytester) -> None:
    """A pytester project whose conftest overrides the port with tests/specverify/ports/tiny_rnn's TinyRnnPort."""
    pytester.syspathinsert(str(_root()))
    pytester.makeconftest("""
import pytest
from tests.specverify.ports.tiny_rnn import TinyRnnPort

@pytest.fixture(scope="session")
def specverify_port():
    return TinyRnnPort()
""")


def test_the_guide_counts_the_battery_right():
    import inspect
    import re

    from pytest_specverify import battery

    functions = [n for n, f in vars(battery).items() if n.startswith("test_") and inspect.isfunction(f)]
    items = sum(len(m.args[1]) if (m := next((m for m in getattr(f, "pytestmark", []) if m.name == "parametrize"), None))
                else 1 for n, f in vars(battery).items() if n in functions)
    items += 10 - 1  # test_greedy_identity runs once per prompt (10 by default)
    text = (_root() / "docs" / "verify-your-port.md").read_text()
    assert re.search(rf"battery.py`, {len(functions)} test functions, {items} items per port", text), (len(functions), items)
    assert "11 sub-tests at T = 1.0 and 13 at T = 0.7" in text


def test_a_loop_that_refuses_k0_with_a_value_error_is_a_visible_skip():
    class Refuses(TinyRnnPort):
        def speculative_generate(self, prompt, draft, *, k, **kw):
            if k < 1:
                raise ValueError(f"k={k} is out of range: it must be 1..15")
            return super().speculative_generate(prompt, draft, k=k, **kw)

    with pytest.raises(NotSupported, match=r"its loop refuses k = 0 \(ValueError: k=0 is out of range"):
        forced_acceptance(Refuses(), IDS, k=0, tol=profile("fp32"))


def test_the_batterys_replay_check_on_a_correct_fp32_port_is_a_skip_naming_the_comparison(sv_pytester):
    _tiny_rnn_project(sv_pytester)
    sv_pytester.makepyfile("from pytest_specverify.battery import test_replay_check, test_loop_with_zero_drafts  # noqa: F401\n")
    result = sv_pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*keep and replay agree within profile 'fp32' (max |diff| k=1 *the port's own "
                                 "replay check is not supported*"])
