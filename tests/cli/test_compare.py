"""onebit bench --compare: any provenance difference refuses (a missing field is one), unless
--allow-mismatch; malformed result files are one line naming the file and the key."""
import copy
import json
import math

import pytest

from onebit_engine.measure import bench_runner
from onebit_engine.measure.compare import COMPARE_FIELDS


@pytest.fixture(scope="module")
def result(tmp_path_factory, pair):
    from onebit_engine.cli import main

    out = tmp_path_factory.mktemp("compare") / "a.json"
    assert main(["bench", "--model", str(pair[0]), "--draft", str(pair[1]), "--prompt-ids", "1 2 3", "--max-new-tokens", "4",
                 "--repeats", "1", "--k", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture
def doc(result):
    return json.loads(result.read_text())


def _path(doc, field):
    parts = field.split(".")
    cur = doc["provenance"]
    for p in parts[:-1]:
        cur = cur[p]
    return cur, parts[-1]


def test_every_compared_field_is_recorded(doc):
    missing = [f for f in COMPARE_FIELDS if _path(doc, f)[1] not in _path(doc, f)[0]]
    assert missing == []


@pytest.mark.parametrize("field", COMPARE_FIELDS)
@pytest.mark.parametrize("how", ["changed", "missing"])
def test_any_difference_refuses(doc, field, how):
    other = copy.deepcopy(doc)
    holder, key = _path(other, field)
    if how == "changed" and field == "prompt_set_hash":  # the hash must stay the hash of config.prompts
        from onebit_engine.measure.provenance import prompt_set_hash

        other["config"]["prompts"] = [[7, 7]]
        holder[key] = prompt_set_hash([[7, 7]])
    elif how == "changed":
        holder[key] = ["another", "value"]
    else:
        del holder[key]
    with pytest.raises(bench_runner.ProvenanceMismatch) as e:
        bench_runner.compare(doc, other, names=("A.json", "B.json"))
    msg = str(e.value)
    assert "\n" not in msg and "--allow-mismatch" in msg
    assert (f"{field}: missing in B.json" if how == "missing" else f"{field}: ") in msg
    res = bench_runner.compare(doc, other, allow_mismatch=True, names=("A.json", "B.json"))
    assert res["comparable"] is False and [d.split(":")[0] for d in res["differences"]] == [field]


def _as_before_the_rename(doc, value=None):
    """``doc`` as an engine before the op-table rename wrote it: the target's op table under ``recurrence``."""
    old = copy.deepcopy(doc)
    ops = old["provenance"].pop("ops")
    old["provenance"]["recurrence"] = ops if value is None else value
    return old


def test_a_result_from_before_the_ops_rename_still_compares(doc):
    """Results written when the target's op table was called its ``recurrence`` load and compare, both
    ways round; another value under the old name is still a difference (under the new name)."""
    old = _as_before_the_rename(doc)
    assert "ops" not in old["provenance"] and doc["provenance"]["ops"] in ("numpy", "numba")
    for a, b in ((old, doc), (doc, old), (old, old)):
        assert bench_runner.compare(a, b, names=("A.json", "B.json"))["comparable"] is True
    other = "numpy" if doc["provenance"]["ops"] == "numba" else "numba"
    with pytest.raises(bench_runner.ProvenanceMismatch, match=f"ops: '{other}' vs '{doc['provenance']['ops']}'"):
        bench_runner.compare(_as_before_the_rename(doc, other), doc, names=("A.json", "B.json"))
    assert "ops" not in old["provenance"]  # reading a result does not edit it


def test_missing_in_both_is_still_a_difference(doc):
    a, b = copy.deepcopy(doc), copy.deepcopy(doc)
    for d in (a, b):
        del d["provenance"]["host"]["cpu_flags"]
    with pytest.raises(bench_runner.ProvenanceMismatch, match=r"host.cpu_flags: missing in A.json and B.json"):
        bench_runner.compare(a, b, names=("A.json", "B.json"))


def test_cpu_flags_difference_names_the_flags(doc):
    other = copy.deepcopy(doc)
    other["provenance"]["host"]["cpu_flags"] = doc["provenance"]["host"]["cpu_flags"] + " avx512_fake"
    with pytest.raises(bench_runner.ProvenanceMismatch, match=r"host.cpu_flags: only B.json has avx512_fake"):
        bench_runner.compare(doc, other, names=("A.json", "B.json"))


def test_many_differences_stay_one_readable_line(doc):
    other = copy.deepcopy(doc)
    other["provenance"] = {"machine": "elsewhere"}
    with pytest.raises(bench_runner.ProvenanceMismatch) as e:
        bench_runner.compare(doc, other)
    msg = str(e.value)
    assert "\n" not in msg and f"and {len(COMPARE_FIELDS) - 6} more" in msg and len(msg) < 900


def test_cli_refuses_then_prints_labelled(run, result, tmp_path, doc):
    doc["provenance"]["host"]["numpy"] = "1.0.0"
    other = tmp_path / "b.json"
    other.write_text(json.dumps(doc))
    code, out, err = run("bench", "--compare", result, other)
    assert code == 2 and out == "" and "host.numpy:" in err and len(err.strip().splitlines()) == 1
    code, out, err = run("bench", "--compare", result, other, "--allow-mismatch")
    assert code == 0 and "NOT COMPARABLE" in out and "host.numpy: " in out
    code, out, err = run("bench", "--compare", result, other, "--allow-mismatch", "--json")
    res = json.loads(out, parse_constant=_refuse)
    assert code == 0 and res["comparable"] is False and res["differences"][0].startswith("host.numpy:")


def _refuse(name):
    raise AssertionError(f"non-strict JSON constant {name}")


def _mutate(fn):
    def make(doc):
        fn(doc)
        return json.dumps(doc)
    return make


MALFORMED = [
    ("not json", lambda d: "{not json", "is not valid JSON"),
    ("a list", lambda d: "[]", "is not an `onebit bench --json` result"),
    ("null", lambda d: "null", "it holds a JSON NoneType"),
    ("other schema", _mutate(lambda d: d.update(schema="onebit.bench/0")), "it holds schema 'onebit.bench/0'"),
    ("no provenance", _mutate(lambda d: d.pop("provenance")), "key 'provenance' is null, not an object"),
    ("list results", _mutate(lambda d: d.update(results=[1])), "key 'results' is [1] (list), not an object"),
    ("no rates", _mutate(lambda d: d["results"].pop("tokens_per_s")), "key 'results.tokens_per_s' is null"),
    ("rate missing", _mutate(lambda d: d["results"]["tokens_per_s"].pop("plain")), "'results.tokens_per_s.plain' is missing"),
    ("rate a string", _mutate(lambda d: d["results"]["tokens_per_s"].update(speculative="fast")),
     "'results.tokens_per_s.speculative' is 'fast' (str)"),
    ("metric a bool", _mutate(lambda d: d["results"].update(acceptance=True)), "'results.acceptance' is True (bool)"),
    ("negative rate", _mutate(lambda d: d["results"]["tokens_per_s"].update(plain=-5)), "not a number >= 0 or null"),
    ("acceptance > 1", _mutate(lambda d: d["results"].update(acceptance=1.5)), "not a share in 0..1 or null"),
    ("NaN", _mutate(lambda d: d["results"].update(ratio_vs_plain=float("nan"))), "key results.ratio_vs_plain is NaN"),
    ("Infinity", _mutate(lambda d: d["runs"][0].update(plain=float("inf"))), "key runs[0].plain is NaN or Infinity"),
    ("edited prompts", _mutate(lambda d: d["config"].update(prompts=[[9, 9]])), "'provenance.prompt_set_hash' does not match"),
    ("deep", lambda d: "[" * 100_000 + "]" * 100_000, "nests too deeply"),
]


@pytest.mark.parametrize("what,make,needle", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_result_is_one_line_naming_file_and_key(run, result, doc, tmp_path, what, make, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(make(doc))
    code, out, err = run("bench", "--compare", result, bad)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(bad) in err and needle in err, err


def test_unreadable_result_paths(run, result, tmp_path):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{}")
    for path, needle in [(tmp_path, "is not a file"), (tmp_path / "bin.json", "is not UTF-8 text"),
                         (tmp_path / "nope.json", "does not exist")]:
        code, out, err = run("bench", "--compare", path, result)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def _json_values():
    from hypothesis import strategies as st

    leaf = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=True, allow_infinity=True) \
        | st.text(max_size=8)
    return st.recursive(leaf, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
                        max_leaves=12)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def test_any_mutated_result_is_refused_in_one_line_or_compared(doc):
    """Property: replace any value of a good result by any JSON value; compare either refuses with one
    of its own errors (one line) or returns rows whose ratios are finite or null."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    paths = [p for p in _paths(doc) if p]

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(paths), value=_json_values())
    def check(path, value):
        other = copy.deepcopy(doc)
        cur = other
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
        try:
            res = bench_runner.compare(doc, other, allow_mismatch=True)
        except (bench_runner.ResultError, bench_runner.ProvenanceMismatch) as e:
            assert "\n" not in str(e)
            return
        for row in res["rows"]:
            r = row["b_over_a"]
            assert r is None or (isinstance(r, float) and math.isfinite(r)), row

    check()
