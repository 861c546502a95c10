"""Bad input ends with one line `onebit: error: ...` and exit code 2, never a traceback."""
import pytest


def _one_line(code, out, err):
    assert code == 2
    assert err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["generate", "--model", "/no/such/model"],
    ["loop", "--model", "/no/such/model", "--draft", "/no/such/draft"],
    ["inspect", "/no/such/path"],
    ["quantize", "--model", "/no/such/model", "--out", "/tmp/never.safetensors"],
    ["generate", "--prompt-ids", "1 two 3"],
    ["generate", "--prompt-ids", "1 99999"],
    ["loop", "--k", "0"],
    ["loop", "--k", "99"],
    ["loop", "--check", "--temperature", "0.5"],
    ["loop", "--draft", "/some/draft"],
    ["bench", "--prompts", "/no/such/prompts.json"],
    ["generate", "--backend", "gpu9000"],
    ["nonsense-command"],
    [],
])
def test_bad_input_one_line_exit_2(run, argv):
    _one_line(*run(*argv))


def test_missing_draft_file(run, pair, tmp_path):
    _one_line(*run("loop", "--model", pair[0], "--draft", tmp_path / "absent"))


def test_mismatched_pair(run, pair, wide_pair):
    code, out, err = run("loop", "--model", pair[0], "--draft", wide_pair[1])
    _one_line(code, out, err)
    assert "does not fit this target" in err and "hidden_size" in err


def test_model_without_draft(run, pair):
    code, out, err = run("loop", "--model", pair[0])
    _one_line(code, out, err)
    assert "without --draft" in err


def test_corrupt_checkpoint(run, pair, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(pair[0], bad)
    st = bad / "model.safetensors"
    st.write_bytes(st.read_bytes()[:1000])
    _one_line(*run("generate", "--model", bad, "--max-new-tokens", 2))
    _one_line(*run("inspect", bad))
