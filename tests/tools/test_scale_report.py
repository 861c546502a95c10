"""tools/scale_report.py renders the scale table from `onebit bench --shape --json` documents: the ceiling of
each loop row and the floors of the verify row come from the same run's JSON."""
from __future__ import annotations

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
    doc["results"]["roofline"] = None  # an older JSON: the rows as before, no ceiling
    assert "ceiling" not in scale_report.render({"27b": doc})
