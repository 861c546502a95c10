"""The plugin is a good guest: installed, it loads in every pytest run of the environment, and acts (header,
NPU probe, device gating, name checks) only where it is in use - a test that uses its fixtures, a run that
gives a --specverify-* option, or a project that opts in with ``specverify = true`` (Hypothesis' plugin is the
model: silent unless used)."""
import pytest

# The device gate's probe is the engine's (onebit_engine.gemm.npu.probe): imported before pytester's sys.modules
# snapshot, so the in-process runs that probe can use it (importing numpy again in this worker fails).
import onebit_engine.gemm.npu.probe  # noqa: F401,E402

# A project with its OWN `device` marker (registered in its ini, --strict-markers) that knows nothing of
# specverify; the conftest records any NPU probe the plugin would make (the hook is asked first).
OWN_INI = """
[pytest]
markers =
    device: this project's own device (a serial port here), nothing to do with an NPU
{extra}
"""
PROBE_RECORDER = """
import pathlib

def pytest_specverify_device_status(config):
    pathlib.Path(str(config.rootpath), "probed").write_text("yes")
"""
OWN_TESTS = """
import pytest

@pytest.mark.device
def test_own_device():
    pass

def test_plain():
    pass
"""
MIXED_TEST = """
import pytest

@pytest.mark.device
def test_uses_specverify(specverify_seed):
    pass
"""


def _project(pytester, extra="", mixed=False):
    pytester.makefile(".ini", pytest=OWN_INI.format(extra=extra))
    pytester.makeconftest(PROBE_RECORDER)
    pytester.makepyfile(test_own=OWN_TESTS)
    if mixed:
        pytester.makepyfile(test_mixed=MIXED_TEST)


def _specverify_lines(result) -> list[str]:
    """The plugin's own output (the "plugins:" line names the distribution in any run)."""
    return [line for line in result.stdout.lines if line.startswith("specverify")]


def _probed(pytester) -> bool:
    return (pytester.path / "probed").exists()


@pytest.fixture
def never_probe(monkeypatch):
    """The built-in probe fails the run if anything calls it."""
    from pytest_specverify import device_gate

    def refuse(*args, **kwargs):
        raise AssertionError("detect_device called in a project that does not use specverify")

    monkeypatch.setattr(device_gate, "detect_device", refuse)


def test_a_project_with_its_own_device_marker_runs_its_device_tests_and_hears_nothing(guest_pytester, never_probe):
    _project(guest_pytester)
    result = guest_pytester.runpytest_inprocess("--strict-markers", "-v", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not _specverify_lines(result)
    assert not _probed(guest_pytester)


def test_a_bare_run_imports_neither_numpy_nor_the_engine(guest_pytester):
    _project(guest_pytester)
    guest_pytester.makeconftest(PROBE_RECORDER + '''
import sys

def pytest_sessionfinish(session):
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "onebit_engine", "hypothesis", "pyxrt")
                   or m == "pytest_specverify.ports")
    print("heavy modules:", heavy or "none")
''')
    # the other installed plugins that import numpy themselves are switched off; specverify stays on
    result = guest_pytester.runpytest_subprocess("--strict-markers", "-s", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                              "-p", "no:benchmark", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*heavy modules: none"])
    assert not _specverify_lines(result)


def test_the_own_registration_of_device_stands(guest_pytester):
    _project(guest_pytester)
    result = guest_pytester.runpytest_inprocess("--markers", "-p", "no:cacheprovider")
    text = result.stdout.str()
    assert "@pytest.mark.device: this project's own device" in text
    assert "needs the NPU" not in text  # specverify's line for `device` is not added beside it
    assert "@pytest.mark.host_gemm: runs the device numerics" in text  # its other markers are registered


def test_a_mixed_project_gates_only_the_tests_that_use_specverify(guest_pytester):
    # without the opt-in, the plugin's device gating applies to the device test that uses a specverify
    # fixture; the project's own device test still runs; the header comes after collection
    _project(guest_pytester, mixed=True)
    result = guest_pytester.runpytest_inprocess("--strict-markers", "-v", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["specverify: port=onebit *", "specverify device: absent: *",
                                 "*test_mixed.py::test_uses_specverify SKIPPED*needs the NPU*"])
    assert _probed(guest_pytester)
    assert "test_own.py::test_own_device PASSED" in guest_pytester.runpytest_inprocess(
        "--strict-markers", "-v", "-p", "no:cacheprovider").stdout.str()


@pytest.mark.parametrize("how", ["ini", "option"])
def test_the_ini_opt_in_or_an_option_gates_every_device_test(guest_pytester, how):
    _project(guest_pytester, extra="specverify = true" if how == "ini" else "")
    args = ["--specverify-seed", "0"] if how == "option" else []
    result = guest_pytester.runpytest_inprocess("--strict-markers", "-v", "-rs", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["specverify: port=onebit *", "specverify device: absent: *",
                                 "*test_own.py::test_own_device SKIPPED*needs the NPU*"])
    assert _probed(guest_pytester)


def test_an_opted_out_ini_with_no_use_stays_silent(guest_pytester, never_probe):
    _project(guest_pytester, extra="specverify = false")
    result = guest_pytester.runpytest_inprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not _specverify_lines(result)


def test_an_unknown_port_is_still_refused_when_named(guest_pytester):
    _project(guest_pytester)
    result = guest_pytester.runpytest_inprocess("--specverify-port", "nope", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--specverify-port 'nope' is not a registered port" in result.stderr.str()
