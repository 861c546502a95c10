"""Honest end-to-end benchmark: plain and speculative decoding in one process, and comparing runs.

``run_bench`` decodes a prompt set, repeated, three ways with one build: plain decoding on the
speculative loop's own target (same backend, row set and kernel set), plain decoding of a second
target at its fastest row set (1 row: padding a plain step to 8 rows must not flatter the ratio), and
the speculative loop. Within a repeat the three are interleaved in a shuffled order (``sweep``) so a
noisy, shared machine slows them alike. Reported: per-mode medians over repeats and the ratios, the measured
acceptance, and the speedup that acceptance predicts from the measured costs (Leviathan et al.).

``compare`` puts two result files side by side and refuses when their provenance differs: a
reference measured with another build, kernel set or model is not a reference.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .errors import OnebitError
from .probe import expected_tokens

SCHEMA = "onebit.bench/1"
# Provenance fields two runs must share to be compared.
COMPARE_FIELDS = ("engine_version", "git_revision", "backend", "kernel_set", "kernel_hash", "backend_options",
                  "row_set", "commit_path", "k", "model_hash", "draft_hash", "draft_backend", "draft_kernel_set",
                  "max_new_tokens", "machine")

Progress = Callable[[int], None]


class ProvenanceMismatch(OnebitError, ValueError):
    """Two benchmark results were measured with different builds, models or settings."""


def run_bench(target, target_one_row, draft, prompts: Sequence[Sequence[int]], *, k: int, commit_path: str = "keep",
              max_new_tokens: int = 32, repeats: int = 3, provenance: dict[str, Any],
              progress: Progress | None = None) -> dict[str, Any]:
    """Measure; return the JSON-ready result (see ``docs/cli.md``, ``onebit bench``)."""
    from .generate import generate
    from .speculative import speculative_generate

    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    modes: dict[str, Callable[[Sequence[int]], Any]] = {
        "plain": lambda p: generate(target, p, max_new_tokens=max_new_tokens, stop_tokens=()),
        "plain_1row": lambda p: generate(target_one_row, p, max_new_tokens=max_new_tokens, stop_tokens=()),
        "speculative": lambda p: speculative_generate(target, draft, p, max_new_tokens=max_new_tokens, k=k,
                                                      commit_path=commit_path, stop_tokens=()),
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
    med = {n: float(np.median([r[n] for r in runs])) for n in names}
    stats = {key: float(np.median([r[key] for r in runs])) for key in runs[0] if key not in names}
    step_ms = 1e3 / med["plain"] if med["plain"] > 0 else float("nan")
    round_steps = stats["round_ms"] / step_ms if step_ms > 0 else float("nan")
    predicted = expected_tokens(stats["per_token_acceptance"], k) / round_steps if round_steps > 0 else float("nan")
    results = {
        "tokens_per_s": med, "ratio_vs_plain": med["speculative"] / med["plain"],
        "ratio_vs_plain_1row": med["speculative"] / med["plain_1row"],
        "plain_step_ms": step_ms, "round_cost_steps": round_steps, "predicted_speedup": predicted, **stats,
        "identical_to_plain": identical, "first_difference": first_diff,
    }
    config = {"k": k, "commit_path": commit_path, "max_new_tokens": max_new_tokens, "repeats": repeats,
              "prompts": [list(map(int, p)) for p in prompts]}
    return {"schema": SCHEMA, "provenance": dict(provenance, k=k, commit_path=commit_path, max_new_tokens=max_new_tokens),
            "config": config, "results": results, "runs": runs}


def _round_stats(rounds, k: int) -> dict[str, float]:
    proposed = sum(r.proposed for r in rounds)
    mean = lambda xs: float(np.mean(xs)) if xs else 0.0  # noqa: E731
    accepted = sum(r.accepted for r in rounds)
    rejected = sum(r.accepted < r.proposed for r in rounds)
    return {
        "acceptance": accepted / proposed if proposed else 0.0,
        # per-token acceptance a (geometric MLE): each draft is accepted with probability a until the first miss
        "per_token_acceptance": accepted / (accepted + rejected) if accepted + rejected else 0.0,
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
        raise ValueError(f"repeats={repeats} must be >= 1")
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


# -- comparing runs -----------------------------------------------------------------------------------
def check_result(doc: Any, name: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "results" not in doc or "provenance" not in doc:
        raise ProvenanceMismatch(f"{name} is not an `onebit bench --json` result (schema {SCHEMA!r}); "
                                 f"write one with `onebit bench --json --out {name}`")
    return doc


def provenance_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    pa, pb = a["provenance"], b["provenance"]
    return [f"{f}: {pa.get(f)!r} vs {pb.get(f)!r}" for f in COMPARE_FIELDS if pa.get(f) != pb.get(f)]


def compare(a: dict[str, Any], b: dict[str, Any], *, allow_mismatch: bool = False,
            names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    """Rows ``(metric, A, B, B/A)``; refuses different provenance unless ``allow_mismatch`` (then
    ``comparable`` is False and every row is labelled so)."""
    a, b = check_result(a, names[0]), check_result(b, names[1])
    diffs = provenance_differences(a, b)
    if diffs and not allow_mismatch:
        raise ProvenanceMismatch(
            f"{names[0]} and {names[1]} were measured with different provenance ({'; '.join(diffs)}); a speedup is "
            f"only a speedup against plain decoding of the same build, kernel set and model - re-measure both "
            f"with one build, or pass --allow-mismatch to print them labelled as not comparable")
    ra, rb = a["results"], b["results"]
    rows = []
    for key in ("plain", "plain_1row", "speculative"):
        rows.append((f"{key} tok/s", ra["tokens_per_s"][key], rb["tokens_per_s"][key]))
    for key in ("ratio_vs_plain", "ratio_vs_plain_1row", "acceptance", "tokens_per_round", "round_ms", "predicted_speedup"):
        rows.append((key, ra.get(key), rb.get(key)))
    out = [{"metric": m, "a": x, "b": y, "b_over_a": (y / x) if x and y is not None else None} for m, x, y in rows]
    return {"comparable": not diffs, "differences": diffs, "rows": out}


__all__ = ["run_bench", "sweep", "compare", "check_result", "provenance_differences", "ProvenanceMismatch", "SCHEMA"]
