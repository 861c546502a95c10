"""No command prints a traceback on bad input: every file a command reads is replaced, in turn, by a
broken one (missing, a folder, empty, random bytes, JSON of the wrong shape, not UTF-8, a file of the
wrong kind), and every run must end with exit 2 and one line naming the file - or succeed."""
import json
import os
import shutil

import pytest

from onebit_engine.cli import main

BROKEN_FILES = ["missing", "folder", "empty", "random", "json-list", "json-null", "json-nan", "not-utf8", "weights"]
BROKEN_FOLDERS = ["missing", "file", "empty", "config-only", "config-garbage", "config-list", "config-not-utf8",
                  "weights-empty", "weights-random", "weights-half", "tokenizer-garbage"]


def _broken_file(path, kind, pair):
    if kind == "missing":
        return path
    if kind == "folder":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(os.urandom(3000))
    elif kind == "json-list":
        path.write_text("[1, 2, 3]")
    elif kind == "json-null":
        path.write_text("null")
    elif kind == "json-nan":
        path.write_text('{"results": NaN, "provenance": {}}')
    elif kind == "not-utf8":
        path.write_bytes(b"\xff\xfe\x00{\x80")
    elif kind == "weights":
        shutil.copy(next(pair[0].glob("*.safetensors")), path)
    return path


def _broken_folder(path, kind, good):
    if kind == "missing":
        return path
    if kind == "file":
        path.write_text("not a folder")
        return path
    if kind == "empty":
        path.mkdir()
        return path
    shutil.copytree(good, path)
    st = next(path.glob("*.safetensors"))
    if kind == "config-only":
        st.unlink()
    elif kind == "config-garbage":
        (path / "config.json").write_text("{not json")
    elif kind == "config-list":
        (path / "config.json").write_text("[]")
    elif kind == "config-not-utf8":
        (path / "config.json").write_bytes(b'{"model_type": "\xff"}')
    elif kind == "weights-empty":
        st.write_bytes(b"")
    elif kind == "weights-random":
        st.write_bytes(os.urandom(5000))
    elif kind == "weights-half":
        st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])
    elif kind == "tokenizer-garbage":
        (path / "tokenizer.json").write_text("{broken")
    return path


def _check(argv, capsys, *, may_pass=False):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    if may_pass and code == 0:
        return
    assert code == 2, f"{argv}: exit {code}\n{out.err}"
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onebit: error: "), f"{argv}:\n{out.err}"


@pytest.mark.parametrize("kind", BROKEN_FOLDERS)
@pytest.mark.parametrize("role", ["model", "draft"])
@pytest.mark.parametrize("command", ["generate", "loop", "probe-capture", "bench", "inspect", "quantize"])
def test_broken_checkpoint_folder(tmp_path, capsys, pair, command, role, kind):
    if role == "draft" and command in ("generate", "quantize"):
        pytest.skip(f"{command} reads no draft")
    bad = _broken_folder(tmp_path / "bad", kind, pair[0] if role == "model" else pair[1])
    model, draft = (bad, pair[1]) if role == "model" else (pair[0], bad)
    small = ["--prompt-ids", "1 2 3", "--max-new-tokens", 3]
    argv = {
        "generate": ["generate", "--model", model, *small],
        "loop": ["loop", "--model", model, "--draft", draft, *small, "--no-check"],
        "probe-capture": ["probe", "capture", "--model", model, "--draft", draft, *small, "--out", tmp_path / "c.st"],
        "bench": ["bench", "--model", model, "--draft", draft, *small, "--repeats", 1, "--k", 1],
        "inspect": ["inspect", bad],
        "quantize": ["quantize", "--model", model, "--out", tmp_path / "q.safetensors"],
    }[command]
    # a tokenizer that is never needed (token ids given) may be ignored; inspect lists what it can read
    _check(argv, capsys, may_pass=kind == "tokenizer-garbage" or (command == "inspect" and kind == "tokenizer-garbage"))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("kind", BROKEN_FILES)
@pytest.mark.parametrize("role", ["capture", "drafts", "prompts", "compare", "inspect"])
def test_broken_input_file(tmp_path, capsys, pair, stages, role, kind):
    bad = _broken_file(tmp_path / "bad.file", kind, pair)
    m = ["--model", pair[0], "--draft", pair[1]]
    argv = {
        "capture": ["probe", "score", "--capture", bad, "--drafts", stages[1]],
        "drafts": ["probe", "score", "--capture", stages[0], "--drafts", bad],
        "prompts": ["probe", "capture", *m, "--prompts", bad, "--max-new-tokens", 2, "--out", tmp_path / "c.st"],
        "compare": ["bench", "--compare", bad, bad],
        "inspect": ["inspect", bad],
    }[role]
    _check(argv, capsys, may_pass=role == "inspect" and kind == "weights")


def test_probe_draft_on_a_broken_capture(tmp_path, capsys, pair):
    for kind in BROKEN_FILES:
        bad = _broken_file(tmp_path / f"bad-{kind}", kind, pair)
        _check(["probe", "draft", "--model", pair[0], "--draft", pair[1], "--capture", bad, "--out", tmp_path / "d.st"],
               capsys)


@pytest.mark.parametrize("text", ["", "   ", "1 two", "-1", "1e3", "99999999999999999999999", "[1, 2]"])
def test_bad_prompt_ids(capsys, pair, text):
    _check(["generate", "--model", pair[0], "--prompt-ids", text, "--max-new-tokens", 2], capsys, may_pass=text == "[1, 2]")


@pytest.mark.parametrize("items", [[], [[]], [[-1]], [[10**9]], [["a", 1]], [1.5], [{"ids": "x"}], {"prompts": 3}, [None]])
def test_bad_prompt_file_entries(tmp_path, capsys, pair, items):
    f = tmp_path / "p.json"
    f.write_text(json.dumps(items))
    _check(["probe", "capture", "--model", pair[0], "--draft", pair[1], "--prompts", f, "--max-new-tokens", 2,
            "--out", tmp_path / "c.st"], capsys)
