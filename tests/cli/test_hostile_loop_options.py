"""Options and files of `onebit generate`, `onebit loop` and `onebit probe` a sweep found mishandled (a hang, a
figure dropped with the wrong reason, a verdict that blamed the wrong flag), each now refused in one line with
exit 2 - or, where the input is valid, answered with the right reason."""
from __future__ import annotations

import json
import os

import pytest

from .refusals import refused as _refused


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache folder of this test only: the kept tuning choice is replaced in it."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("ONEBIT_CACHE_DIR", str(folder))
    return folder


QUICK_LOOP = ("loop", "--max-new-tokens", 2, "--no-check", "--json")


def test_a_kept_choice_that_is_a_fifo_or_a_device_is_not_read(run, own_cache, no_hang):
    code, out, err = run(*QUICK_LOOP)
    assert code == 0, err
    kept = json.loads(out)["configuration"]["kept_in"]
    assert kept is not None and os.path.isfile(kept)
    for name, make in (("fifo", os.mkfifo), ("zero", lambda p: os.symlink("/dev/zero", p))):
        os.unlink(kept)
        make(kept)
        code, out, err = run(*QUICK_LOOP)
        assert code == 0, (name, err)
        conf = json.loads(out)["configuration"]
        assert conf["measured"] and not conf["reused"], (name, conf)


def test_a_round_cost_whose_speedup_overflows_is_refused(run):
    # 2 tokens over 5e-324 steps is inf: the speedup was dropped as "nothing was measured for it"
    code, _, err = run("probe", "score", "--capture", "a", "--drafts", "b", "--round-cost", "5e-324")
    _refused(code, err, "--round-cost", "5e-324", "1e-300", "give e.g. --round-cost 2.5")


def test_the_verdict_of_one_token_names_the_length_not_the_check(run):
    # --check ran, but one token leaves nothing after the first to time: the verdict must not ask for --check
    code, out, err = run("loop", "--max-new-tokens", 1, "--k", 3, "--threads", 1, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["check"]["speedup"] is None and doc["verdict"]["outcome"] == "unknown"
    first = doc["verdict"]["lines"][0]
    assert "give --check" not in first and "--max-new-tokens 2" in first, first


def test_retune_with_k_and_threads_given_is_refused(run):
    # nothing is left to measure: --retune did nothing, silently
    code, _, err = run("loop", "--k", 3, "--threads", 1, "--retune", "--max-new-tokens", 2, "--no-check")
    _refused(code, err, "--retune has nothing to measure", "--k 3", "--threads 1", "drop --retune")
    code, out, err = run("loop", "--k", 3, "--retune", "--max-new-tokens", 2, "--no-check", "--json")
    assert code == 0 and json.loads(out)["configuration"]["measured"], err


def test_score_k_given_twice_scores_both_once(run, stages):
    # `--k 1 --k 2` scored k=2 alone (the first list silently dropped); `--k 2 2` printed k=2 twice
    code, out, err = run("probe", "score", "--capture", stages[0], "--drafts", stages[1], "--k", 1, "--k", 2, 2, "--json")
    assert code == 0, err
    assert [r["k"] for r in json.loads(out)["k"]] == [1, 2]


def test_a_kept_choice_edited_to_say_other_things_is_measured_over(run, own_cache):
    # a multi-line "measured at" reached stdout and the one-line status on stderr; a table of rows no run
    # measured was reported as the measurement
    code, out, err = run(*QUICK_LOOP)
    assert code == 0, err
    kept = json.loads(out)["configuration"]["kept_in"]
    good = json.loads(open(kept).read())
    edits = {"time": {"measured_at": "x\nonebit: error: injected"}, "table": {"table": {"threads=9 k=99": 1.0}}}
    for name, edit in edits.items():
        with open(kept, "w") as f:
            json.dump({**good, "choice": {**good["choice"], **edit}}, f)
        code, out, err = run(*QUICK_LOOP)
        assert code == 0, (name, err)
        conf = json.loads(out)["configuration"]
        assert not conf["reused"] and "injected" not in out and "threads=9 k=99" not in out, (name, conf)


def test_generate_of_one_token_has_no_rate_rather_than_zero(run):
    # one token: nothing after the first was timed, and the JSON said 0.0 tok/s (the text "0.0 tok/s decode")
    code, out, err = run("generate", "--max-new-tokens", 1, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tokens_per_s"] is None and "--max-new-tokens 2" in doc["null_reasons"]["tokens_per_s"], doc
    code, out, err = run("generate", "--max-new-tokens", 1)
    assert code == 0 and "- tok/s decode" in out, out


@pytest.fixture(scope="module")
def short_pair(tmp_path_factory, pair):
    """``pair`` with a context of 64 positions."""
    import shutil

    root = tmp_path_factory.mktemp("short")
    target, draft = root / "target", root / "draft"
    shutil.copytree(pair[0], target)
    shutil.copytree(pair[1], draft)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    return target, draft


@pytest.mark.parametrize("prompt_len", [60, 63])
def test_a_prompt_near_the_context_end_is_tuned_within_it(run, short_pair, own_cache, prompt_len):
    # the loop's calibration run asked for 32 tokens past any prompt: the run was refused, blaming a
    # max_new_tokens=32 nobody gave ("lower max_new_tokens to at most 5" after --max-new-tokens 2)
    ids = " ".join(["5"] * prompt_len)
    code, out, err = run("loop", "--model", short_pair[0], "--draft", short_pair[1], "--prompt-ids", ids,
                         "--max-new-tokens", 2, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["tokens"]) == 2 and doc["check"]["identical"] and doc["configuration"]["measured"], doc["configuration"]


def test_verify_stages_is_a_bounded_row_count(run):
    # any integer passed (99999999999999999999999 ran as one pass, unsaid): no verify has more than 64 rows
    for given in ("65", "99999999999999999999999"):
        code, _, err = run("loop", "--verify-stages", given, "--max-new-tokens", 2)
        _refused(code, err, "--verify-stages", given, "1..64", "'auto', 'one'")
    code, _, err = run("loop", "--verify-stages", 4, "--k", 3, "--threads", 1, "--max-new-tokens", 2, "--no-check")
    assert code == 0, err


def test_verify_stages_past_a_rounds_rows_is_refused_not_clamped(run):
    # --verify-stages 9 with --k 3 ran one pass of 4 rows without a word
    code, _, err = run("loop", "--verify-stages", 9, "--k", 3, "--max-new-tokens", 2)
    _refused(code, err, "--verify-stages 9", "k+1 = 4", "give 1..4")
    code, _, err = run("loop", "--verify-stages", 17, "--max-new-tokens", 2)
    _refused(code, err, "--verify-stages 17", "block size 16", "give 1..16")
    # with k open, the choice is made among the k whose verify has 9 rows
    code, out, err = run("loop", "--verify-stages", 9, "--threads", 1, "--max-new-tokens", 2, "--no-check", "--json")
    assert code == 0, err
    assert json.loads(out)["configuration"]["k"] >= 8


@pytest.mark.parametrize("given, words", [
    ({"prompt": [1.7, 2]}, "prompt token 0 must be an integer, got 1.7"),  # was run as token 1
    ({"prompt": ["3"]}, "prompt token 0 must be an integer, got '3'"),
    ({"prompt": [1, True]}, "prompt token 1 must be an integer, got True"),
    ({"temperature": "0.5"}, "temperature must be a finite number"),  # passed, then a TypeError in the sampler
])
def test_the_run_checks_refuse_what_they_would_coerce(given, words):
    from onebit_engine.errors import ConfigError
    from onebit_engine.loop.inputs import check_run

    kw = {"prompt": [1, 2], "max_new_tokens": 2, "temperature": 0.0, **given}
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        check_run(None, kw.pop("prompt"), **kw)
    assert check_run(None, [1, 2], max_new_tokens=2, temperature=0.5) == [1, 2]


def test_a_prompt_file_that_is_a_fifo_or_an_object_without_prompts_is_named_as_such(tmp_path, capsys):
    from onebit_engine.cli import main

    fifo, obj = tmp_path / "fifo", tmp_path / "obj.json"
    os.mkfifo(fifo)
    obj.write_text(json.dumps({"a": 1}))
    out = tmp_path / "c.safetensors"
    assert main(["probe", "capture", "--prompts", str(fifo), "--out", str(out)]) == 2
    _refused(2, capsys.readouterr().err, "is not a regular file")  # it exists: "does not exist" was wrong
    assert main(["probe", "capture", "--prompts", str(obj), "--out", str(out)]) == 2
    _refused(2, capsys.readouterr().err, "an object without a list under 'prompts'")  # not "holds NoneType"
    assert not out.exists()
