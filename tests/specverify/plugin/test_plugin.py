"""The plugin tested the way a user meets it: --help, a passing run, a failing run's output, the
device skip and the device-required error, the header, per-test seeds, xdist."""
import subprocess
import sys
from pathlib import Path

import numpy  # noqa: F401  imported before pytester's sys.modules snapshot, so in-process runs can use it
import pytest

import onebit_engine.loop.speculative  # noqa: F401  (same reason)
import tests.specverify.ports.mutants  # noqa: F401

# Modules that in-process runs would import lazily: pytester drops them from sys.modules afterwards, and
# importing them again in this worker fails ("cannot load module more than once" for numpy's C modules,
# "duplicate registration" for numba's polynomial types, which numba loads on its first cached compile).
import numpy.fft  # noqa: F401,E402
import numpy.polynomial  # noqa: F401,E402

try:
    from numba.np.polynomial import polynomial_core, polynomial_functions  # noqa: F401
except ImportError:  # numba is optional
    pass

ROOT = Path(__file__).resolve().parents[3]

DEVICE_TESTS = """
import pytest

@pytest.mark.device
def test_on_npu():
    pass

@pytest.mark.host_gemm
def test_host_emulation():
    pass

@pytest.mark.replay_check
def test_with_replay_check():
    pass
"""


def test_help_shows_every_option_with_its_default(sv_pytester):
    result = sv_pytester.runpytest("--help")
    result.stdout.fnmatch_lines([
        "speculative-decoding verification (pytest-specverify):",
        "*--specverify-port=NAME*", "*Default: 'onebit'", "*--specverify-model=PATH*",
        "*--specverify-backend=NAME*", "*--specverify-row-set=N*",
        "*--specverify-prompts=SET*", "*--specverify-num-prompts=N*", "*--specverify-k=K,K,...*",
        "*--specverify-profile=NAME*", "*--specverify-seed=INT*", "*--specverify-samples=N*",
        "*--specverify-context=N*", "*--specverify-reference=PATH*", "*--specverify-require-device*",
    ])
    text = result.stdout.str()
    block = text[text.index("speculative-decoding verification"):]
    block = block[: block.index("\n\n")]
    assert block.count("Default:") == 13


def test_markers_pass_strict_markers_and_the_device_test_skips_with_the_reason(sv_pytester):
    sv_pytester.makepyfile(DEVICE_TESTS)
    result = sv_pytester.runpytest("--strict-markers", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*needs the NPU: no NPU: no device node matches /dev/accel/accel*"])


def test_require_device_turns_the_skip_into_an_error(sv_pytester):
    sv_pytester.makepyfile(DEVICE_TESTS)
    result = sv_pytester.runpytest("--strict-markers", "--specverify-require-device")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*--specverify-require-device is set but no NPU*"])
    assert result.ret != 0


def test_a_device_status_hook_can_replace_detection(sv_pytester):
    sv_pytester.makeconftest("""
from pytest_specverify import DeviceStatus

def pytest_specverify_device_status(config):
    return DeviceStatus(True, "fake NPU for the test")
""")
    sv_pytester.makepyfile(DEVICE_TESTS)
    result = sv_pytester.runpytest("--specverify-require-device")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["specverify device: present: fake NPU for the test (required)"])


def test_the_device_gate_is_the_engine_probe_without_opening_the_device(monkeypatch):
    import onebit_engine.gemm.npu.probe as engine_device
    from pytest_specverify import DeviceStatus
    from pytest_specverify.device_gate import detect_device

    asked = []

    def probe(**kwargs):
        asked.append(kwargs)
        return engine_device.DeviceStatus(True, "NPU at /dev/accel/npu7, pyxrt importable", generation="npu2")

    monkeypatch.setattr(engine_device, "detect_npu", probe)
    assert detect_device("/dev/accel/npu*") == DeviceStatus(True, "NPU at /dev/accel/npu7, pyxrt importable")
    assert asked == [{"accel_glob": "/dev/accel/npu*", "open_device": False}]


def test_header_names_port_backend_row_set_seed_and_device(sv_pytester):
    sv_pytester.makepyfile("def test_ok(): pass")
    result = sv_pytester.runpytest("--specverify-seed", "7", "--specverify-backend", "reference", "--specverify-row-set", "4")
    result.stdout.fnmatch_lines([
        "specverify: port=onebit backend=reference row_set=4 seed=7 profile=port default k=0,1,3,7,15 prompts=default (10)",
        "specverify device: absent: no NPU*",
    ])


def test_header_leaves_out_the_absent_npu_for_a_port_that_cannot_use_one(sv_pytester):
    # a transformers run has no device tests: "absent: install amdxdna-dkms" there would send a user astray
    sv_pytester.makepyfile("def test_ok(): pass")
    result = sv_pytester.runpytest("--specverify-port", "transformers")
    result.stdout.fnmatch_lines(["specverify: port=transformers *"])
    assert "specverify device" not in result.stdout.str()
    required = sv_pytester.runpytest("--specverify-port", "transformers", "--specverify-require-device")
    assert "specverify device: absent" in required.stdout.str()


def test_each_test_gets_seed_plus_crc32_of_its_nodeid(sv_pytester):
    sv_pytester.makepyfile("""
import zlib

def test_a(specverify_seed, request):
    assert specverify_seed == (7 + zlib.crc32(request.node.nodeid.encode())) & 0xFFFFFFFF

def test_b(specverify_seed, request):
    assert specverify_seed == (7 + zlib.crc32(request.node.nodeid.encode())) & 0xFFFFFFFF
""")
    sv_pytester.runpytest("--specverify-seed", "7").assert_outcomes(passed=2)


PASSING = """
def test_commit_equivalence(specverify, specverify_port):
    specverify.commit_equivalence(specverify_port.encode("hello"), k_values=(0, 2))

def test_greedy_identity(specverify, specverify_prompt_ids):
    report = specverify.greedy_identity(specverify_prompt_ids, max_new_tokens=8)
    assert report.metrics["tokens"] == 8
"""


def test_a_passing_run_on_the_builtin_port(sv_pytester):
    sv_pytester.makepyfile(PASSING)
    result = sv_pytester.runpytest("--specverify-num-prompts", "3", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_greedy_identity?prose-capital?*PASSED*", "*test_greedy_identity?code-python-def?*PASSED*"])


def test_a_failing_run_says_where_the_state_differs(sv_pytester):
    sv_pytester.syspathinsert(str(ROOT))
    sv_pytester.makeconftest("""
import pytest
from tests.specverify.ports import mutants

@pytest.fixture(scope="session")
def specverify_port():
    return mutants.build("kv_trimmed_one_long")
""")
    sv_pytester.makepyfile("""
def test_commit_equivalence(specverify, specverify_port):
    specverify.commit_equivalence(specverify_port.encode("hello"), k_values=(1,))
""")
    result = sv_pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E*pytest_specverify.failure.SpecVerifyFailure: commit path 'trim', k=1, rows ?last, d1..d1? = *, kept 0 rows "
        "(no row kept): after the commit, array 'layer.0.keys': shape (2, 6, 8) but the sequential reference has (2, 5, 8)"
        " - 1 row too many along axis 1",
    ])


def test_a_greedy_divergence_shows_a_token_window_and_the_margin(sv_pytester):
    sv_pytester.syspathinsert(str(ROOT))
    sv_pytester.makeconftest("""
import pytest
from tests.specverify.ports import mutants

@pytest.fixture(scope="session")
def specverify_port():
    return mutants.build("bonus_duplicated")
""")
    sv_pytester.makepyfile("""
def test_greedy(specverify, specverify_port):
    specverify.greedy_identity(specverify_port.encode("The capital of France is"), k=3)
""")
    result = sv_pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E*pytest_specverify.failure.SpecVerifyFailure: speculative output differs from plain greedy decoding at token * of 24, in round *",
        "E*  tokens *..*:", "E*    speculative: * ?*? *", "E*    plain      : * ?*? *",
        "E*  plain logits there: top *, runner-up *, margin *",
    ])


def test_xdist_spreads_the_prompt_matrix(sv_pytester):
    pytest.importorskip("xdist")
    sv_pytester.makepyfile(PASSING)
    result = sv_pytester.runpytest_subprocess("-n", "2", "--specverify-num-prompts", "4", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)


def test_loading_the_plugin_imports_nothing_heavy():
    code = ("import sys, pytest_specverify.plugin; heavy = [m for m in ('numpy', 'onebit_engine', 'hypothesis', 'pyxrt') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("mode, words", [
    ("notaport", ["the port 'int' (int) has no method new_state, method prefill, method step, method verify, "
                  "method commit, method state_arrays, attribute tolerance"]),
    ("nomethod", ["has no method verify:"]),
    ("none", ["prefill() returned logits None"]),
    ("nan", ["returned logits holding nan at row 0", "logits must be finite"]),
    ("shape", ["returned logits of shape", "[5, vocab_size]"]),
    ("dtype", ["returned logits of dtype <U"]),
])
def test_a_broken_port_is_named_in_its_own_terms(sv_pytester, mode, words):
    # before: an AttributeError inside the plugin, a bare IndexError, NaN blamed on state independence, or a pass
    sv_pytester.makeconftest(f"""
import numpy as np
import pytest
from pytest_specverify.adapters import onebit
from pytest_specverify.protocol import PortOptions, Rows

class Broken:
    def __init__(self, port):
        self._p = port
    def __getattr__(self, n):
        if {mode!r} == "nomethod" and n == "verify":
            raise AttributeError(n)
        return getattr(self._p, n)
    def _bad(self, rows):
        z = np.asarray(rows.logits)
        if {mode!r} == "none":
            return Rows(None, rows.taps)
        if {mode!r} == "nan":
            return Rows(np.full_like(z, np.nan), rows.taps)
        if {mode!r} == "shape":
            return Rows(z[:, :7], rows.taps)
        if {mode!r} == "dtype":
            return Rows(z.astype(str), rows.taps)
        return rows
    def prefill(self, st, toks):
        return self._bad(self._p.prefill(st, toks))
    def step(self, st, tok):
        return self._bad(self._p.step(st, tok))

@pytest.fixture(scope="session")
def specverify_port():
    return 42 if {mode!r} == "notaport" else Broken(onebit.make_port(PortOptions()))
""")
    sv_pytester.makepyfile("""
def test_commit_equivalence(specverify):
    specverify.commit_equivalence([1, 2, 3, 4, 5], k_values=[1])
""")
    result = sv_pytester.runpytest()
    out = result.stdout.str()
    assert result.ret != 0 and "PortContractError" in out, out
    for w in words:
        assert w in out, out


def test_the_onebit_port_runs_the_model_it_is_given(sv_pytester, tmp_path):
    # --specverify-model was shown in the header and then ignored: the checks ran on the tiny built-in target
    sv_pytester.makepyfile("""
def test_vocab(specverify_port):
    assert specverify_port.vocab_size == 96
""")
    from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint

    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 0))
    assert cfg.vocab_size == 96
    sv_pytester.runpytest("--specverify-model", str(folder)).assert_outcomes(passed=1)
    result = sv_pytester.runpytest("--specverify-model", str(tmp_path / "nowhere"))
    assert result.ret != 0 and "does not exist or is not a folder" in result.stdout.str()
