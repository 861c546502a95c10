"""The ``specverify`` fixture (a ``verifier.Verifier``): one method per check, a None parameter takes the
run's value and any other value (0 included) reaches the check as given, and it is the plugin's one
surface (the ``check_*`` alias fixtures are gone; the check names are written once, as marked methods)."""
import inspect
import subprocess
import sys
import types

import numpy  # noqa: F401  imported before pytester's sys.modules snapshot, so in-process runs can use it
import pytest

import onebit_engine.loop.speculative  # noqa: F401  (same reason)
import numpy.fft  # noqa: F401,E402  (same reason: see test_plugin.py)
import numpy.polynomial  # noqa: F401,E402

try:
    from numba.np.polynomial import polynomial_core, polynomial_functions  # noqa: F401
except ImportError:  # numba is optional
    pass

from pytest_specverify import NotSupported, profile
from pytest_specverify.protocol import own_draft_k
from pytest_specverify.session import Settings
from pytest_specverify.verifier import Verifier

# method -> (module of the check, the check's name)
TARGETS = {
    "commit_equivalence": ("checks", "commit_equivalence"),
    "greedy_identity": ("checks", "greedy_identity"),
    "greedy_acceptance": ("checks", "greedy_acceptance"),
    "forced_acceptance": ("checks", "forced_acceptance"),
    "self_draft": ("checks", "self_draft_accepts_all"),
    "replay": ("replay", "replay_matches_keep"),
    "sampling": ("sampling_check", "sampling_distribution"),
    "draft_sampling": ("draft_sampling", "draft_sampling"),
    "fuzz": ("fuzz", "run_commit_fuzz"),
    "prefill_consistency": ("reprefill", "decode_prefill_consistency"),
    "prefill_onto_state": ("prefill_state", "prefill_onto_state"),
    "long_context": ("long_context", "long_context"),
    "draft_consistency": ("checks", "draft_consistency"),
    "reference": ("reference", "reference_agreement"),
}

# The signatures of the check_* closures the methods replace (keyword names and None defaults kept).
SIGNATURES = {
    "commit_equivalence": "(prompt, k_values=None, **kw)",
    "greedy_identity": "(prompt, draft=None, *, k=None, max_new_tokens=None, **kw)",
    "greedy_acceptance": "(prompts=None, draft=None, *, k=None, max_new_tokens=None, **kw)",
    "forced_acceptance": "(prompt, k=None, **kw)",
    "self_draft": "(prompt, k=None, max_new_tokens=None, **kw)",
    "replay": "(prompt, k_values=None)",
    "sampling": "(prompt, samples=None, **kw)",
    "draft_sampling": "(prompt, samples=None, k=None, **kw)",
    "fuzz": "(prompt, k_max=None, **kw)",
    "prefill_consistency": "(prompt, max_new_tokens=None, **kw)",
    "prefill_onto_state": "(prompt, k=None, **kw)",
    "long_context": "(prompt, length=None, k=None, **kw)",
    "draft_consistency": "(prompt, k=None, max_new_tokens=None, **kw)",
    "reference": "(prompts=None, *, path=None, max_new_tokens=None, **kw)",
}

NO_TOLERANCE = {"greedy_acceptance"}  # it counts accepted drafts and compares no numbers
DRAFT = object()  # a draft given to greedy_identity (the spy never runs it)

# method -> (the falsy values given explicitly, what the check must receive: kwargs, or index 2 of args)
EXPLICIT = {
    "commit_equivalence": (dict(k_values=()), {2: ()}),
    "greedy_identity": (dict(draft=DRAFT, k=0, max_new_tokens=0), {"k": 0, "max_new_tokens": 0}),
    "greedy_acceptance": (dict(draft=DRAFT, k=0, max_new_tokens=0), {"k": 0, "max_new_tokens": 0}),
    "forced_acceptance": (dict(k=0), {"k": 0}),
    "self_draft": (dict(k=0, max_new_tokens=0), {"k": 0, "max_new_tokens": 0}),
    "replay": (dict(k_values=()), {2: ()}),
    "sampling": (dict(samples=0), {"samples": 0}),
    "draft_sampling": (dict(samples=0, k=0), {"samples": 0, "k": 0}),
    "fuzz": (dict(k_max=0, seed=0), {"k_max": 0, "seed": 0}),
    "prefill_consistency": (dict(max_new_tokens=0), {"max_new_tokens": 0}),
    "prefill_onto_state": (dict(k=0), {"k": 0}),
    "long_context": (dict(length=0, k=0), {"length": 0, "k": 0}),
    "draft_consistency": (dict(k=0, max_new_tokens=0), {"k": 0, "max_new_tokens": 0}),
    "reference": (dict(path="ckpt", max_new_tokens=0), {"reference": "ckpt", "max_new_tokens": 0}),
}


def _defaults(s: Settings, port, seed: int) -> dict:
    """What each method hands its check when every parameter is left at None."""
    spec, own = s.spec_k, own_draft_k(port, s.spec_k)
    return {
        "commit_equivalence": {2: s.k_values, "seed": seed},
        "greedy_identity": {"k": own, "max_new_tokens": s.max_new_tokens},  # the port's own draft: at most max_k
        "greedy_acceptance": {"k": own, "max_new_tokens": s.max_new_tokens},
        "forced_acceptance": {"k": spec},
        "self_draft": {"k": spec, "max_new_tokens": s.max_new_tokens},
        "replay": {2: s.k_values, "seed": seed},
        "sampling": {"samples": s.samples, "seed": seed},
        "draft_sampling": {"samples": 800 if s.samples is None else s.samples, "k": own, "seed": seed},
        "fuzz": {"k_max": spec, "seed": seed},
        "prefill_consistency": {"max_new_tokens": s.max_new_tokens, "seed": seed},
        "prefill_onto_state": {"k": min(spec, 3), "seed": seed},
        "long_context": {"length": s.context, "k": spec, "seed": seed},
        "draft_consistency": {"k": own, "max_new_tokens": s.max_new_tokens},
        "reference": {"reference": str(port.reference_path), "max_new_tokens": 8},
    }


@pytest.fixture
def spies(monkeypatch):
    """Every check replaced by a spy that records what it was called with (and runs nothing)."""
    import importlib

    calls = {}
    for method, (module, name) in TARGETS.items():
        def spy(*args, _method=method, **kwargs):
            calls.setdefault(_method, []).append((args, kwargs))

        spy.__name__ = name
        monkeypatch.setattr(importlib.import_module(f"pytest_specverify.{module}"), name, spy)
    return calls


def _received(call, key):
    args, kwargs = call
    return args[key] if isinstance(key, int) else kwargs[key]


# -- (b) an explicit 0 reaches the check as 0; None takes the run's value --------------------------------
@pytest.mark.parametrize("method", sorted(EXPLICIT))
def test_an_explicit_falsy_value_reaches_the_check_as_given(specverify, spies, method):
    given, want = EXPLICIT[method]
    getattr(specverify, method)([1, 2, 3], **given)
    (call,) = spies[method]
    assert {key: _received(call, key) for key in want} == want
    assert specverify.settings.spec_k > 0 and specverify.settings.k_values  # the run's values are not falsy


@pytest.mark.parametrize("method", sorted(EXPLICIT))
def test_none_takes_the_run_value(specverify, spies, specverify_seed, method):
    getattr(specverify, method)([1, 2, 3])
    (call,) = spies[method]
    want = _defaults(specverify.settings, specverify.port, specverify_seed)[method]
    assert {key: _received(call, key) for key in want} == want
    if method not in NO_TOLERANCE:
        assert _received(call, "tol") is specverify.tolerance


def test_a_verifier_outside_pytest_uses_its_settings_and_lets_not_supported_through(spies, monkeypatch):
    port = types.SimpleNamespace(name="fake", max_k=3, make_draft=lambda: DRAFT)
    v = Verifier(port, profile("exact"), Settings(k_values=(0, 5), samples=300), seed=11)
    v.greedy_identity([1])  # the port's own draft, and k = min(5, max_k)
    v.forced_acceptance([1])
    v.forced_acceptance([1], k=0)
    v.draft_sampling([1])
    assert _received(spies["greedy_identity"][0], 2) is DRAFT and _received(spies["greedy_identity"][0], "k") == 3
    assert [_received(c, "k") for c in spies["forced_acceptance"]] == [5, 0]
    assert (_received(spies["draft_sampling"][0], "samples"), _received(spies["draft_sampling"][0], "seed")) == (300, 11)

    def refuses(*args, **kwargs):
        raise NotSupported("not here")

    import pytest_specverify.replay

    monkeypatch.setattr(pytest_specverify.replay, "replay_matches_keep", refuses)
    with pytest.raises(NotSupported, match="not here"):  # the default run calls the check as it is: no skip
        v.replay([1])


def test_the_verifier_module_imports_no_pytest():
    code = ("import sys, pytest_specverify.verifier; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('pytest', '_pytest', 'numpy', 'onebit_engine')]; print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# -- (c) one surface: the methods, named once --------------------------------------------------------
def test_the_methods_keep_the_check_signatures(specverify):
    assert Verifier.CHECKS == tuple(SIGNATURES)
    assert {m: str(inspect.signature(getattr(specverify, m))) for m in Verifier.CHECKS} == SIGNATURES


def test_the_plugin_offers_no_check_alias_fixtures(request):
    from pytest_specverify import plugin

    assert not [n for n in vars(plugin) if n.startswith("check_")]
    for method in Verifier.CHECKS:
        with pytest.raises(pytest.FixtureLookupError):
            request.getfixturevalue(f"check_{method}")


def test_a_method_reports_the_same_twice_on_the_port(specverify, specverify_port):
    ids = specverify_port.encode("hi")
    a = specverify.commit_equivalence(ids, k_values=(1,))
    b = specverify.commit_equivalence(ids, k_values=(1,))
    assert a.counts == b.counts and a.counts and a.metrics.keys() == b.metrics.keys()


# -- (a) the fixture as a user meets it --------------------------------------------------------------
USES_SPECVERIFY = """
def test_commit_equivalence(specverify):
    report = specverify.commit_equivalence(specverify.port.encode("hi"), k_values=(1,))
    assert set(p for p, _, _ in report.counts) == set(specverify.port.commit_paths)

def test_greedy_identity(specverify, specverify_prompt_ids):
    report = specverify.greedy_identity(specverify_prompt_ids, max_new_tokens=8)
    assert report.metrics["tokens"] == 8

def test_the_zero_draft_loop(specverify):
    specverify.forced_acceptance(specverify.port.encode("def f():"), k=0)

def test_the_old_alias_is_gone(check_forced_acceptance):
    pass
"""


def test_the_specverify_fixture_in_a_project(sv_pytester):
    sv_pytester.makepyfile(USES_SPECVERIFY)
    result = sv_pytester.runpytest("--specverify-num-prompts", "1", "-rs", "-p", "no:cacheprovider")
    # k = 0 reaches the check as 0: the engine's loop declares min_k = 1, so it is the visible skip
    # (a k turned into the run's k would run the loop at k = 15 and pass); the old alias fixture is gone
    result.assert_outcomes(passed=2, skipped=1, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'check_forced_acceptance' not found*",
                                 "*SKIPPED*declares min_k = 1: its loop refuses k = 0*"])
