"""Options of ``onebit synth`` and ``onebit bench`` (plain, ``--shape``, ``--compare``) a sweep found mishandled:
each ignored silently, clamped silently, blamed on the wrong flag or left a half-written folder. Every case
refuses in one line with exit 2 before any synthesis or measurement (tiny shapes only)."""
from __future__ import annotations

import errno
import json

import pytest

from onebit_engine.synth import folder as synth_folder

from .refusals import refused as _refused

SHRUNK = "qwen3.5-0.8b-shrunk"


@pytest.mark.parametrize("flag, value", [("--seed", "0"), ("--seed", "5"), ("--acceptance", "0.8"), ("--format", "int8"),
                                         ("--cache", "c")])
def test_plain_bench_refuses_a_scale_flag_even_at_its_default(run, flag, value):
    """--seed only seeds the synthesized pair; plain bench ran with it (and --acceptance 0.8) and ignored it."""
    code, out, err = run("bench", "--max-new-tokens", 4, "--repeats", 1, "--prompt-ids", "1 2", flag, value)
    _refused(code, err, flag, "--shape NAME")
    assert out == ""


def test_bench_shape_empty_is_not_a_plain_bench(run, tmp_path):
    """--shape '' was read as no --shape: a plain bench of the built-in pair ran, or --cache was blamed."""
    code, out, err = run("bench", "--shape", "", "--max-new-tokens", 4, "--repeats", 1)
    _refused(code, err, "shape ''", "is not known")
    assert out == ""
    code, _, err = run("bench", "--shape", "", "--cache", tmp_path / "c")
    _refused(code, err, "shape ''")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("extra", [["--out", "OUT"], ["--shape", SHRUNK], ["--repeats", "5"], ["--k", "3"],
                                   ["--model", "/nonexistent"], ["--max-new-tokens=32"], ["--seed", "1"]])
def test_compare_refuses_the_flags_it_would_not_use(run, tmp_path, extra):
    """--compare read two files and ignored every measuring flag, --out included (no file was written)."""
    a = tmp_path / "a.json"
    a.write_text("{}")
    extra = [str(tmp_path / "c.json") if e == "OUT" else e for e in extra]
    code, out, err = run("bench", "--compare", a, a, *extra)
    _refused(code, err, extra[0].split("=")[0], "--compare")
    assert out == "" and not (tmp_path / "c.json").exists()


def test_allow_mismatch_without_compare_is_refused(run):
    code, out, err = run("bench", "--allow-mismatch", "--max-new-tokens", 4, "--repeats", 1)
    _refused(code, err, "--allow-mismatch", "--compare")
    assert out == ""


def test_compare_names_a_scale_result_and_a_folder_as_such(run, tmp_path):
    scale = tmp_path / "scale.json"
    scale.write_text(json.dumps({"schema": "onebit.scale_bench/1"}))
    code, _, err = run("bench", "--compare", scale, scale)
    _refused(code, err, "scale benchmark result", "bench --shape")
    assert "write it again with `onebit bench --out" not in err
    (tmp_path / "d").mkdir()
    code, _, err = run("bench", "--compare", tmp_path / "d", scale)
    _refused(code, err, "is not a file but a folder")


def test_bench_shape_refuses_more_verify_rows_than_a_round_has(run, tmp_path):
    """--verify-stages 9 with k = 7 was clamped to one pass of 8 rows without a word."""
    code, _, err = run("bench", "--shape", SHRUNK, "--cache", tmp_path / "c", "--verify-stages", 9)
    _refused(code, err, "--verify-stages 9", "k+1 = 8")
    assert not (tmp_path / "c").exists()
    code, _, err = run("bench", "--shape", SHRUNK, "--cache", tmp_path / "c", "--k", 2, "--verify-stages", 4)
    _refused(code, err, "--verify-stages 4", "k+1 = 3")


def test_plain_bench_refuses_more_verify_rows_than_a_round_has(run, pair):
    code, out, err = run("bench", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2 3", "--k", 2,
                         "--max-new-tokens", 6, "--repeats", 1, "--verify-stages", 4)
    _refused(code, err, "--verify-stages 4", "k+1 = 3")
    assert out == ""


def _fail_on_draft(monkeypatch):
    real = synth_folder.write_part

    def write_part(folder, config, *a, **kw):
        if config.get("architectures") == ["DFlash2DraftModel"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(folder, config, *a, **kw)

    monkeypatch.setattr(synth_folder, "write_part", write_part)


def test_synth_that_fails_midway_leaves_no_half_pair(run, tmp_path, monkeypatch):
    """A write that failed on the draft left --out/target behind: a half pair, and a rerun refused as 'not empty'."""
    _fail_on_draft(monkeypatch)
    out = tmp_path / "new"
    code, _, err = run("synth", "--shape", SHRUNK, "--format", "int8", "--out", out)
    _refused(code, err, "No space left")
    assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("synth", "--shape", SHRUNK, "--format", "int8", "--out", empty)
    _refused(code, err, "No space left")
    assert empty.is_dir() and list(empty.iterdir()) == []


def test_a_cached_pair_of_another_shape_under_the_right_marker_is_written_anew(tmp_path, monkeypatch):
    """The marker was trusted alone: another shape's target/ and draft/ beside it were benchmarked and reported as
    this shape (folder_reused true, the wrong weights measured)."""
    from onebit_engine.cli import scale

    shape, other = scale.get_shape(SHRUNK), scale.get_shape("qwen3.6-27b-shrunk")
    folder = tmp_path / f"{SHRUNK}-int8-s0"
    synth_folder.synthesize(other, "int8", folder)
    (folder / synth_folder.MARKER).write_text(json.dumps(synth_folder.marker(shape, "int8", 0)))
    writes = []
    monkeypatch.setattr(scale, "_write", lambda *a: writes.append(a[2]))
    assert scale.cached_pair(shape, "int8", 0, tmp_path, None) == (folder, False)
    assert writes == [folder]
    good = tmp_path / "good"
    synth_folder.synthesize(shape, "int8", good / folder.name)  # a whole pair of this shape is still reused
    assert scale.cached_pair(shape, "int8", 0, good, None) == (good / folder.name, True) and writes == [folder]


@pytest.fixture
def short_machine(monkeypatch):
    """1 GiB of memory and 1 MiB of disk: a check that passed by mistake still writes nothing big."""
    from onebit_engine.measure import resources

    monkeypatch.setattr(resources, "available_memory", lambda: 1 << 30)
    monkeypatch.setattr(resources, "free_disk", lambda folder: 1 << 20)


def test_synth_short_of_memory_names_its_own_way_out(run, tmp_path, short_machine):
    """The refusal told a ternary run to use ternary, and never named --allow-unservable (synth's own way out)."""
    code, _, err = run("synth", "--shape", "qwen3.6-27b", "--format", "ternary", "--out", tmp_path / "p")
    _refused(code, err, "GiB of memory", "--allow-unservable")
    assert "--format (ternary)" not in err and not (tmp_path / "p").exists()
    code, _, err = run("synth", "--shape", "qwen3.6-27b", "--format", "int8", "--out", tmp_path / "p")
    _refused(code, err, "--format ternary", "--allow-unservable")
    code, _, err = run("bench", "--shape", "qwen3.6-27b", "--format", "ternary", "--cache", tmp_path / "c")
    _refused(code, err, "GiB of memory")
    assert "--format (ternary)" not in err and "--allow-unservable" not in err and not (tmp_path / "c").exists()


@pytest.mark.parametrize("as_json", [False, True])
def test_a_scale_result_that_cannot_be_written_is_still_printed(run, tmp_path, monkeypatch, as_json):
    """--out failing at the end (disk full) threw away a measurement of minutes; plain bench prints it instead."""
    from onebit_engine import atomic
    from onebit_engine.errors import OutputError
    from onebit_engine.measure import scale_bench

    monkeypatch.setattr(scale_bench, "run_scale_bench", lambda *a, **kw: {"tokens_per_s": {"plain_t1": 1.0}})

    def full(path, text):
        raise OutputError(f"cannot write output {str(path)!r}: No space left on device (ENOSPC); nothing was written")

    monkeypatch.setattr(atomic, "atomic_write_text", full)
    code, out, err = run("bench", "--shape", SHRUNK, "--format", "int8", "--cache", tmp_path / "c", "--threads", 1,
                         "--max-new-tokens", 9, "--repeats", 1, "--out", tmp_path / "r.json", *(["--json"] if as_json else []))
    _refused(code, err, "r.json", "printed on stdout")
    doc = json.loads(out)
    assert doc["results"] == {"tokens_per_s": {"plain_t1": 1.0}} and ("error" in doc) == as_json
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("kind", ["folder", "fifo", "symlink"])
def test_a_pair_lock_that_is_not_a_file_is_refused(run, tmp_path, no_hang, kind):
    """The lock beside a pair's folder was opened as given: a folder there was a traceback, a FIFO a hang."""
    import os

    lock = tmp_path / f".{SHRUNK}-int8-s0.lock"
    {"folder": lock.mkdir, "fifo": lambda: os.mkfifo(lock), "symlink": lambda: lock.symlink_to("/dev/null")}[kind]()
    code, _, err = run("bench", "--shape", SHRUNK, "--format", "int8", "--cache", tmp_path, "--max-new-tokens", 9,
                       "--repeats", 1)
    _refused(code, err, str(lock), "not a regular file", "remove it")
    assert not (tmp_path / f"{SHRUNK}-int8-s0").exists()


def test_compare_refuses_a_rate_past_any_float(run, tmp_path):
    """An integer rate past a float's range (valid JSON) was an OverflowError traceback, exit 1."""
    from onebit_engine.measure.compare import check_result

    doc = {"schema": "onebit.bench/1", "provenance": {}, "results": {"tokens_per_s": {
        "plain": 1, "plain_1row": 1, "speculative": int("9" * 400)}}}
    with pytest.raises(Exception, match=r"results.tokens_per_s.speculative' is 999.*not a number >= 0"):
        check_result(doc, "b.json")
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    code, out, err = run("bench", "--compare", path, path)
    _refused(code, err, "b.json", "results.tokens_per_s.speculative")
    assert out == ""


def test_a_negative_zero_acceptance_reads_as_zero():
    from onebit_engine.measure.oracle import profile

    assert profile("-0.0", 7).name == "0 per token"
