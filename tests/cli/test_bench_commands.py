"""onebit bench and bench --compare."""
import json

import pytest


@pytest.fixture(scope="module")
def result(tmp_path_factory, pair):
    from onebit_engine.cli import main

    out = tmp_path_factory.mktemp("bench") / "a.json"
    code = main(["bench", "--model", str(pair[0]), "--draft", str(pair[1]), "--prompt-ids", "1 2 3", "--max-new-tokens", "6",
                 "--repeats", "1", "--k", "2", "--out", str(out)])
    assert code == 0
    return out


def test_bench_json_has_ratios_and_full_provenance(result):
    doc = json.loads(result.read_text())
    r, p = doc["results"], doc["provenance"]
    assert set(r["tokens_per_s"]) == {"plain", "plain_1row", "speculative"}
    for key in ("ratio_vs_plain", "ratio_vs_plain_1row", "acceptance", "predicted_speedup", "identical_to_plain"):
        assert key in r
    assert r["identical_to_plain"] is True
    for key in ("engine_version", "git_revision", "backend", "row_set", "kernel_set", "kernel_hash", "commit_path", "k",
                "model_hash", "draft_hash", "machine", "host"):
        assert key in p, key
    assert p["k"] == 2 and p["plain_1row_row_set"] == 1 and len(p["model_hash"]) == 64


def test_bench_builtin_prints_table(run):
    code, out, err = run("bench", "--max-new-tokens", 4, "--repeats", 1, "--prompt-ids", "1 2", "--k", 3)
    assert code == 0, err
    assert "ratio speculative / plain (same row set)" in out and "plain, row set 1" in out


def test_compare_same_provenance(run, result):
    code, out, err = run("bench", "--compare", result, result)
    assert code == 0, err
    assert "NOT COMPARABLE" not in out and "speculative" in out


def test_compare_refuses_mismatched_provenance(run, result, tmp_path):
    doc = json.loads(result.read_text())
    doc["provenance"]["kernel_set"] = "numpy-blas-4row-older-main"
    other = tmp_path / "b.json"
    other.write_text(json.dumps(doc))
    code, out, err = run("bench", "--compare", result, other)
    assert code == 2 and out == ""
    assert "different provenance (kernel_set:" in err and "--allow-mismatch" in err
    code, out, _ = run("bench", "--compare", result, other, "--allow-mismatch")
    assert code == 0 and "NOT COMPARABLE" in out


def test_compare_bad_files(run, result, tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    assert run("bench", "--compare", result, tmp_path / "x.json")[0] == 2
    assert run("bench", "--compare", result, tmp_path / "missing.json")[0] == 2
    (tmp_path / "y.json").write_text("[]")
    code, _, err = run("bench", "--compare", result, tmp_path / "y.json")
    assert code == 2 and "is not an `onebit bench --json` result" in err


def test_bench_k_out_of_range(run, pair):
    code, _, err = run("bench", "--model", pair[0], "--draft", pair[1], "--k", 9)
    assert code == 2 and "--k 9 is out of range: this draft proposes 1..3" in err


@pytest.mark.parametrize("n", [1, 2])
def test_bench_without_room_for_a_speculative_round_is_refused(run, pair, n, tmp_path):
    """1 token: plain decoding has no decode step (was a ZeroDivisionError); 2 tokens: the loop runs 0
    rounds and used to print a speedup of plain decoding against itself."""
    code, out, err = run("bench", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2 3", "--k", 2,
                         "--max-new-tokens", n, "--repeats", 1, "--out", tmp_path / "r.json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"--max-new-tokens {n} leaves no room for a speculative round at k=2" in err
    assert "give --max-new-tokens 3 or more" in err
    assert not (tmp_path / "r.json").exists()


def test_bench_smallest_room_runs_rounds_and_reports_a_ratio(run_json, pair):
    doc = run_json("bench", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2 3", "--k", 2,
                   "--max-new-tokens", 3, "--repeats", 1)
    r = doc["results"]
    assert r["speculative_rounds"] == 1 and r["ratio_vs_plain"] > 0 and r["predicted_speedup"] > 0


def test_bench_records_the_host_and_prompt_set(result):
    from onebit_engine.measure.provenance import prompt_set_hash

    doc = json.loads(result.read_text())
    p, host = doc["provenance"], doc["provenance"]["host"]
    for key in ("cpu", "cpu_flags", "logical_cpus", "physical_cores", "usable_cpus", "python", "numpy", "blas"):
        assert key in host, key
    assert p["prompt_set_hash"] == prompt_set_hash([[1, 2, 3]]) and p["threads"] == 1
    assert p["draft_ops"] in ("numpy", "numba") and "draft_kernel_hash" in p
    assert host["blas"] is None or "runtime" in host["blas"]


def test_bench_nulls_instead_of_nan():
    """A ratio over a zero rate is None with its reason (was NaN or a ZeroDivisionError)."""
    from onebit_engine.measure import bench_runner

    reasons = {}
    assert bench_runner._ratio(1.0, 0.0, "ratio_vs_plain", "plain ran at 0 tokens/s", reasons) is None
    assert bench_runner._ratio(None, 2.0, "x", "no figure", reasons) is None
    assert bench_runner._ratio(1.0, 4.0, "y", "-", reasons) == 0.25
    assert reasons == {"ratio_vs_plain": "plain ran at 0 tokens/s", "x": "no figure"}
    assert bench_runner._median([1.0, None, 3.0]) is None and bench_runner._median([1.0, float("nan")]) is None
    assert bench_runner._median([3.0, 1.0, 2.0]) == 2.0
