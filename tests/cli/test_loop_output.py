"""What generate and loop print: the prompt and the output labelled, the per-round table only with
--rounds (always in --json), the prefill timed after the warm-up, and the verdict on whether speculation
paid here and why (issue 24 points 2-4, issue 26 item 5)."""
import importlib
import re

import pytest

from onebit_engine.cli import loop_report, prepare
from onebit_engine.cli.tuning import Plan
from onebit_engine.measure import regime
from onebit_engine.measure.regime import MEMORY_BOUND_COMMAND, CacheSize, Regime

gen_module = importlib.import_module("onebit_engine.loop.generate")


def test_generate_labels_prompt_and_output(run, pair):
    code, out, err = run("generate", "--model", pair[0], "--prompt-ids", "3 4 5", "--max-new-tokens", 4)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "prompt (3 tokens, ids): 3 4 5"
    assert re.fullmatch(r"output \(4 tokens, ids\): \d+ \d+ \d+ \d+", lines[1]), lines[1]
    assert "prefill of 3 tokens" in out


def test_text_with_line_breaks_starts_below_its_label(run):
    code, out, err = run("generate", "--max-new-tokens", 3)  # the built-in pair's first prompt is code
    assert code == 0, err
    assert re.match(r"prompt \(\d+ tokens\):\n", out) and re.search(r"\noutput \(3 tokens\):[ \n]", out)


def test_loop_rounds_table_only_with_rounds_but_always_in_json(run, run_json, pair):
    args = ("loop", "--model", pair[0], "--draft", pair[1], "--k", 2, "--threads", 1, "--max-new-tokens", 8, "--no-check")
    code, out, _ = run(*args)
    assert code == 0 and "round  proposed" not in out and out.startswith("prompt (4 tokens, ids): 1 2 3 4\noutput (8 tokens")
    code, out, _ = run(*args, "--rounds")
    assert code == 0 and "round  proposed  accepted  emitted" in out
    d = run_json(*args)
    assert d["rounds"] and {"proposed", "accepted", "emitted", "draft_ms", "verify_ms", "commit_ms"} <= set(d["rounds"][0])


def test_prefill_is_timed_after_the_warm_up(run, pair, monkeypatch):
    order = []
    real_warm, real_generate = prepare.warm, gen_module.generate
    monkeypatch.setattr(prepare, "warm", lambda *a, **k: order.append("warm") or real_warm(*a, **k))
    monkeypatch.setattr(gen_module, "generate", lambda *a, **k: order.append("generate") or real_generate(*a, **k))
    code, _, err = run("generate", "--model", pair[0], "--max-new-tokens", 2)
    assert code == 0, err
    assert order == ["warm", "generate"]


def test_warm_up_leaves_the_run_unchanged(run_json, pair, monkeypatch):
    args = ("loop", "--model", pair[0], "--draft", pair[1], "--k", 3, "--threads", 1, "--max-new-tokens", 12, "--check")
    with_warm = run_json(*args)
    monkeypatch.setattr(prepare, "warm", lambda *a, **k: None)
    without = run_json(*args)
    assert with_warm["tokens"] == without["tokens"] and with_warm["check"]["identical"]
    assert [r["accepted"] for r in with_warm["rounds"]] == [r["accepted"] for r in without["rounds"]]


L3 = CacheSize(32 << 20, 3, "sysfs test")
PLAN = Plan(3, 1, 1, "host-int", 16, measured=True, predicted_speedup=0.7)


@pytest.mark.parametrize("speedup, outcome", [(0.7, "did not pay"), (0.99, "about even"), (1.4, "paid")])
def test_verdict_in_cache_says_why_and_names_the_memory_bound_command(speedup, outcome):
    v = loop_report.verdict({"speedup": speedup}, PLAN, Regime(3 << 20, L3), 2.5)
    assert v["outcome"] == outcome and v["basis"] == "measured" and v["in_cache"] is True
    text = " ".join(v["lines"])
    assert "fit in this CPU's 32.0 MiB L3 cache" in text and "k+1 plain steps" in text and MEMORY_BOUND_COMMAND in text
    if outcome == "did not pay":
        assert "plain decoding (onebit generate) is faster" in text and "0.70x" in text
    if outcome == "paid":  # a gain in the cache regime is explained, not contradicted
        assert "It paid anyway" in text and "2.50 tokens" in text


def test_verdict_when_weights_stream_points_at_the_rest_of_the_round():
    v = loop_report.verdict({"speedup": 0.8}, PLAN, Regime(900 << 20, L3), 2.5)
    text = " ".join(v["lines"])
    assert v["outcome"] == "did not pay" and "do not fit" in text and "2.50 tokens a round" in text
    assert MEMORY_BOUND_COMMAND not in text
    paid = loop_report.verdict({"speedup": 2.1}, PLAN, Regime(900 << 20, L3), 4.0)
    assert paid["outcome"] == "paid" and "ride along" in " ".join(paid["lines"])


def test_verdict_falls_back_to_the_prediction_then_to_unknown():
    v = loop_report.verdict(None, PLAN, Regime(3 << 20, L3), 2.0)
    assert v["basis"] == "predicted" and v["speedup"] == 0.7 and "is predicted to run at 0.70x" in v["lines"][0]
    given = Plan(3, 1, 1, "host-int", 16)
    v = loop_report.verdict(None, given, Regime(3 << 20, CacheSize(None, None, "unknown: test")), 2.0)
    assert v["outcome"] == "unknown" and v["in_cache"] is None and "not measured" in v["lines"][0]


def test_loop_prints_the_verdict_for_this_machine(run, run_json):
    code, out, err = run("loop", "--max-new-tokens", 12)
    assert code == 0, err
    here = regime.last_level_cache()
    assert re.search(r"\nspeculation (paid|did not pay|about broke even) here", out)
    if here.size is not None and here.size > 8 << 20:  # the built-in pair's ~3 MiB sit in any such cache
        # "Why:" when it did not pay; "Note:" when a busy machine slowed the plain runs more than the loop's
        assert re.search(r"\n(Why|Note): the weights \([0-9.]+ MiB\) fit in this CPU's", out) and MEMORY_BOUND_COMMAND in out
    d = run_json("loop", "--max-new-tokens", 8)
    assert d["verdict"]["basis"] == "measured" and d["verdict"]["speedup"] == d["check"]["speedup"]
    assert d["regime"]["weight_bytes"] > 1 << 20 and d["regime"]["cache_source"] == here.source
