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
    assert code == 0, err and "NOT COMPARABLE" not in out


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
    assert code == 2 and "k=9 is out of range" in err
