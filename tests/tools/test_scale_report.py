"""tools/scale_report.py renders the scale table from `onebit bench --shape --json` documents: the ceiling of
each loop row and the floors of the verify row come from the same run's JSON."""
from __future__ import annotations

import io
import json

import scale_report

from onebit_engine.cli import main


def test_the_table_shows_each_rows_ceiling_and_the_floors(tmp_path, capsys):
    args = ["bench", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8", "--acceptance", "0.8", "--cache", str(tmp_path),
            "--max-new-tokens", "12", "--repeats", "1", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    roof = doc["results"]["roofline"]
    page = scale_report.render({"27b": doc, "08b": doc})
    assert page.count(f"this run's ceiling {roof['loop_ceiling_vs_plain']:.2f}") == 2
    assert f"(floors in this run: {roof['verify_floor_over_plain_step']:.2f}; {roof['draft_floor_over_plain_step']:.2f})" in page
    assert "A ceiling is the most the loop could give" in page
    assert "rates are medians" not in page  # documents without a repeat count: nothing claimed
    assert "rates are medians of each row's repeats (27b 3, 08b 9)" in scale_report.render(
        {"27b": {**doc, "repeats": 3}, "08b": {**doc, "repeats": 9}})
    doc["results"]["roofline"] = None  # an older JSON: the rows as before, no ceiling
    assert "ceiling" not in scale_report.render({"27b": doc})


def test_measure_makes_its_cache_and_gives_rows_their_repeats(tmp_path, monkeypatch):
    """The short rows 3x the repeats (one-second runs scatter), the 27B and 35B-A3B rows 2x (their minutes do)."""
    calls = []

    def fake_run(cmd, log):
        calls.append(cmd)
        return json.dumps({"points": []}) if "--regime-point" in cmd else json.dumps({"results": {}})

    monkeypatch.setattr(scale_report, "_run", fake_run)
    monkeypatch.setattr(scale_report, "REGIME_HIDDEN", (128,))
    cache = tmp_path / "not" / "there"
    docs = scale_report.measure(["27b", "08b", "regime"], tmp_path / "json", cache, 2, 12, io.StringIO())
    assert cache.is_dir()  # a fresh clone's first run: `onebit synth --out` refuses a missing parent
    given = [int(c[c.index("--repeats") + 1]) for c in calls]
    assert given == [4, 6, 6]
    assert {r: d["repeats"] for r, d in docs.items()} == {"27b": 4, "08b": 6, "regime": 6}
