"""What ``onebit loop`` prints: the labelled prompt and output, the totals, the per-round table (with
``--rounds``), the configuration and the check, and the verdict - whether speculation paid here, and why
(``measure/regime.py``: do the weights fit in this CPU's last-level cache?)."""
from __future__ import annotations

from ..measure.regime import MEMORY_BOUND_COMMAND, Regime
from . import ui
from .decode import labelled

# A measured ratio within this band of 1 is "about even": the check's 3 interleaved runs move by a few %.
EVEN_BAND = 0.05


def verdict(check: dict | None, plan, regime: Regime, tokens_per_round: float) -> dict:
    """{"outcome": paid | did not pay | about even | unknown, "speedup", "basis": measured | predicted | None,
    "in_cache", "lines": [sentences]}: the check's measured speedup when there is one, else the plan's prediction."""
    speedup, basis = None, None
    if check is not None and check.get("speedup") is not None:
        speedup, basis = check["speedup"], "measured"
    elif plan.predicted_speedup is not None:
        speedup, basis = plan.predicted_speedup, "predicted"
    ran = "ran at" if basis == "measured" else "is predicted to run at"
    if speedup is None:
        outcome = "unknown"
        lines = [_not_measured(check)]
    elif speedup > 1 + EVEN_BAND:
        outcome = "paid"
        lines = [f"speculation paid here: the loop {ran} {speedup:.2f}x plain decoding at its fastest."]
    elif speedup < 1 - EVEN_BAND:
        outcome = "did not pay"
        lines = [f"speculation did not pay here: plain decoding (onebit generate) is faster - the loop {ran} "
                 f"{speedup:.2f}x its speed."]
    else:
        outcome = "about even"
        lines = [f"speculation about broke even here: the loop {ran} {speedup:.2f}x plain decoding at its fastest."]
    why = regime.why()
    if regime.in_cache is False:
        if outcome == "paid":
            lines.append(f"Why: {why}.")
        else:
            lines.append(f"Here {why}; what holds the loop back is the rest of a round: the draft, and "
                         f"{tokens_per_round:.2f} tokens a round (--rounds shows each round's parts).")
    else:
        lines.append(f"Why: {why}." if outcome != "paid" else
                     f"Note: {why}. It paid anyway, by a margin this regime keeps small: a round yields "
                     f"{tokens_per_round:.2f} tokens, and on weights this small a step's fixed costs (Python, calls, "
                     f"norms) are shared by the verify's rows, so k+1 rows cost less than k+1 steps.")
        lines.append(f"Where the weights stream from memory, a verify row rides along with the one read of them and a "
                     f"draft pays; this shows that regime on this machine: {MEMORY_BOUND_COMMAND}")
    return {"outcome": outcome, "speedup": speedup, "basis": basis, "in_cache": regime.in_cache, "lines": lines}


def _not_measured(check: dict | None) -> str:
    # with --check run, the way out is the check's own reason (e.g. one token: nothing to time), not "give --check"
    untimed = ((check or {}).get("null_reasons") or {}).get("speedup")
    if untimed is not None:
        return f"whether speculation pays here was not measured: {untimed}"
    return ("whether speculation pays here was not measured (give --check at temperature 0, or leave --k or "
            "--threads open so the loop measures its configuration)")


def print_loop(res, check, prov, loaded, args, plan, verdict_: dict, prompt: list[int]) -> None:
    s = res.summary()
    print(labelled("prompt", prompt, loaded))
    print(labelled("output", res.tokens, loaded))
    print()
    rows = [(i + 1, r.proposed, r.accepted, r.emitted, "+".join(map(str, r.passes)) or "-", r.draft_ms, r.verify_ms, r.commit_ms)
            for i, r in enumerate(res.rounds)]
    if rows and args.rounds:
        print(ui.table(["round", "proposed", "accepted", "emitted", "verify rows", "draft ms", "verify ms", "commit ms"], rows))
        print()
    by_pos = "  ".join(f"{i + 1}:{a:.2f}" for i, a in enumerate(s["acceptance_by_position"])) or "-"
    fb = "none" if res.fallback_at is None else f"at token {res.fallback_at} ({res.plain_steps} plain steps after it)"
    if args.fallback == "none":
        fb = "off"
    print(f"totals: {s['tokens']} tokens in {s['rounds']} rounds, {ui.fmt(s['tokens_per_s'], 1)} tok/s, "
          f"{s['tokens_per_round']:.2f} tokens/round, acceptance {s['acceptance_rate']:.2f} ({res.full_accepts} full accepts), "
          f"{s['verify_passes_per_round']:.2f} verify passes/round (--verify-stages {args.verify_stages})")
    print(f"acceptance by draft position: {by_pos}")
    print(f"per round: draft {s['draft_ms_per_round']:.2f} ms, verify {s['verify_ms_per_round']:.2f} ms, "
          f"commit {s['commit_ms_per_round']:.2f} ms")
    print(f"fallback: {fb}")
    print(f"configuration: {plan.summary()}")
    print(f"[{loaded.source}; k={prov['k']}, commit path {prov['commit_path']}, target {prov['backend']} "
          f"({prov['kernel_set']}), draft {prov.get('draft_backend')}, row set {prov['row_set']}, threads {prov['threads']}, "
          f"T={args.temperature}, git {prov['git_revision']}]")
    if check is not None:
        plain_at = f"1 row per step, {check['plain_threads']} thread{'s' if check['plain_threads'] > 1 else ''}"
        if check["identical"]:
            print(f"check: identical to plain greedy decoding of the same build ({check['tokens']} of {check['tokens']} "
                  f"tokens); speed, medians of {check['speed_runs']} interleaved runs each: loop "
                  f"{ui.fmt(check['loop_tokens_per_s'], 1)} tok/s, plain decoding at its fastest ({prov['backend']}, "
                  f"{plain_at}) {ui.fmt(check['plain_tokens_per_s'], 1)} tok/s: speedup {ui.fmt(check['speedup'])}x")
        else:
            print(f"check: DIFFERS from plain greedy decoding of the same build: first at token {check['first_difference']} "
                  f"(speculative {check['speculative_token']} vs plain {check['plain_token']})")
    print()
    for line in verdict_["lines"]:
        print(line)
