"""onebit loop keeps its measured k and threads per machine, build, model and draft: the next run reuses
them and says so, --retune measures again, and a kept file that does not hold this key's choice is
measured over (issue 24, point 2)."""
import json
from dataclasses import replace

import pytest

from onebit_engine.measure import tune

KEY = tune.TuneKey(cpu="x86_64 test cpu", build="0.1.0 git abc", kernel="k1 h1 / k1 h1", model="m" * 64, draft="d" * 64,
                   backend="host-int", row_set=16, ks=(1, 2, 3), threads=(1, 2), profile="held-out")
CHOICE = {"k": 2, "threads": 1, "plain_threads": 1, "predicted_speedup": 0.8, "measured_at": "2026-12-03 07:00 UTC"}


def test_a_kept_choice_reads_back_under_its_key_only(tmp_path):
    assert tune.load_choice(tmp_path, KEY) is None
    path = tune.save_choice(tmp_path, KEY, CHOICE)
    assert path.parent == tmp_path and tune.load_choice(tmp_path, KEY) == CHOICE
    for field, value in [("cpu", "another cpu"), ("build", "0.1.0 git def"), ("kernel", "k2 h2 / k1 h1"),
                         ("model", "x" * 64), ("draft", "y" * 64), ("row_set", 8), ("ks", (1, 2)), ("threads", (1,))]:
        assert tune.load_choice(tmp_path, replace(KEY, **{field: value})) is None, field


@pytest.mark.parametrize("damage", ["not json", "another version", "another key", "k outside the candidates",
                                    "threads not an int", "missing field", "NaN speedup", "negative speedup",
                                    "table not an object", "table of junk"])
def test_a_damaged_kept_choice_is_measured_over(tmp_path, damage):
    path = tune.save_choice(tmp_path, KEY, CHOICE)
    doc = json.loads(path.read_text())
    if damage == "not json":
        path.write_text("{half")
    else:
        if damage == "another version":
            doc["version"] = 99
        elif damage == "another key":
            doc["key"]["model"] = "z" * 64
        elif damage == "k outside the candidates":
            doc["choice"]["k"] = 7
        elif damage == "threads not an int":
            doc["choice"]["threads"] = "1"
        elif damage == "NaN speedup":  # json.dumps writes NaN: an edited file is read back as float nan
            doc["choice"]["predicted_speedup"] = float("nan")
        elif damage == "negative speedup":
            doc["choice"]["predicted_speedup"] = -5.0
        elif damage == "table not an object":
            doc["choice"]["table"] = "junk"
        elif damage == "table of junk":
            doc["choice"]["table"] = {"threads=1 k=2": "fast"}
        else:
            del doc["choice"]["predicted_speedup"]
        path.write_text(json.dumps(doc))
    assert tune.load_choice(tmp_path, KEY) is None


def test_loop_reuses_its_choice_and_retune_measures_again(run_json, pair, tmp_path, monkeypatch):
    monkeypatch.setenv("ONEBIT_CACHE_DIR", str(tmp_path))
    measured = []
    real = tune.measure
    monkeypatch.setattr(tune, "measure", lambda *a, **k: measured.append(1) or real(*a, **k))
    args = ("loop", "--model", pair[0], "--draft", pair[1], "--max-new-tokens", 6, "--no-check")
    first = run_json(*args)["configuration"]
    assert first["measured"] and not first["reused"] and len(measured) == 1
    kept = list((tmp_path / "tuned").glob("choice-*.json"))
    assert [str(p) for p in kept] == [first["kept_in"]]
    second = run_json(*args)["configuration"]
    assert second["reused"] and len(measured) == 1  # nothing measured: the same choice, said to be reused
    assert (second["k"], second["threads"], second["plain_threads"]) == (first["k"], first["threads"], first["plain_threads"])
    assert second["measured_at"] == first["measured_at"] and second["predicted_speedup"] == first["predicted_speedup"]
    third = run_json(*args, "--retune")["configuration"]
    assert third["measured"] and not third["reused"] and len(measured) == 2
    # a flag that changes the candidates is another key: measured, and kept beside the first
    fourth = run_json(*args, "--threads", 1)["configuration"]
    assert not fourth["reused"] and len(measured) == 3 and len(list((tmp_path / "tuned").glob("choice-*.json"))) == 2


def test_the_configuration_line_says_reused(run, pair, tmp_path, monkeypatch):
    monkeypatch.setenv("ONEBIT_CACHE_DIR", str(tmp_path))
    args = ("loop", "--model", pair[0], "--draft", pair[1], "--max-new-tokens", 6, "--no-check")
    code, out, err = run(*args)
    assert code == 0, err
    assert "picked as the fastest measured here" in out
    code, out, err = run(*args)
    assert code == 0, err
    assert "reused the choice measured here at " in out and "(--retune measures again)" in out


def test_an_unwritable_cache_costs_a_measurement_not_the_run(run_json, pair, tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("ONEBIT_CACHE_DIR", str(blocked))
    d = run_json("loop", "--model", pair[0], "--draft", pair[1], "--max-new-tokens", 6, "--no-check")
    assert d["configuration"]["measured"] and d["configuration"]["kept_in"] is None
