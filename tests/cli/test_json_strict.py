"""Every command's --json output (and bench's --out file) is strict JSON: no NaN / Infinity, which
``JSON.parse`` and ``json.loads(..., parse_constant=...)`` reject. A missing figure is null with a reason."""
import json
import math

import pytest

from onebit_engine.cli import ui


def _refuse(name):
    raise AssertionError(f"non-strict JSON constant {name!r}")


def strict_loads(text):
    return json.loads(text, parse_constant=_refuse)


def _all_finite(obj, path="$"):
    """Every number is finite (an overflowing literal such as 1e999 parses to inf without a constant)."""
    if isinstance(obj, float):
        assert math.isfinite(obj), path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _all_finite(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _all_finite(v, f"{path}[{i}]")


@pytest.fixture(scope="module")
def files(tmp_path_factory, pair):
    """Stage files of a 2-token capture (not the session's 10-token ``stages``: probe score must find k >= 2
    with nothing to score, a null with its reason), a quantized file, and room for outputs."""
    from onebit_engine.cli import main

    d = tmp_path_factory.mktemp("strict")
    m = ["--model", str(pair[0]), "--draft", str(pair[1])]
    assert main(["probe", "capture", *m, "--prompt-ids", "1 2", "--max-new-tokens", "2", "--out", str(d / "cap.st")]) == 0
    assert main(["probe", "draft", *m, "--capture", str(d / "cap.st"), "--out", str(d / "dr.st")]) == 0
    assert main(["quantize", "--model", str(pair[0]), "--format", "int8", "--out", str(d / "q.safetensors")]) == 0
    return d


def _commands(pair, d):
    m = ["--model", pair[0], "--draft", pair[1]]
    t = ["--model", pair[0]]
    return {
        "generate": ["generate", *t, "--prompt-ids", "1 2 3", "--max-new-tokens", 4],
        "generate 1 token": ["generate", *t, "--prompt-ids", "1 2 3", "--max-new-tokens", 1],
        "generate sampled": ["generate", *t, "--prompt-ids", "1 2 3", "--max-new-tokens", 3, "--temperature", 0.7],
        "loop": ["loop", *m, "--prompt-ids", "1 2 3", "--max-new-tokens", 5, "--k", 2],
        "loop 1 token": ["loop", *m, "--prompt-ids", "1 2 3", "--max-new-tokens", 1, "--k", 2],
        "probe capture": ["probe", "capture", *m, "--prompt-ids", "3 4", "--max-new-tokens", 2, "--out", d / "c2.st"],
        "probe draft": ["probe", "draft", *m, "--capture", d / "cap.st", "--out", d / "d2.st"],
        "probe score": ["probe", "score", "--capture", d / "cap.st", "--drafts", d / "dr.st"],
        "probe score round cost": ["probe", "score", "--capture", d / "cap.st", "--drafts", d / "dr.st", "--round-cost", 9],
        "bench": ["bench", *m, "--prompt-ids", "1 2 3", "--max-new-tokens", 3, "--repeats", 1, "--k", 2,
                  "--out", d / "bench.json"],
        "inspect target": ["inspect", pair[0]],
        "inspect draft": ["inspect", pair[1]],
        "inspect stage": ["inspect", d / "cap.st"],
        "inspect quantized": ["inspect", d / "q.safetensors"],
        "quantize": ["quantize", *t, "--format", "int4", "--out", d / "q4.safetensors"],
    }


NAMES = ["generate", "generate 1 token", "generate sampled", "loop", "loop 1 token", "probe capture", "probe draft",
         "probe score", "probe score round cost", "bench", "inspect target", "inspect draft", "inspect stage",
         "inspect quantized", "quantize"]


@pytest.mark.parametrize("name", NAMES)
def test_json_output_is_strict(run, pair, files, name):
    code, out, err = run(*_commands(pair, files)[name], "--json")
    assert code in (0, 1), err  # loop --check exits 1 when the outputs differ; the JSON is still printed
    doc = strict_loads(out)
    _all_finite(doc)
    if name == "bench":
        _all_finite(strict_loads((files / "bench.json").read_text()))
    if name == "probe score":  # two tokens a prompt: k >= 2 has nothing to score; null, with a reason
        nulls = [r for r in doc["k"] if r["per_token_acceptance"] is None]
        assert nulls and all("per_token_acceptance" in r["null_reasons"] for r in nulls)


def test_compare_json_is_strict(run, pair, files):
    if not (files / "bench.json").exists():
        test_json_output_is_strict(run, pair, files, "bench")
    code, out, err = run("bench", "--compare", files / "bench.json", files / "bench.json", "--json")
    assert code == 0, err
    assert strict_loads(out)["comparable"] is True


def test_strict_turns_leftover_non_finite_into_null_with_reason():
    import numpy as np

    doc = {"a": float("nan"), "b": [1.0, float("-inf")], "c": {"x": np.float32("nan"), "null_reasons": {"y": "kept"}},
           "d": np.array([np.inf])}
    text = ui.dumps(doc)
    got = strict_loads(text)
    assert got["a"] is None and got["b"] == [1.0, None] and got["c"]["x"] is None and got["d"] == [None]
    assert set(got["null_reasons"]) == {"a", "b[1]", "d[0]"} and "nan" in got["null_reasons"]["a"]
    assert got["c"]["null_reasons"] == {"x": ui.NOT_FINITE.format(value=float("nan")), "y": "kept"}
    assert ui.fmt(float("nan")) == "-" and ui.fmt(None) == "-" and ui.fmt(1.5) == "1.50"
    assert strict_loads(json.dumps(ui.strict({"ok": 1})))["ok"] == 1


def test_loop_check_with_nothing_to_time_reports_no_speedup(run, pair):
    """One token: nothing after the first to time, so the check has no speedup - null with a reason in
    JSON, '-' in the text (was a TypeError formatting None)."""
    argv = ["loop", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2 3", "--max-new-tokens", 1, "--k", 2]
    code, out, err = run(*argv, "--json")
    check = strict_loads(out)["check"]
    assert code == 0 and check["speedup"] is None and "0 tokens/s" in check["null_reasons"]["speedup"]
    code, out, err = run(*argv)
    assert code == 0 and "speedup -x" in out, err
