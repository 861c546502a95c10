"""Fixtures for the CLI tests: a shared cache for the built-in pair, and small pairs written by path."""
from __future__ import annotations

import json

import pytest

from onebit_engine.cli import main
from onebit_engine.draft import write_synthetic_draft
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint

from .refusals import no_hang  # noqa: F401 (a fixture: a blocked read fails the test instead of hanging it)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onebit-cache")


@pytest.fixture(autouse=True)
def _cache_env(cache_dir, monkeypatch):
    monkeypatch.setenv("ONEBIT_CACHE_DIR", str(cache_dir))


def _pair(root, seed, *, hidden=32):
    cfg = tiny_config(hidden_size=hidden)
    target = write_checkpoint(root / "target", cfg, random_weights(cfg, seed))
    draft = write_synthetic_draft(root / "draft", cfg, version=2, block_size=4, seed=seed + 1)
    return target, draft


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """(target folder, draft folder): a tiny hybrid target and a DFlash 2 draft with block size 4."""
    return _pair(tmp_path_factory.mktemp("pair"), 11)


@pytest.fixture(scope="session")
def other_pair(tmp_path_factory):
    """Same shapes as ``pair``, other weights: stage files from it must be refused."""
    return _pair(tmp_path_factory.mktemp("other"), 23)


@pytest.fixture(scope="session")
def wide_pair(tmp_path_factory):
    """A pair with another hidden size: its draft does not fit ``pair``'s target."""
    return _pair(tmp_path_factory.mktemp("wide"), 5, hidden=48)


@pytest.fixture
def run(capsys):
    """run(*argv) -> (exit code, stdout, stderr), in process."""

    def _run(*argv):
        code = main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


@pytest.fixture
def run_json(run):
    def _run(*argv):
        code, out, err = run(*argv, "--json")
        assert code == 0, err
        return json.loads(out)

    return _run


@pytest.fixture(scope="session")
def stages(tmp_path_factory, pair):
    """(capture, draft) stage files of ``pair`` (probe capture of 10 tokens, then probe draft); only read."""
    d = tmp_path_factory.mktemp("stages")
    m = ["--model", str(pair[0]), "--draft", str(pair[1])]
    assert main(["probe", "capture", *m, "--prompt-ids", "1 2 3", "--max-new-tokens", "10", "--out", str(d / "cap.st")]) == 0
    assert main(["probe", "draft", *m, "--capture", str(d / "cap.st"), "--out", str(d / "dr.st")]) == 0
    return d / "cap.st", d / "dr.st"
