"""pytest_specverify: the hook surface (options, markers, header, device gating, fixtures).

A good guest (Hypothesis' plugin is the model: silent unless used). Installed, it loads in every pytest
run of the environment, and acts only where it is in use:

- the run: any ``--specverify-*`` option given (command line, ``addopts`` or ``PYTEST_ADDOPTS``), or the
  project opts in with the ini option ``specverify = true``; then the header is printed, port and profile
  names are checked, and every ``device``-marked test is gated on the NPU probe;
- a test: it uses one of the plugin's fixtures (``specverify``, ``specverify_*``, ``forcing_draft``,
  ``self_draft``) or is a battery test; then the header is printed after
  collection and that test, if ``device``-marked, is gated. A project's own ``device`` tests that use none
  of these run.

Otherwise it prints nothing, never probes the NPU, and imports nothing heavy. Its markers are registered
only where the project has not registered the same name itself. Everything heavy (numpy, hypothesis, the
engine, pyxrt) is imported inside hooks or fixtures. The logic lives in plain modules.
"""
from __future__ import annotations

import functools

import pytest

from .session import Settings, bounded, k_list

SETTINGS = pytest.StashKey[Settings]()
ACTIVE = pytest.StashKey[bool]()  # the run uses the plugin (an option given, or the ini opt-in)

FIXTURES = frozenset(("specverify", "forcing_draft", "self_draft"))
BATTERY = "pytest_specverify.battery"

MARKERS = {
    "device": "device: needs the NPU (/dev/accel/accel* and pyxrt); skipped with the reason when absent, "
              "an error with --specverify-require-device",
    "host_gemm": "host_gemm: runs the device numerics on the host emulation (no NPU needed)",
    "replay_check": "replay_check: runs commits with the replay check on (kept state == replayed state)",
}

# option -> (the Settings field it sets, addoption keywords). Every option defaults to None ("not given");
# the defaults live in Settings alone, and --help shows them from there.
OPTIONS = {
    "--specverify-port": ("port", dict(metavar="NAME", help="port to verify (entry-point group 'specverify.ports')")),
    "--specverify-model": ("model", dict(
        metavar="PATH", help="checkpoint folder, config.json or preset (tiny-qwen3_5, tiny-qwen3_next) for ports that "
                             "load a model, e.g. --specverify-port transformers (None: the port's default)")),
    "--specverify-backend": ("backend", dict(
        metavar="NAME", help="GEMM backend the port is built with (None: the port's default)")),
    "--specverify-row-set": ("row_set", dict(
        metavar="N", type=bounded("--specverify-row-set", 1, 64),
        help="row set (GEMM rows per call) the port is built with (None: the port's default)")),
    "--specverify-prompts": ("prompt_set", dict(
        metavar="SET", choices=("default", "code", "prose", "random", "all"),
        help="prompt set: default, code, prose, random or all")),
    "--specverify-num-prompts": ("num_prompts", dict(
        metavar="N", type=bounded("--specverify-num-prompts", 1, 1000, " (0 would leave greedy identity with no prompt "
                                                                       "to check)"),
        help="number of prompts in the greedy-identity matrix")),
    "--specverify-k": ("k_values", dict(
        metavar="K,K,...", type=k_list, help="draft counts k for the commit checks (the loop checks use the largest; "
                                             "those that run the port's own draft at most its max_k)")),
    "--specverify-profile": ("profile", dict(
        metavar="NAME", help="tolerance profile (exact, fp32, fp16, npu; None: the port's declared one)")),
    "--specverify-seed": ("seed", dict(metavar="INT", type=bounded("--specverify-seed", 0, 2**63 - 1, " (numpy seeds are "
                                                                    "non-negative)"),
                                       help="base seed; each test uses seed + crc32(nodeid)")),
    "--specverify-samples": ("samples", dict(
        metavar="N", type=bounded("--specverify-samples", 100, 1_000_000, " (fewer runs cannot resolve a distribution)"),
        help="seeded runs the sampling-distribution check starts each part with (it adds runs until its named effects "
             "are seen with power 0.99; None: start at 200) and proposals in the draft-sampling check (None: 800)")),
    "--specverify-context": ("context", dict(
        metavar="N", type=bounded("--specverify-context", 1, 1 << 16),
        help="tokens the long-context check fills the context with (at most the port's max_context)")),
    "--specverify-reference": ("reference", dict(
        metavar="PATH", help="a Hugging Face checkpoint folder of the model the port computes: the reference-agreement "
                             "check loads it on the engine's float32 reference backend and compares the port's logits "
                             "(None: the port's reference_path, else the check is skipped)")),
    "--specverify-require-device": ("require_device", dict(
        action="store_true", help="error (instead of skip) when a 'device' test finds no NPU; nox -s device passes it")),
}


def pytest_addoption(parser):
    g = parser.getgroup("specverify", "speculative-decoding verification (pytest-specverify)")
    for flag, (field, kw) in OPTIONS.items():
        kw = dict(kw, dest=field_dest(flag), default=None)
        kw["help"] = f"{kw['help']}. Default: {Settings.default(field)!r}".replace("%", "%%")
        g.addoption(flag, **kw)
    parser.addini("specverify_tolerance", type="linelist", default=[],
                  help="a declared tolerance profile, one 'key = value' a line (name, base, atol, rtol, <kind>.atol, "
                       "<kind>.rtol, tie_margin, kl_max, logprob_max); overrides the port's, not --specverify-profile")
    parser.addini("specverify", type="bool", default=False,
                  help="the project uses specverify in every test: print its header and gate every 'device' test on "
                       "the NPU (without it the plugin acts only in tests that use its fixtures, or when a "
                       "--specverify-* option is given)")


def field_dest(flag: str) -> str:
    """The option's dest on pytest's namespace (``--specverify-row-set`` -> ``specverify_row_set``)."""
    return flag.lstrip("-").replace("-", "_")


def pytest_addhooks(pluginmanager):
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_configure(config):
    own = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    for name, line in MARKERS.items():
        if name not in own:  # the project's own registration of the name stands
            config.addinivalue_line("markers", line)
    given = {field: config.getoption(field_dest(flag)) for flag, (field, _) in OPTIONS.items()}
    config.stash[ACTIVE] = any(v is not None for v in given.values()) or bool(config.getini("specverify"))
    settings = Settings.from_options(given)
    if config.stash[ACTIVE]:
        _check_names(settings.port, settings.profile)
    config.stash[SETTINGS] = settings


def _check_names(port: str, profile_name: str | None) -> None:
    """A port or profile name that names nothing is a usage error before any test runs (not an error in
    every test that asks for the port, nor silently ignored)."""
    from .ports import available_ports
    from .tolerance import PROFILES

    if profile_name is not None and profile_name not in PROFILES:
        raise pytest.UsageError(f"--specverify-profile {profile_name!r} is not a profile; choose one of {sorted(PROFILES)}, "
                                f"or declare your own (docs/verify-your-port.md, section 5)")
    known = available_ports()
    if port not in known:
        raise pytest.UsageError(f"--specverify-port {port!r} is not a registered port; known: {sorted(known)} (register one "
                                f"under the 'specverify.ports' entry-point group, or override the specverify_port fixture)")


def _settings(config) -> Settings:
    s = config.stash[SETTINGS]
    if s.device is None:
        from .device_gate import detect_device

        s.device = config.hook.pytest_specverify_device_status(config=config) or detect_device()
    return s


def _run_profile(config):
    """The profile the run declares (--specverify-profile, else the ini table), or None: the port's own."""
    from .tolerance import from_table, profile

    s = config.stash[SETTINGS]
    if s.profile:
        return profile(s.profile)
    lines = config.getini("specverify_tolerance")
    return from_table(lines) if lines else None


def _port_overrides(config) -> list[str]:
    """The conftest files already loaded that define a ``specverify_port`` fixture."""
    import os

    found = []
    for plugin in config.pluginmanager.get_plugins():
        name = getattr(plugin, "__name__", "")
        if name != __name__ and hasattr(plugin, "specverify_port") and getattr(plugin, "__file__", None):
            found.append(os.path.relpath(plugin.__file__, str(config.rootpath)))
    return sorted(found)


def _uses_plugin(item) -> bool:
    """The test asks for one of the plugin's fixtures (or an override of one), or is a battery test."""
    names = getattr(item, "fixturenames", ())
    if any(n in FIXTURES or n.startswith("specverify_") for n in names):
        return True
    return getattr(getattr(item, "obj", None), "__module__", None) == BATTERY


def _in_use(item) -> bool:
    return item.config.stash[ACTIVE] or _uses_plugin(item)


def pytest_report_header(config):
    if not config.stash[ACTIVE]:
        return []  # unless a test uses the plugin: then the header comes after collection
    return _header(config)


def _header(config) -> list[str]:
    s = _settings(config)
    dev = ("present: " if s.device.present else "absent: ") + s.device.reason
    port = f"{s.port}{f' model={s.model}' if s.model else ''}"
    overrides = _port_overrides(config)
    if overrides:  # a conftest's specverify_port fixture: the option names no port that runs
        port = f"specverify_port fixture in {', '.join(overrides)} (--specverify-port {s.port} unused)"
    lines = [f"specverify: port={port} backend={s.backend or 'port default'} row_set={s.row_set or 'port default'} "
             f"seed={s.seed} profile={s.profile or ('ini table' if config.getini('specverify_tolerance') else 'port default')} "
             f"k={','.join(map(str, s.k_values))} prompts={s.prompt_set} ({s.num_prompts})"]
    # An absent NPU is news only where the port can use one (onebit's xrt backend) or one is required:
    # a transformers or llama.cpp run has no device tests, and "install amdxdna-dkms" there misleads.
    if s.device.present or s.require_device or s.port.startswith("onebit") or overrides:
        lines.append(f"specverify device: {dev}" + (" (required)" if s.require_device else ""))
    tol = _run_profile(config)
    if tol is not None:
        lines.append(f"specverify profile: {tol.summary()}")
    return lines


def pytest_report_collectionfinish(config, start_path, items):
    """Say where the port comes from when a conftest overrides the specverify_port fixture (the header's
    port= is then not the port under test). In a run that did not opt in, the header comes here when a
    collected test uses the plugin."""
    header = [] if config.stash[ACTIVE] or not any(map(_uses_plugin, items)) else _header(config)
    seen = []
    for item in items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).get("specverify_port")
        if not defs:
            continue
        fd = defs[-1]
        if fd.func.__module__ == __name__:
            continue
        where = f"{fd.func.__module__}.{fd.func.__name__}"
        if where not in seen:
            seen.append(where)
    if not seen:
        return header
    return header + [f"specverify: the port comes from the specverify_port fixture in {', '.join(seen)} (it overrides "
            f"--specverify-port); the ports verified and their profiles are listed at the end of the run"]


def pytest_terminal_summary(terminalreporter):
    """The ports the checks ran on (name and profile) and the largest measured error against its bound."""
    ports: dict[str, None] = {}
    worst = None
    for key in ("passed", "failed", "skipped"):
        for rep in terminalreporter.stats.get(key, []):
            for name, value in getattr(rep, "user_properties", []):
                if name == "specverify_port":
                    ports[value] = None
                elif name == "specverify_measured" and rep.when == "call":
                    share, text = value
                    if worst is None or share > worst[0]:
                        worst = (share, text, rep.nodeid)
    if not ports:
        return
    terminalreporter.write_sep("-", "specverify")
    for line in ports:
        terminalreporter.write_line(f"specverify port {line}")
    if worst is not None:
        terminalreporter.write_line(f"specverify largest measured error: {worst[1]} in {worst[2]}")


def pytest_runtest_setup(item):
    if item.get_closest_marker("device") is None or not _in_use(item):
        return
    s = _settings(item.config)
    if s.device.present:
        return
    if s.require_device:
        pytest.fail(f"--specverify-require-device is set but {s.device.reason}", pytrace=False)
    pytest.skip(f"needs the NPU: {s.device.reason}")


def pytest_generate_tests(metafunc):
    if "specverify_prompt" in metafunc.fixturenames:
        from .prompts import select

        s = metafunc.config.stash[SETTINGS]
        chosen = select(s.prompt_set, s.num_prompts, s.seed)
        metafunc.parametrize("specverify_prompt", chosen, ids=[p.id for p in chosen])


# -- fixtures: infrastructure --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def specverify_settings(request) -> Settings:
    return _settings(request.config)


@pytest.fixture(scope="session")
def specverify_port(specverify_settings):
    """The port under test, from --specverify-port. Override this fixture in a conftest.py to verify
    your own port without an entry point."""
    from .ports import load_port_factory
    from .protocol import PortOptions

    s = specverify_settings
    return load_port_factory(s.port)(PortOptions(backend=s.backend, row_set=s.row_set, seed=s.seed, model=s.model))


@pytest.fixture
def specverify_tolerance(request, specverify_port, specverify_settings):
    """The tolerance profile: --specverify-profile, else the ini table ``specverify_tolerance``, else the
    port's declared ``tolerance`` (a profile name or a ``Tolerance`` object)."""
    from .owned import check_port
    from .tolerance import profile

    check_port(specverify_port, ("tolerance",))  # a conftest's fixture may hand anything: say so, not an AttributeError
    tol = _run_profile(request.config) or profile(specverify_port.tolerance)
    request.node.user_properties.append(("specverify_port", f"{getattr(specverify_port, 'name', specverify_port)!s}: "
                                                            f"profile {tol.summary()}"))
    return tol


@pytest.fixture
def specverify_seed(request, specverify_settings) -> int:
    return specverify_settings.test_seed(request.node.nodeid)


@pytest.fixture
def specverify_rng(specverify_seed):
    import numpy as np

    return np.random.default_rng(specverify_seed)


@pytest.fixture
def specverify_prompt():
    """Parametrized by pytest_generate_tests over the selected prompt set; this body is a fallback."""
    from .prompts import shipped

    return shipped()[0]


@pytest.fixture
def specverify_prompt_ids(specverify_prompt, specverify_port) -> list[int]:
    return specverify_prompt.tokens(specverify_port)


@pytest.fixture
def forcing_draft(specverify_port, specverify_tolerance):
    """``forcing_draft(prompt_ids, pattern, max_new_tokens)`` -> a ForcingDraft over the port's own plain
    greedy text (round r keeps ``pattern[r % len]`` correct drafts)."""
    import numpy as np

    from .drafts import ForcingDraft, cycle_script

    port, tol = specverify_port, specverify_tolerance

    def make(prompt, pattern, max_new_tokens: int):
        seq = list(prompt) + list(port.generate(prompt, max_new_tokens=max_new_tokens + max(pattern) + 2))
        taps = port.prefill(port.new_state(), seq).taps
        same = (lambda a, b: tol.close(np.asarray(a), np.asarray(b), "taps")) if taps is not None else None
        return ForcingDraft(seq, port.vocab_size, cycle_script(pattern), reference_taps=taps, same_taps=same, nearest=not tol.exact,
                         prompt_length=len(prompt))

    return make


@pytest.fixture
def self_draft(specverify_port):
    """``self_draft(prompt_ids)`` -> a draft that is the target itself."""
    from .drafts import SelfDraft

    return lambda prompt: SelfDraft(specverify_port, prompt)


# -- fixtures: the checks, bound to the port, the profile, the options and the test's seed ------------------
def _run(request, fn, *args, **kwargs):
    """Call a check; NotSupported becomes a skip, the report lands in the test's user_properties."""
    __tracebackhide__ = True
    import warnings

    from .measure import measuring
    from .protocol import NotSupported

    with measuring() as m:
        try:
            report = fn(*args, **kwargs)
        except NotSupported as exc:
            pytest.skip(str(exc))
    name = getattr(report, "name", getattr(fn, "__name__", "check"))
    if m.worst:
        request.node.user_properties.append(("specverify_measured", (m.share, f"{name}: {m.describe()}")))
        print(f"specverify {name}: {m.describe()}")
        if hasattr(report, "metrics"):
            report.metrics.setdefault("measured", m.describe())
    if report is not None:
        request.node.user_properties.append((name, repr(getattr(report, "metrics", report))))
    for note in getattr(report, "notes", ()):
        warnings.warn(SpecVerifyNote(f"{name}: {note}"), stacklevel=2)
    return report


class SpecVerifyNote(UserWarning):
    """What a passing check did not, or only partly, check (no taps, a near-tie accepted...)."""


@pytest.fixture
def specverify(request, specverify_port, specverify_tolerance, specverify_settings, specverify_seed):
    """The checks bound to the port under test, its profile, the run's options and the test's seed: a
    ``verifier.Verifier`` with one method per check (``specverify.commit_equivalence(ids)``, ...). A
    ``NotSupported`` from a check is a skip, its report lands in the test's user_properties."""
    from .verifier import Verifier

    return Verifier(specverify_port, specverify_tolerance, specverify_settings, specverify_seed,
                    run=functools.partial(_run, request))
