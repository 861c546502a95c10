"""Honest end-to-end benchmark: plain and speculative decoding in one process, and comparing runs.

``run_bench`` decodes a prompt set, repeated, three ways with one build: plain decoding on the
speculative loop's own target (same backend, row set and kernel set), plain decoding of a second
target at its fastest row set (1 row: padding a plain step to 8 rows must not flatter the ratio), and
the speculative loop. Within a repeat the three are interleaved in a shuffled order (``sweep``) so a
noisy, shared machine slows them alike. Reported: per-mode medians over repeats and the ratios, the measured
acceptance, and the speedup that acceptance predicts from the measured costs (Leviathan et al.).

``compare`` (``bench_compare``) puts two result files side by side and refuses when their provenance
differs: a reference measured with another build, kernel set, model or machine is not a reference.

A figure with nothing to measure it on (a ratio over a zero rate) is None, with its reason under
``results.null_reasons``; never NaN.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ConfigError
from .acceptance_probe import expected_tokens
from .compare import (
    COMPARE_FIELDS,
    SCHEMA,
    ProvenanceMismatch,
    ResultError,
    check_result,
    compare,
    provenance_differences,
)
from .provenance import prompt_set_hash

Progress = Callable[[int], None]


def check_room(max_new_tokens: int, k: int) -> None:
    """The first token comes from the prefill; a speculative round needs room for 1 draft and its bonus
    token after it. A bench with no round would report a speedup of plain decoding against itself."""
    if max_new_tokens < 3:
        raise ConfigError(f"--max-new-tokens {max_new_tokens} leaves no room for a speculative round at k={k} (the "
                          f"first token comes from the prefill, a round needs room for 1 draft and its bonus token); "
                          f"give --max-new-tokens 3 or more ({k + 2} for one full round of {k} drafts)")


def run_bench(target, target_one_row, draft, prompts: Sequence[Sequence[int]], *, k: int, commit_path: str = "keep",
              max_new_tokens: int = 32, repeats: int = 3, provenance: dict[str, Any],
              progress: Progress | None = None, stages: "str | int" = "one") -> dict[str, Any]:
    """Measure; return the JSON-ready result (see ``docs/cli.md``, ``onebit bench``). ``stages``: the loop's
    verify passes (``loop/stages.py``), one planner over every speculative run."""
    from ..loop.generate import generate
    from ..loop.speculative import speculative_generate

    check_room(max_new_tokens, k)
    if repeats < 1:
        raise ConfigError(f"--repeats {repeats} must be >= 1; give --repeats 1 or more")
    from .regime import lazy_logits, planner_for, regime

    lazy = lazy_logits(target)
    plan = planner_for(stages, regime(target, draft), target.backend, threads=getattr(target.backend, "threads", 1))
    modes: dict[str, Callable[[Sequence[int]], Any]] = {
        "plain": lambda p: generate(target, p, max_new_tokens=max_new_tokens, stop_tokens=()),
        "plain_1row": lambda p: generate(target_one_row, p, max_new_tokens=max_new_tokens, stop_tokens=()),
        "speculative": lambda p: speculative_generate(target, draft, p, max_new_tokens=max_new_tokens, k=k,
                                                      commit_path=commit_path, stop_tokens=(), lazy_logits=lazy,
                                                      stages=plan),
    }
    names = list(modes)
    doc = sweep(modes, prompts, repeats=repeats, progress=progress)
    runs: list[dict[str, Any]] = []
    for r in range(repeats):
        run = {n: doc["all_tokens_per_s"][n][r] for n in names}
        run.update(_round_stats(doc["rounds"]["speculative"][r], k))
        runs.append(run)
    identical, first_diff = True, None
    for i in range(len(prompts)):  # greedy runs are deterministic: the last repeat's tokens stand for all
        spec_tokens, plain_tokens = doc["tokens"]["speculative"][i], doc["tokens"]["plain"][i]
        if spec_tokens != plain_tokens:
            identical = False
            j = next((t for t, (a, b) in enumerate(zip(spec_tokens, plain_tokens)) if a != b),
                     min(len(spec_tokens), len(plain_tokens)))
            first_diff = {"prompt": i, "token": j}
            break
    reasons: dict[str, str] = {}
    med = {n: _median([r[n] for r in runs]) for n in names}
    stats = {key: _median([r[key] for r in runs]) for key in runs[0] if key not in names}
    for key, v in {**med, **stats}.items():
        if v is None:
            reasons[key] = "not measured: a repeat had no decode time or no speculative round"
    rounds = sum(len(rep) for rep in doc["rounds"]["speculative"])
    step_ms = _ratio(1e3, med["plain"], "plain_step_ms", "plain decoding ran at 0 tokens/s", reasons)
    round_steps = _ratio(stats["round_ms"], step_ms, "round_cost_steps", "no plain step time", reasons)
    a = stats["per_token_acceptance"]
    predicted = _ratio(expected_tokens(a, k) if a is not None else None, round_steps, "predicted_speedup",
                       "no acceptance or round cost measured", reasons)
    results = {
        "tokens_per_s": med,
        "ratio_vs_plain": _ratio(med["speculative"], med["plain"], "ratio_vs_plain", "plain decoding ran at 0 tokens/s", reasons),
        "ratio_vs_plain_1row": _ratio(med["speculative"], med["plain_1row"], "ratio_vs_plain_1row",
                                      "plain decoding at 1 row ran at 0 tokens/s", reasons),
        "plain_step_ms": step_ms, "round_cost_steps": round_steps, "predicted_speedup": predicted, **stats,
        "speculative_rounds": rounds, "identical_to_plain": identical, "first_difference": first_diff,
    }
    if reasons:
        results["null_reasons"] = reasons
    config = {"k": k, "commit_path": commit_path, "max_new_tokens": max_new_tokens, "repeats": repeats, "lazy_logits": lazy, "verify_stages": stages,
              "prompts": [list(map(int, p)) for p in prompts]}
    prov = dict(provenance, k=k, commit_path=commit_path, max_new_tokens=max_new_tokens, prompt_set_hash=prompt_set_hash(prompts))
    return {"schema": SCHEMA, "provenance": prov, "config": config, "results": results, "runs": runs}


def _median(xs: Sequence[float | None]) -> float | None:
    """The median, or None when any repeat has no figure (a finite median of the others would hide it)."""
    if not xs or any(x is None or not np.isfinite(x) for x in xs):
        return None
    return float(np.median(xs))


def _ratio(num: float | None, den: float | None, key: str, why: str, reasons: dict[str, str]) -> float | None:
    """num / den, or None (its reason recorded) when either is missing or den is not > 0."""
    if num is None or den is None or not den > 0 or not np.isfinite(num / den):
        reasons[key] = why
        return None
    return float(num / den)


def _round_stats(rounds, k: int) -> dict[str, float | None]:
    """Pooled statistics of speculative rounds; None where there is nothing to pool (no round, no draft)."""
    proposed = sum(r.proposed for r in rounds)
    mean = lambda xs: float(np.mean(xs)) if xs else None  # noqa: E731
    accepted = sum(r.accepted for r in rounds)
    rejected = sum(r.accepted < r.proposed for r in rounds)
    return {
        "acceptance": accepted / proposed if proposed else None,
        # per-token acceptance a (geometric MLE): each draft is accepted with probability a until the first miss
        "per_token_acceptance": accepted / (accepted + rejected) if accepted + rejected else None,
        "tokens_per_round": mean([r.emitted for r in rounds]),
        "draft_ms": mean([r.draft_ms for r in rounds]), "verify_ms": mean([r.verify_ms for r in rounds]),
        "commit_ms": mean([r.commit_ms for r in rounds]), "round_ms": mean([r.total_ms for r in rounds]),
    }


def sweep(variants: dict[str, Callable[[Sequence[int]], Any]], prompts: Sequence[Sequence[int]], *, repeats: int = 3,
          seed: int = 0, before: Callable[[str], None] | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Decode ``prompts`` with every variant, ``repeats`` times, in a freshly shuffled order every repeat
    (a fixed order on a shared VM shows 10-20% "gains" that are only the order), after one untimed
    warm-up run of each (compilation, caches, first-touch memory). ``before(name)`` runs untimed before
    each variant (e.g. to set its thread count); ``progress(1)`` after each timed run. Returns per
    variant: the median over repeats of tokens/s (tokens after the first over decode seconds, summed
    over prompts) and every repeat's figure, each prompt's tokens (last repeat), the rounds of every
    repeat (speculative variants) and their pooled statistics."""
    import random

    if repeats < 1:
        raise ConfigError(f"repeats={repeats} must be >= 1; give 1 or more")
    names = list(variants)
    order = [(n, i) for n in names for i in range(len(prompts))]
    rng = random.Random(seed)
    for n in names:
        if before:
            before(n)
        variants[n](prompts[0])
    rates: dict[str, list[float]] = {n: [] for n in names}
    tokens: dict[str, dict[int, list[int]]] = {n: {} for n in names}
    rounds: dict[str, list[list]] = {n: [] for n in names}
    for _ in range(repeats):
        rng.shuffle(order)
        tot = {n: [0, 0.0] for n in names}
        for n in names:
            rounds[n].append([])
        for n, i in order:
            if before:
                before(n)
            res = variants[n](prompts[i])
            tot[n][0] += max(len(res.tokens) - 1, 0)
            tot[n][1] += res.decode_s
            tokens[n][i] = list(res.tokens)
            rounds[n][-1].extend(getattr(res, "rounds", []))
            if progress:
                progress(1)
        for n in names:
            rates[n].append(tot[n][0] / tot[n][1] if tot[n][1] > 0 else float("nan"))
    pooled = {n: [r for rep in reps for r in rep] for n, reps in rounds.items()}
    return {"tokens_per_s": {n: float(np.median(v)) for n, v in rates.items()}, "all_tokens_per_s": rates,
            "tokens": tokens, "rounds": rounds, "round_stats": {n: _round_stats(r, 0) for n, r in pooled.items() if r}}


def timed_interleaved(variants: dict[Any, tuple[Callable[[], Any], Callable[[Any], Any]]], *, repeats: int,
                      seed: int = 0, warmup: int = 1) -> dict[Any, float]:
    """Median ms of each variant's call, ``sweep``'s rule for any work: each repeat runs every variant once,
    in a freshly shuffled order, after ``warmup`` untimed runs of each. A variant is ``(setup, call)``:
    ``setup()`` (untimed, e.g. a fresh state copy) gives ``call``'s argument."""
    import random
    import time

    if repeats < 1:
        raise ConfigError(f"repeats={repeats} must be >= 1; give 1 or more")
    names = list(variants)
    for _ in range(warmup):
        for n in names:
            setup, call = variants[n]
            call(setup())
    times: dict[Any, list[float]] = {n: [] for n in names}
    rng = random.Random(seed)
    for _ in range(repeats):
        rng.shuffle(names)
        for n in names:
            setup, call = variants[n]
            arg = setup()
            t0 = time.perf_counter()
            call(arg)
            times[n].append(1e3 * (time.perf_counter() - t0))
    return {n: float(np.median(v)) for n, v in times.items()}


__all__ = ["run_bench", "sweep", "timed_interleaved", "check_room", "compare", "check_result", "provenance_differences", "ProvenanceMismatch",
           "ResultError", "COMPARE_FIELDS", "SCHEMA"]
