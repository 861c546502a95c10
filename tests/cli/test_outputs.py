"""--out never destroys data: only a regular file (or a new path) is replaced, never an input or a
checkpoint's file; the path is checked before any work; a failed write names the file and leaves nothing."""
import errno
import os
import shutil
import stat
from pathlib import Path

import pytest

from onebit_engine import atomic
from onebit_engine.errors import OutputError


def _refused(code, out, err, *words):
    assert code == 2, (code, err)
    assert err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.fixture
def cap(run, pair, tmp_path):
    path = tmp_path / "cap.st"
    code, _, err = run("probe", "capture", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2 3",
                       "--max-new-tokens", 4, "--out", path)
    assert code == 0, err
    return path


def _capture(run, pair, out):
    return run("probe", "capture", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2", "--max-new-tokens", 3,
               "--out", out)


def test_symlink_is_not_replaced(run, pair, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "link.st"
    link.symlink_to(target)
    _refused(*_capture(run, pair, link), "symbolic link")
    assert link.is_symlink() and target.read_text() == "keep me"


def test_fifo_is_not_replaced(run, pair, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(*_capture(run, pair, fifo), "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_device_node_is_not_replaced(run, pair, device):
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this machine")
    before = os.lstat(device)
    _refused(*_capture(run, pair, device), "character device")
    after = os.lstat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
@pytest.mark.parametrize("command", ["synth", "quantize"])
def test_a_folder_output_in_the_way_asks_for_a_folder(run, pair, tmp_path, kind, command):
    """synth and quantize write a folder: a link or FIFO at --out is refused asking for a new folder path (it said
    "not a regular file - give the path of a regular file", a way out that was refused next as "a file")."""
    out = tmp_path / "out"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        (tmp_path / "real").mkdir()
        out.symlink_to(tmp_path / "real")
    argv = ("synth", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8") if command == "synth" else ("quantize", "--model", pair[0])
    code, out_text, err = run(*argv, "--out", out)
    _refused(code, out_text, err, "FIFO" if kind == "fifo" else "symbolic link", "not a folder", "new folder path")
    assert "regular file" not in err
    assert not any((tmp_path / "real").iterdir()) if kind == "symlink" else stat.S_ISFIFO(os.lstat(out).st_mode)


def test_folder_is_not_replaced(run, pair, tmp_path):
    (tmp_path / "d").mkdir()
    _refused(*_capture(run, pair, tmp_path / "d"), "folder")


def test_own_input_is_not_overwritten(run, pair, cap):
    before = cap.read_bytes()
    _refused(*run("probe", "draft", "--model", pair[0], "--draft", pair[1], "--capture", cap, "--out", cap), "own input")
    assert cap.read_bytes() == before


def test_checkpoint_weights_are_not_overwritten(run, pair, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(pair[0], model)
    weights = next(model.glob("*.safetensors"))
    before = weights.read_bytes()
    _refused(*_capture(run, pair, weights), "checkpoint")
    _refused(*_capture(run, pair, model / "config.json"), "checkpoint")
    assert weights.read_bytes() == before


def test_new_safetensors_file_is_not_written_into_a_checkpoint_folder(run, pair, tmp_path):
    # it would join the checkpoint: the folder's loader reads every *.safetensors beside config.json
    model = tmp_path / "model"
    shutil.copytree(pair[0], model)
    before = sorted(p.name for p in model.iterdir())
    _refused(*run("quantize", "--model", model, "--out", model / "int8.safetensors"), "inside the checkpoint folder")
    _refused(*_capture(run, pair, model / "cap.safetensors"), "inside the checkpoint folder")
    assert sorted(p.name for p in model.iterdir()) == before
    code, _, err = run("generate", "--model", model, "--prompt-ids", "1 2", "--max-new-tokens", 2)
    assert code == 0, err


def test_loose_weights_file_is_not_overwritten(run, pair, tmp_path):
    loose = tmp_path / "weights.safetensors"
    shutil.copy(next(pair[0].glob("*.safetensors")), loose)
    before = loose.read_bytes()
    _refused(*_capture(run, pair, loose), "model weights")
    assert loose.read_bytes() == before


def test_own_stage_file_may_be_replaced(run, pair, cap):
    code, _, err = _capture(run, pair, cap)
    assert code == 0, err


def test_missing_folder_refused_before_any_work(run, pair, tmp_path, monkeypatch):
    from onebit_engine.measure import bench_runner

    def never(*a, **k):
        raise AssertionError("measured although --out cannot be written")

    monkeypatch.setattr(bench_runner, "run_bench", never)
    _refused(*run("bench", "--model", pair[0], "--draft", pair[1], "--out", tmp_path / "no" / "such" / "r.json"),
             "does not exist")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _refused(*run("bench", "--model", pair[0], "--draft", pair[1], "--out", blocker / "r.json"), "r.json")


def test_quantize_folder_out_rules(run, pair, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("mine")
    _refused(*run("quantize", "--model", pair[0], "--out", full), "not empty")
    assert (full / "x").read_text() == "mine"
    _refused(*run("quantize", "--model", pair[0], "--out", pair[0]), "own input")
    _refused(*run("quantize", "--model", pair[0], "--out", pair[0] / "q"), "overlaps")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("quantize", "--model", pair[0], "--out", empty)
    assert code == 0, err
    assert (empty / "config.json").is_file()


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_follow_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        atomic.atomic_write_text(tmp_path / "f.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f.json").st_mode) == mode


def test_replaced_file_keeps_its_mode(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("old")
    os.chmod(p, 0o640)
    atomic.atomic_write_text(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(os.stat(p).st_mode) == 0o640


def _dead_pid() -> int:
    pid = 4_000_000  # above Linux's pid_max default; searched down until one is free
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_temporaries_of_killed_runs_are_removed(tmp_path):
    dest = tmp_path / "r.json"
    dead = tmp_path / f".r.json.{_dead_pid()}-abc123.tmp"
    live = tmp_path / f".r.json.{os.getppid()}-def456.tmp"  # a live process's write in progress
    other = tmp_path / f".s.json.{_dead_pid()}-abc123.tmp"  # another file's temporary
    for p in (dead, live, other):
        p.write_text("half")
    atomic.atomic_write_text(dest, "{}")
    assert not dead.exists() and live.exists() and other.exists()
    assert dest.read_text() == "{}"


def test_temporary_names_and_the_write_probe(tmp_path):
    """The names the atomic writers give their temporaries, read back (the bench cache tells its own folders by
    them); the probe leaves nothing behind and raises where no file can be made."""
    with atomic.atomic_folder(tmp_path / "target") as tmp:
        assert atomic.temporary_of(tmp.name) == "target"
    assert atomic.temporary_of("target") is None and atomic.temporary_of(".target.tmp") is None
    atomic.probe_writable(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
    with pytest.raises(OSError):
        atomic.probe_writable(tmp_path / "missing")


def test_a_folder_is_published_only_after_its_files_are_synced(tmp_path, monkeypatch):
    """Every file of an atomic folder (nested ones too) and every folder is fsync'ed before the rename that
    publishes it: a crash right after the rename must not leave a pair folder of empty files."""
    synced = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src, dst):
        on_disk = [str(p.resolve()) for p in [Path(src), *Path(src).rglob("*")]]
        missing = [p for p in on_disk if p not in synced]
        assert not missing, f"published before these were synced: {missing}"
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(atomic.os, "replace", replace)
    with atomic.atomic_folder(tmp_path / "pair") as tmp:
        (tmp / "config.json").write_text("{}")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "weights.bin").write_bytes(b"x" * 5000)
    assert (tmp_path / "pair" / "sub" / "weights.bin").read_bytes() == b"x" * 5000


def test_a_failed_sync_is_a_failed_write(tmp_path, monkeypatch):
    def broken(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic.os, "fsync", broken)
    with pytest.raises(OutputError) as e:
        with atomic.atomic_folder(tmp_path / "pair") as tmp:
            (tmp / "config.json").write_text("{}")
    msg = str(e.value)
    assert "pair" in msg and "Input/output error" in msg and "\n" not in msg
    assert list(tmp_path.iterdir()) == []


def test_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    dest = tmp_path / "r.json"
    dest.write_text("old")

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", full)
    with pytest.raises(OutputError) as e:
        atomic.atomic_write_text(dest, "{}")
    msg = str(e.value)
    assert str(dest) in msg and "No space left" in msg and "free space" in msg and "\n" not in msg
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_full_disk_in_the_cli_is_one_line(run, pair, tmp_path, monkeypatch):
    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", full)
    _refused(*run("quantize", "--model", pair[0], "--out", tmp_path / "q.safetensors"), "q.safetensors", "No space left")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("as_json", [False, True])
def test_failed_bench_write_still_prints_the_result(run, pair, tmp_path, monkeypatch, as_json):
    import json

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", full)
    argv = ["bench", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2 3", "--max-new-tokens", 4,
            "--repeats", 1, "--out", tmp_path / "r.json"] + (["--json"] if as_json else [])
    code, out, err = run(*argv)
    _refused(code, out, err, "r.json", "printed on stdout")
    doc = json.loads(out)
    assert doc["results"]["tokens_per_s"]["plain"] > 0
    assert ("error" in doc) == as_json
    assert not list(tmp_path.iterdir())
