"""Messages that diagnose right and help that matches behaviour (issue 24 points 5 and 6): each range error
names the range of the model and draft given, --backend's choices are the registry's, a folder given in
the other role says what it is, a file of another kind is "not safetensors", and every option has help."""
import argparse
import struct

import pytest

from onebit_engine import default_model
from onebit_engine.cli import BACKENDS, build_parser
from onebit_engine.gemm import known_backends


def _refused(code, err, *words):
    assert code == 2 and err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


def test_backend_choices_are_the_registry_s_plus_auto(run):
    assert list(BACKENDS) == ["auto"] + sorted(known_backends(), key=["reference", "host-int", "xrt"].index)
    code, _, err = run("generate", "--backend", "gpu")
    _refused(code, err, "--backend", "'gpu'", "'auto', 'reference', 'host-int', 'xrt'")
    help_text = build_parser()._subparsers._group_actions[0].choices["generate"].format_help()
    for name in BACKENDS:
        assert name in help_text


@pytest.mark.parametrize("k", [0, -1, 4, 10**30])
def test_k_range_is_this_draft_s_and_checked_before_loading(run, pair, monkeypatch, k):
    import onebit_engine.hybrid as hybrid

    def no_load(*a, **kw):
        raise AssertionError("the target was loaded before --k was checked")

    monkeypatch.setattr(hybrid, "load_target", no_load)
    for command in ("loop", "bench"):
        code, _, err = run(command, "--model", pair[0], "--draft", pair[1], "--k", k)
        _refused(code, err, f"--k {k} is out of range", "1..3", "block size 4")


def _builtin_block() -> int:
    from onebit_engine.checkpoint.safetensors import read_config
    from onebit_engine.cli.models import builtin_paths
    from onebit_engine.draft.config import DraftConfig

    return DraftConfig.from_hf(read_config(builtin_paths()[1])).block_size


def test_k_range_of_the_builtin_pair_is_its_block(run):
    code, _, err = run("loop", "--k", 0)
    _refused(code, err, f"1..{_builtin_block() - 1}")


@pytest.mark.parametrize("n", [0, -3, 10**25])
def test_max_new_tokens_range_is_this_model_s(run, pair, n):
    code, _, err = run("generate", "--model", pair[0], "--prompt-ids", "1 2 3", "--max-new-tokens", n)
    _refused(code, err, f"--max-new-tokens {n} is out of range", "max_position_embeddings=32768",
             "prompt of 3 tokens allows 1..32766")


def test_a_draft_folder_as_model_and_a_target_as_draft(run, pair):
    code, _, err = run("generate", "--model", pair[1])
    _refused(code, err, f"--model {pair[1]} is a DFlash draft folder", "as --draft")
    code, _, err = run("loop", "--model", pair[0], "--draft", pair[0])
    _refused(code, err, f"--draft {pair[0]} is a target checkpoint folder", "not a DFlash draft")


def test_inspect_tells_a_foreign_file_from_a_truncated_one(run, pair, tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    code, _, err = run("inspect", garbage)
    _refused(code, err, "not a safetensors file", "more than the safetensors limit")
    assert "truncated" not in err
    short_len = tmp_path / "short.bin"
    short_len.write_bytes(struct.pack("<Q", 500) + b"hello")  # a sane length past the end, and no "{"
    code, _, err = run("inspect", short_len)
    _refused(code, err, "not a safetensors file", "b'h'")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(next(pair[0].glob("*.safetensors")).read_bytes()[:200])
    code, _, err = run("inspect", cut)
    _refused(code, err, "truncated - copy it again")


def _actions(parser: argparse.ArgumentParser, path: str = "onebit"):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(a, argparse._HelpAction):
            yield path, a


def test_every_option_has_help():
    missing = [f"{path} {a.option_strings or a.dest}" for path, a in _actions(build_parser()) if not a.help]
    assert not missing, missing


def test_every_command_takes_json_quiet_and_verbose():
    commands = {path for path, _ in _actions(build_parser())} - {"onebit", "onebit probe"}
    for path in commands:
        flags = {s for p, a in _actions(build_parser()) if p == path for s in a.option_strings}
        assert {"--json", "--quiet", "--verbose"} <= flags, path


def test_k_help_matches_the_builtin_pair():
    """--k's help says the built-in pair's block is 16 (1..15) and bench's default for it is 7."""
    block = _builtin_block()
    text = build_parser()._subparsers._group_actions[0].choices["loop"].format_help()
    flat = " ".join(text.split())
    assert f"block is {block}: 1..{block - 1}" in flat and f"bench - {default_model.RECOMMENDED_K} for the built-in" in flat
