"""``onebit synth`` and ``onebit bench --shape`` as a user runs them: strict JSON, the figures the issue
names, refusals with the memory or disk a run needs."""
from __future__ import annotations

import json

import pytest

from onebit_engine.cli import main
from onebit_engine.measure import resources


def _json(capsys):
    out = capsys.readouterr().out
    return json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_synth_writes_a_servable_pair(tmp_path, capsys):
    out = tmp_path / "pair"
    assert main(["synth", "--shape", "qwen3.6-27b-shrunk", "--format", "ternary", "--out", str(out), "--json"]) == 0
    info = _json(capsys)
    assert info["shape"] == "qwen3.6-27b-shrunk" and (out / "target" / "quantized.safetensors").is_file()
    assert main(["generate", "--model", str(out / "target"), "--prompt-ids", "1 2 3", "--max-new-tokens", "4", "--json"]) == 0
    assert len(_json(capsys)["tokens"]) == 4


def test_synth_says_a_small_size_in_mib(tmp_path, capsys):
    assert main(["synth", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8", "--out", str(tmp_path / "p")]) == 0
    said = capsys.readouterr()
    assert " 0.0 GiB" not in said.out + said.err and " MiB" in said.out + said.err
    assert resources.gib(3 << 30) == "3.0 GiB" and resources.gib(5 << 20) == "5.0 MiB"


def test_synth_refuses_what_this_machine_cannot_serve(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: 8 << 30)
    assert main(["synth", "--shape", "qwen3.6-27b", "--format", "int4", "--out", str(tmp_path / "big")]) == 2
    err = capsys.readouterr().err
    assert "needs about 1" in err and "GiB of memory" in err and "8.0 GiB available" in err
    assert not (tmp_path / "big").exists()


def test_synth_refuses_a_disk_too_small(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(resources, "free_disk", lambda folder: 1 << 20)
    assert main(["synth", "--shape", "qwen3.5-0.8b", "--format", "int8", "--out", str(tmp_path / "d"), "--allow-unservable"]) == 2
    assert "on disk" in capsys.readouterr().err and not (tmp_path / "d" / "target").exists()


def test_bench_shape_reports_every_figure(tmp_path, capsys):
    args = ["bench", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8", "--acceptance", "0.8", "--cache", str(tmp_path),
            "--max-new-tokens", "12", "--repeats", "1", "--json"]
    assert main(args) == 0
    doc = _json(capsys)
    r = doc["results"]
    for key in ("speedup_vs_plain", "plain_bound_share", "identical_to_plain", "peak_rss_bytes", "huge_page_bytes", "tokens_per_round",
                "verify_over_plain_step", "draft_over_plain_step", "verify_pass_ms", "verify_full_ms"):
        assert key in r, key
    assert r["verify_pass_ms"] and all(v["median_ms"] > 0 and v["passes"] >= 1 for v in r["verify_pass_ms"].values())
    assert r["identical_to_plain"] is True and set(r["phase_ms"]) >= {"draft", "verify", "commit", "plain_step"}
    assert r["plain_bound_paired"]["steps"] == 11 and r["plain_bound_share"] == r["plain_bound_paired"]["share"] > 0
    assert doc["provenance"]["ops"] in ("numba", "numpy") and doc["provenance"]["delta_rule"] in (
        "numba", "numpy", "native-avx2", "native-avx512")
    assert doc["provenance"]["kernel_hash"] and doc["config"]["profile"].startswith("0.8")
    assert main(args) == 0 and _json(capsys)["config"]["folder_reused"] is True


@pytest.mark.parametrize("extra, msg", [(["--model", "x"], "--model is not used"), (["--k", "9"], "1..7"),
                                        (["--acceptance", "published"], "no published")])
def test_bench_shape_refusals(tmp_path, capsys, extra, msg):
    assert main(["bench", "--shape", "qwen3.5-0.8b-shrunk", "--cache", str(tmp_path), *extra]) == 2
    assert msg in capsys.readouterr().err


def _bench(cache, *extra):
    return main(["bench", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8", "--acceptance", "0.8", "--cache", str(cache),
                 "--max-new-tokens", "9", "--repeats", "1", "--json", *extra])


def test_bench_shape_cache_that_is_a_file_or_unwritable(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    assert _bench(f) == 2 and "is a file, not a folder" in capsys.readouterr().err
    assert _bench(f / "sub") == 2 and "cannot write a synthesized pair there (Not a directory" in capsys.readouterr().err
    assert f.read_text() == "x"


def test_bench_shape_never_deletes_a_folder_synth_did_not_write(tmp_path, capsys):
    mine = tmp_path / "qwen3.5-0.8b-shrunk-int8-s0"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert _bench(tmp_path) == 2
    assert "holds files synth did not write" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "keep"


def test_bench_shape_rewrites_an_interrupted_pair_and_names_a_damaged_one(tmp_path, capsys):
    folder = tmp_path / "qwen3.5-0.8b-shrunk-int8-s0"
    (folder / "target").mkdir(parents=True)  # a write killed before the draft and the marker
    (folder / "target" / "config.json").write_text("{")
    (folder / ".draft.99999999-x1.tmpdir").mkdir()  # and one killed while writing the draft (atomic_folder's name)
    assert _bench(tmp_path) == 0 and _json(capsys)["config"]["folder_reused"] is False
    weights = folder / "target" / "quantized.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(1000)
    assert _bench(tmp_path) == 2
    err = capsys.readouterr().err
    assert f"the cached pair {folder} does not load" in err and "truncated" in err and f"delete {folder}" in err


def test_bench_shape_waits_for_a_pair_another_process_is_writing(tmp_path, capsys, monkeypatch):
    """Two benches on one cache: the second takes the pair the first finished, never deletes it half-written."""
    import fcntl
    import threading

    from onebit_engine.cli import scale

    lock = tmp_path / ".qwen3.5-0.8b-shrunk-int8-s0.lock"
    held = open(lock, "a")
    fcntl.flock(held, fcntl.LOCK_EX)
    waiting = threading.Event()
    monkeypatch.setattr(scale.ui, "note", lambda args, text: waiting.set() if text.startswith("waiting for another") else None)
    writes = []
    real_write = scale._write
    monkeypatch.setattr(scale, "_write", lambda *a: (writes.append(a[2]), real_write(*a)))
    result = []
    t = threading.Thread(target=lambda: result.append(_bench(tmp_path)))
    t.start()
    assert waiting.wait(60)
    real_write(scale.get_shape("qwen3.5-0.8b-shrunk"), "int8", tmp_path / "qwen3.5-0.8b-shrunk-int8-s0", 0, None)  # the other writer
    fcntl.flock(held, fcntl.LOCK_UN)
    held.close()
    t.join(300)
    assert result == [0] and writes == [] and _json(capsys)["config"]["folder_reused"] is True
