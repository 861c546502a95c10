"""onebit generate / loop on the built-in pair and on checkpoints given by path."""
import importlib
import re

import pytest

gen_module = importlib.import_module("onebit_engine.loop.generate")  # the package re-exports the function under that name


def test_generate_builtin_prints_tokens_and_rate(run):
    code, out, err = run("generate", "--max-new-tokens", 5)
    assert code == 0, err
    assert re.search(r"\n[1-5] tokens \((max_new_tokens|stop_token)\), [0-9.]+ tok/s decode", out)
    assert "built-in" in out


def test_generate_by_path_json_is_reproducible_when_sampled(run_json, pair):
    args = ("generate", "--model", pair[0], "--prompt-ids", "3 4 5", "--max-new-tokens", 6, "--temperature", 0.8, "--seed", 3)
    a, b = run_json(*args), run_json(*args)
    assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 6
    assert a["provenance"]["model_hash"]
    # the default backend is host-int where its kernel runs (rows never padded: row set 16), else reference (8)
    assert a["provenance"]["row_set"] == (16 if a["provenance"]["backend"] == "host-int" else 8)


@pytest.mark.parametrize("command", ["generate", "loop"])
def test_a_seed_at_temperature_0_is_said_to_change_nothing(run, pair, command):
    """Greedy decoding draws nothing: --seed 7 at T = 0 gives the unseeded tokens and one warning line naming the
    flag and the way out; without --seed, or when sampling, no warning."""
    base = (command, "--model", pair[0], *(("--draft", pair[1], "--k", 3, "--threads", 1) if command == "loop" else ()),
            "--prompt-ids", "3 4 5", "--max-new-tokens", 6, "--json")
    code, plain, err = run(*base)
    assert code == 0 and "warning" not in err, err
    code, seeded, err = run(*base, "--seed", 7)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(lines) == 1 and "--seed 7 has no effect at --temperature 0" in lines[0] and "--temperature above 0" in lines[0]
    import json

    assert json.loads(seeded)["tokens"] == json.loads(plain)["tokens"]
    code, _, err = run(*base, "--seed", 7, "--temperature", 0.5, *(("--no-check",) if command == "loop" else ()))
    assert code == 0 and "warning" not in err, err


def test_loop_check_states_identity_builtin(run):
    code, out, err = run("loop", "--check", "--max-new-tokens", 12, "--rounds")
    assert code == 0, err
    assert re.search(r"check: identical to plain greedy decoding of the same build \((\d+) of \1 tokens", out)
    for part in ("totals:", "tok/s", "tokens/round", "acceptance by draft position", "per round: draft", "fallback:", "round  proposed"):
        assert part in out


def test_loop_default_picks_its_configuration_and_says_so(run, run_json):
    code, out, err = run("loop", "--max-new-tokens", 16, "--retune")
    assert code == 0, err
    assert re.search(r"configuration: (host-int|reference), row set \d+; loop: k=\d+, [12] threads?; plain decoding: "
                     r"1 row per step, [12] threads? - picked as the fastest measured here", out)
    assert re.search(r"medians of 3 interleaved runs each: loop [0-9.]+ tok/s, plain decoding at its fastest "
                     r"\((host-int|reference), 1 row per step, [12] threads?\) [0-9.]+ tok/s: speedup [0-9.]+x", out)
    d = run_json("loop", "--max-new-tokens", 8)
    conf = d["configuration"]
    assert conf["measured"] and conf["k"] == d["provenance"]["k"] and conf["threads"] == d["provenance"]["threads"]
    assert conf["predicted_ms_per_token"] and conf["predicted_speedup"] > 0


def test_loop_with_k_and_threads_given_measures_nothing(run_json, pair):
    d = run_json("loop", "--model", pair[0], "--draft", pair[1], "--k", 2, "--threads", 1, "--max-new-tokens", 6)
    assert d["configuration"]["measured"] is False and d["provenance"]["k"] == 2 and d["provenance"]["threads"] == 1


def test_loop_by_path_tunes_k_from_a_calibration_run(run_json, pair):
    d = run_json("loop", "--model", pair[0], "--draft", pair[1], "--max-new-tokens", 6)
    assert d["configuration"]["measured"] and "calibration run of this prompt" in d["configuration"]["profile_source"]
    assert 1 <= d["provenance"]["k"] <= 3


def test_loop_by_path_all_switches_json(run_json, pair):
    d = run_json("loop", "--model", pair[0], "--draft", pair[1], "--backend", "host-int", "--k", 2, "--commit-path",
                 "checkpoint", "--replay-check", "--fallback", "break-even", "--row-set", 4, "--check", "--max-new-tokens", 10)
    assert d["check"]["identical"] is True
    assert d["provenance"]["backend"] == "host-int" and d["provenance"]["k"] == 2
    assert d["provenance"]["commit_path"] == "checkpoint" and d["provenance"]["row_set"] == 4
    assert len(d["tokens"]) == 10 and all(r["proposed"] <= 2 for r in d["rounds"])
    assert set(d["summary"]) >= {"tokens_per_s", "tokens_per_round", "acceptance_by_position", "fallback_at"}


def test_loop_mixed_backends(run_json, pair):
    d = run_json("loop", "--model", pair[0], "--draft", pair[1], "--target-backend", "reference", "--draft-backend",
                 "host-int", "--max-new-tokens", 6, "--temperature", 0.7, "--seed", 1)
    assert d["provenance"]["backend"] == "reference" and d["provenance"]["draft_backend"] == "host-int"


def test_loop_check_names_where_outputs_part(run, pair, monkeypatch):
    real = gen_module.generate

    def drifted(*a, **kw):  # a plain reference from "another build": token 3 differs
        res = real(*a, **kw)
        res.tokens[3] = (res.tokens[3] + 1) % 96
        return res

    monkeypatch.setattr(gen_module, "generate", drifted)
    code, out, _ = run("loop", "--model", pair[0], "--draft", pair[1], "--check", "--max-new-tokens", 8)
    assert code == 1
    assert "check: DIFFERS from plain greedy decoding of the same build: first at token 3" in out


@pytest.mark.parametrize("fmt", ["int8", "ternary"])
def test_quantize_then_inspect(run, run_json, pair, tmp_path, fmt):
    out = tmp_path / f"q-{fmt}.safetensors"
    q = run_json("quantize", "--model", pair[0], "--format", fmt, "--out", out)
    assert q["weights"] and all(w["rel_error"] < 1.0 for w in q["weights"])
    d = run_json("inspect", out)
    assert d["kind"] == "quantized" and d["quantization"]["formats"] == [fmt]
    code, text, _ = run("inspect", out)
    assert code == 0 and "bits/weight" in text


def test_quantize_builtin_default(run, tmp_path):
    code, out, err = run("quantize", "--out", tmp_path / "b.safetensors")
    assert code == 0, err
    assert "projections" in out


def test_inspect_target_and_draft(run, run_json, pair):
    t = run_json("inspect", pair[0])
    assert t["kind"] == "target" and t["config"]["num_hidden_layers"] == 4
    assert any(x["name"] == "lm_head.weight" for x in t["tensors"]) and t["total_bytes"] > 0
    d = run_json("inspect", pair[1])
    assert d["kind"] == "draft" and d["config"]["version"] == 2 and d["config"]["block_size"] == 4
    code, out, _ = run("inspect", pair[0])
    assert code == 0 and "quantization: none" in out and "dtype" in out
