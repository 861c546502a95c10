"""onebit probe capture | draft | score, and the stage files' refusals."""
import pytest

from onebit_engine.measure import acceptance_probe as probe


def test_builtin_capture_draft_score(run, tmp_path):
    cap, dr = tmp_path / "c.st", tmp_path / "d.st"
    assert run("probe", "capture", "--max-new-tokens", 6, "--out", cap)[0] == 0
    assert run("probe", "draft", "--capture", cap, "--out", dr)[0] == 0
    code, out, err = run("probe", "score", "--capture", cap, "--drafts", dr, "--round-cost", 2)
    assert code == 0, err
    assert "acceptance by draft position" in out and "tok/round" in out and "break-even a" in out


def test_score_by_path_json(run_json, stages):
    s = run_json("probe", "score", "--capture", stages[0], "--drafts", stages[1], "--k", 1, 3)
    assert [r["k"] for r in s["k"]] == [1, 3]
    assert len(s["acceptance_by_position"]) == 3  # block 4 -> 3 drafts per anchor
    assert all(r["tokens_per_round"] >= 1.0 and r["ceiling"] >= 1.0 for r in s["k"])


def test_stage_files_are_atomic_and_carry_provenance(stages):
    cap = probe.load_capture(stages[0])
    for key in ("engine_version", "git_revision", "model_hash", "draft_hash", "backend", "row_set", "kernel_set"):
        assert key in cap.provenance
    assert not [p for p in stages[0].parent.iterdir() if p.name.endswith(".tmp")]


def test_stage_from_another_model_is_refused(run, stages, other_pair, tmp_path):
    code, _, err = run("probe", "draft", "--model", other_pair[0], "--draft", other_pair[1], "--capture", stages[0],
                       "--out", tmp_path / "x.st")
    assert code == 2
    assert err.startswith("onebit: error: stage file") and "model_hash" in err and "draft_hash" in err
    assert len(err.strip().splitlines()) == 1


def test_stage_from_another_engine_version_is_refused(run, stages, pair, tmp_path):
    cap = probe.load_capture(stages[0])
    cap.provenance["engine_version"] = "0.0.1"
    probe.save_capture(tmp_path / "old.st", cap)
    code, _, err = run("probe", "draft", "--model", pair[0], "--draft", pair[1], "--capture", tmp_path / "old.st",
                       "--out", tmp_path / "x.st")
    assert code == 2 and "engine_version: '0.0.1' != " in err


def test_drafts_from_another_capture_are_refused(run, stages, pair, tmp_path):
    m = ["--model", pair[0], "--draft", pair[1]]
    assert run("probe", "capture", *m, "--prompt-ids", "7 8", "--max-new-tokens", 4, "--out", tmp_path / "c2.st")[0] == 0
    code, _, err = run("probe", "score", "--capture", tmp_path / "c2.st", "--drafts", stages[1])
    assert code == 2 and "not made from this capture" in err


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_stage_file_gives_one_line(run, stages, tmp_path, damage):
    data = stages[0].read_bytes()
    bad = tmp_path / "bad.st"
    if damage == "truncate":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        b = bytearray(data)
        b[-5] ^= 0xFF
        bad.write_bytes(bytes(b))
    elif damage == "garbage":
        bad.write_bytes(b"not a stage file at all" * 10)
    else:
        bad.write_bytes(b"")
    code, out, err = run("probe", "score", "--capture", bad, "--drafts", stages[1])
    assert code == 2 and out == ""
    assert err.startswith("onebit: error: stage file") and "corrupt" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_wrong_kind_missing_and_k_out_of_range(run, stages):
    code, _, err = run("probe", "score", "--capture", stages[1], "--drafts", stages[1])
    assert code == 2 and "is a 'draft' stage file, not a 'capture' one" in err
    code, _, err = run("probe", "score", "--capture", "/nonexistent.st", "--drafts", stages[1])
    assert code == 2 and "does not exist" in err
    code, _, err = run("probe", "score", "--capture", stages[0], "--drafts", stages[1], "--k", 4)
    assert code == 2 and "k=4 is out of range" in err and "1..3" in err


def test_score_matches_the_loop_path():
    """The 'loop path' tokens/round walks the anchors exactly as the greedy loop does."""
    toks = [5, 1, 2, 3, 9, 9, 4, 4]
    props = []
    for j in range(len(toks) - 1):
        truth = toks[j + 1 : j + 4] + [0] * 3
        props.append(truth[:3] if j % 2 == 0 else [99, 99, 99])
    import numpy as np

    cap = probe.Capture({}, [[0]], [toks], [np.zeros((9, 1, 2), np.float32)], [0], 1, 1.0, "c")
    ds = probe.DraftStage({}, "c", 4, [np.asarray(props, np.int64)], 1.0)
    row = probe.score(cap, ds, [3])["k"][0]
    # anchor 0 accepts 3 -> emits 4, jumps to anchor 4 (accepts 3 -> but truth has 3 left: emits 4) -> end
    assert row["tokens_per_round_loop"] == 4.0
    assert probe.expected_tokens(0.5, 3) == pytest.approx(1.875)
    assert probe.break_even_acceptance(probe.expected_tokens(0.6, 5), 5) == pytest.approx(0.6, abs=1e-9)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    from onebit_engine.atomic import atomic_write_text, atomic_write_with

    target = tmp_path / "stage.st"
    atomic_write_text(target, "old")

    def broken(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write_with(target, broken)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["stage.st"]


@pytest.mark.parametrize("cost", ["0", "0.0", "inf", "1e400"])
def test_round_cost_must_be_positive_and_finite(run, stages, cost):
    code, out, err = run("probe", "score", "--capture", stages[0], "--drafts", stages[1], "--round-cost", cost)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--round-cost" in err and "must be a finite number > 0" in err and "give e.g. --round-cost 2.5" in err


@pytest.mark.parametrize("cost", [0, -1.0, float("nan"), float("inf")])
def test_score_api_refuses_bad_round_costs(stages, cost):
    cap, ds = probe.load_capture(stages[0]), probe.load_draft_stage(stages[1])
    from onebit_engine.errors import ConfigError

    with pytest.raises(ConfigError, match="must be a finite number > 0"):
        probe.score(cap, ds, [1], round_cost=cost)


def test_capture_too_short_to_probe(run, pair, tmp_path):
    code, out, err = run("probe", "capture", "--model", pair[0], "--draft", pair[1], "--prompt-ids", "1 2",
                         "--max-new-tokens", 1, "--out", tmp_path / "c.st")
    assert code == 2 and "--max-new-tokens 1 is too short to probe" in err and "give --max-new-tokens 2" in err
    assert not (tmp_path / "c.st").exists()


def test_k_with_no_anchor_to_score_is_null_with_a_reason(run, run_json, pair, tmp_path):
    """Two tokens per prompt: one anchor with one token of truth. k=1 is measured; k=2, 3 have no anchor
    with a full truth - their acceptance is null with a reason, not 0.0 (and never NaN)."""
    m = ["--model", pair[0], "--draft", pair[1]]
    assert run("probe", "capture", *m, "--prompt-ids", "4 5", "--max-new-tokens", 2, "--out", tmp_path / "c.st")[0] == 0
    assert run("probe", "draft", *m, "--capture", tmp_path / "c.st", "--out", tmp_path / "d.st")[0] == 0
    s = run_json("probe", "score", "--capture", tmp_path / "c.st", "--drafts", tmp_path / "d.st", "--round-cost", 1.5)
    k1, k2, k3 = s["k"]
    assert k1["anchors"] == 1 and k1["per_token_acceptance"] is not None and "null_reasons" not in k1
    for row in (k2, k3):
        assert row["anchors"] == 0
        assert row["per_token_acceptance"] is None and row["tokens_per_round"] is None
        assert row["expected_tokens_geometric"] is None
        assert "capture more tokens" in row["null_reasons"]["per_token_acceptance"]
        assert row["tokens_per_round_loop"] >= 1.0
    assert s["acceptance_by_position"][1] is None and "acceptance_by_position[1]" in s["null_reasons"]
    code, out, err = run("probe", "score", "--capture", tmp_path / "c.st", "--drafts", tmp_path / "d.st")
    assert code == 0 and "nan" not in out.lower()


def test_score_api_refuses_a_round_cost_whose_speedup_overflows(stages):
    """The bound is the score's own, not only the command line's: 2 tokens over 5e-324 steps is inf."""
    cap, ds = probe.load_capture(stages[0]), probe.load_draft_stage(stages[1])
    from onebit_engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"5e-324 is below 1e-300"):
        probe.score(cap, ds, [1], round_cost=5e-324)
    assert probe.score(cap, ds, [1], round_cost=1e-300)["k"][0]["predicted_speedup"] < float("inf")
