"""tools/scale_report.py renders the scale table from `onebit bench --shape --json` documents: the ceiling of
each loop row and the floors of the verify row come from the same run's JSON."""
from __future__ import annotations

import io
import json

import pytest

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
    assert f"(floors in this run: {roof['verify_floor_over_plain_step']:.3f}; {roof['draft_floor_over_plain_step']:.3f})" in page
    # a draft round of 0.154 steps must not read "0.15" beside its target "<= 0.15"
    near = {**doc, "results": {**doc["results"], "draft_over_plain_step": 0.154, "verify_over_plain_step": 1.354}}
    assert "**1.354; 0.154**" in scale_report.render({"27b": near})
    assert "A ceiling is the most the loop could give" in page
    assert "rates are medians" not in page  # documents without a repeat count: nothing claimed
    assert "rates are medians of each row's repeats (27b 3, 08b 9)" in scale_report.render(
        {"27b": {**doc, "repeats": 3}, "08b": {**doc, "repeats": 9}})
    # a loop above its ceiling (a faster minute than the rate's timing) is named: its ceiling is no bound
    beat, below = ({**doc, "results": {**doc["results"], "speedup_vs_plain": roof["loop_ceiling_vs_plain"] + d}} for d in (0.01, -0.01))
    assert "In this run 27b measured above its ceiling: " in scale_report.render({"27b": beat, "08b": below})
    assert "measured above" not in scale_report.render({"27b": below, "08b": below})
    assert "In this run 27b, 08b measured above their ceiling" in scale_report.render({"27b": beat, "08b": beat})
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


def _doc(kernel: str) -> dict:
    return {"provenance": {"kernel": kernel, "kernel_set": f"{kernel}-set", "git_revision": "abc", "host": {},
                           "cpu_vector_flags": []}, "time": "now", "results": {}}


def test_each_kernel_path_writes_its_own_section_and_regime_map(tmp_path):
    """A run on a core without AVX-512 VNNI (Zen 3: the avx2 path) must not replace the VNNI machine's table,
    which the issue's targets are set for, nor its regime map: each path has its own markers."""
    page, loop = tmp_path / "benchmarks.md", tmp_path / "loop.md"
    page.write_text("# Benchmarks\n")
    pts = {"points": [{"hidden": 128, "weight_bytes": 2**20, "speedup_vs_plain": 1.0, "plain_tokens_per_s": 1.0,
                       "plain_stream_gb_s": 1.0, "verify_over_plain_step": 1.0, "draft_over_plain_step": 1.0,
                       "identical_to_plain": True, "kernel": "avx2"}]}
    avx2 = scale_report.markers("avx2")
    loop.write_text(f"x\n{scale_report.REGIME_BEGIN}\nold vnni map\n{scale_report.REGIME_END}\ny\n{avx2[2]}\nold\n{avx2[3]}\n")
    vnni_section = scale_report.render({"kernel": {"path": "avx512vnni", "int8_t1_r8_over_r1": 1.25}})
    assert scale_report.BEGIN in vnni_section and "## Scale: real model shapes" in vnni_section
    scale_report.write(page, vnni_section, *scale_report.markers("avx512vnni")[:2])
    docs = {"kernel": {"path": "avx2", "int8_t1_r8_over_r1": 2.5}, "regime": pts}
    section = scale_report.render(docs)
    assert section.startswith(avx2[0]) and section.rstrip().endswith(avx2[1]) and "without AVX-512 VNNI (host-int `avx2`)" in section
    scale_report.write(page, section, *avx2[:2])
    text = page.read_text()
    assert "**1.25**" in text and "**2.50**" in text  # both machines' tables, each once
    assert text.count(scale_report.BEGIN) == 1 and text.count(avx2[0]) == 1
    scale_report.write(page, section.replace("**2.50**", "**2.40**"), *avx2[:2])  # a second avx2 run replaces only its own
    assert "**1.25**" in page.read_text() and "**2.50**" not in page.read_text() and "**2.40**" in page.read_text()
    json_dir = tmp_path / "json"
    json_dir.mkdir()
    for row, d in docs.items():
        (json_dir / f"{row}.json").write_text(json.dumps(d))
    assert scale_report.main(["--from-json", "--json-dir", str(json_dir), "--rows", "kernel,regime", "--write", str(page),
                              "--write-regime", str(loop)]) == 0
    text = page.read_text()  # the avx2 run's section replaced by its own, the VNNI one untouched
    assert "**1.25**" in text and "**2.50**" in text and text.count(avx2[0]) == 1 and text.count(scale_report.BEGIN) == 1
    text = loop.read_text()
    assert "old vnni map" in text and "\nold\n" not in text and "| 128 | 1 MiB |" in text.split(avx2[2])[1]
    assert scale_report.kernel_path({"27b": _doc("avx2"), "08b": _doc("avx2")}) == "avx2"
    assert scale_report.kernel_path({"regime": pts}) == "avx2"  # `--rows regime` alone names its machine too
    assert scale_report.kernel_path({"rss": {"ratio": 0.6}}) is None  # older JSON: the main section, as before
    with pytest.raises(SystemExit, match="different host-int kernels"):
        scale_report.kernel_path({"27b": _doc("avx2"), "kernel": {"path": "avx512vnni"}})
