"""A path given as an empty or blank string is refused by name. ``Path("")`` is the current folder: before,
``inspect ''`` said '. has no config.json', ``quantize --out ''`` blamed the folder '.', and ``quantize --model ''``
quantized the built-in target as if no --model had been given (exit 0). The cache folder is absolute: a relative
XDG_CACHE_HOME is ignored (the XDG specification's rule; it made ./onebit wherever a command ran)."""
from __future__ import annotations

from pathlib import Path

import pytest

from onebit_engine.cli import main
from onebit_engine.cli.models import cache_dir


@pytest.mark.parametrize("argv, flag", [
    (["inspect", ""], "PATH"),
    (["quantize", "--model", "", "--out", "{tmp}/q"], "--model"),
    (["quantize", "--out", ""], "--out"),
    (["generate", "--model", " ", "--max-new-tokens", "1"], "--model"),
    (["loop", "--model", "", "--max-new-tokens", "1"], "--model"),
    (["probe", "draft", "--capture", "", "--out", "{tmp}/d.safetensors"], "--capture"),
    (["bench", "--compare", "", "{tmp}/b.json"], "--compare"),
    (["bench", "--shape", "qwen3.5-0.8b", "--cache", ""], "--cache"),
    (["synth", "--shape", "qwen3.5-0.8b", "--out", ""], "--out"),
])
def test_blank_path_is_refused_by_name(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"onebit: error: {flag} ") and "blank path" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing is written"


def test_optional_flag_names_its_default(capsys):
    assert main(["loop", "--model", "", "--max-new-tokens", "1"]) == 2
    assert "leave --model out for the built-in pair" in capsys.readouterr().err


def test_cache_folder_is_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ONEBIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_dir() == Path.home() / ".cache" / "onebit"  # ignored, as the XDG specification asks
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "onebit"
    monkeypatch.setenv("ONEBIT_CACHE_DIR", "mine")
    assert cache_dir() == tmp_path / "mine" and cache_dir().is_absolute()
