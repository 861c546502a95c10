"""Every count a flag takes is bounded (no option can ask for unbounded work); with --json an error is
still one JSON object on stdout; a closed stdout ends quietly; a missing optional package names its extra."""
import json
import subprocess
import sys

import pytest


def _refused(code, out, err, *words):
    assert code == 2, (code, err)
    assert err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("argv, words", [
    (["loop", "--row-set", "1000000"], ["--row-set", "1..64"]),
    (["loop", "--row-set", "0"], ["--row-set"]),
    (["generate", "--threads", "99999999999"], ["--threads", "1..64"]),
    (["generate", "--threads", "-1"], ["--threads"]),
    (["generate", "--seed", "-1"], ["--seed", "non-negative"]),
    (["generate", "--seed", "1e3"], ["--seed", "not an integer"]),
    (["generate", "--max-new-tokens", "0"], ["--max-new-tokens"]),
    (["generate", "--max-new-tokens", str(1 << 40)], ["--max-new-tokens"]),
    (["generate", "--temperature", "nan"], ["--temperature", "finite"]),
    (["generate", "--temperature", "inf"], ["--temperature", "finite"]),
    (["generate", "--temperature", "-0.5"], ["--temperature"]),
    (["bench", "--repeats", "100000"], ["--repeats", "1..1000"]),
    (["probe", "score", "--capture", "a", "--drafts", "b", "--round-cost", "0"], ["--round-cost", "> 0"]),
    (["probe", "score", "--capture", "a", "--drafts", "b", "--round-cost", "-2"], ["--round-cost"]),
    (["loop", "--k", "1000000000000"], ["--k"]),
])
def test_out_of_range_option_is_one_line(run, argv, words):
    _refused(*run(*argv), *words)


def test_prompt_past_the_context_is_refused(run, pair):
    _refused(*run("generate", "--model", pair[0], "--max-new-tokens", 40000), "max_position_embeddings=32768",
             "with a prompt of 4 tokens allows 1..32765", "--max-new-tokens 40000 is out of range")


@pytest.mark.parametrize("argv", [
    ["generate", "--seed", "-1"],                      # a usage error
    ["generate", "--model", "/no/such/model"],         # a refusal after parsing
])
def test_json_error_is_one_object_on_stdout(run, argv):
    code, out, err = run(*argv, "--json")
    _refused(code, out, err)
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert doc["exit_code"] == 2 and doc["command"] == argv[0] and doc["error"] in err


def test_closed_stdout_ends_quietly():
    """`onebit inspect ... | head -1`: the reader goes away; no traceback, the shell's SIGPIPE status."""
    code = ("import sys; from onebit_engine.cli import main; from onebit_engine.default_model import builtin_paths; "
            "sys.exit(main(['inspect', str(builtin_paths()[0])]))")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the table is written: every write fails
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_missing_optional_package_names_its_extra(run, pair, monkeypatch):
    import onebit_engine.cli.decode as decode

    def needs_rich(args):
        import rich_not_installed_here  # noqa: F401 - stands for an optional package that is absent

    monkeypatch.setitem(__import__("onebit_engine.cli", fromlist=["OPTIONAL_EXTRAS"]).OPTIONAL_EXTRAS,
                        "rich_not_installed_here", "cli")
    monkeypatch.setattr(decode, "cmd_generate", needs_rich)
    _refused(*run("generate"), "rich_not_installed_here", "pip install 'onebit-specverify[cli]'")


def test_unknown_missing_module_is_not_hidden(run, monkeypatch):
    """Only the known optional packages are turned into an install hint; anything else is a bug."""
    import onebit_engine.cli.decode as decode

    def broken(args):
        import no_such_module_at_all  # noqa: F401

    monkeypatch.setattr(decode, "cmd_generate", broken)
    with pytest.raises(ModuleNotFoundError):
        run("generate")
