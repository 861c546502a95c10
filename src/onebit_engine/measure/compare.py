"""``onebit bench --compare A B``: two benchmark results side by side, only when they are comparable.

A speedup is only a speedup against plain decoding of the same build, kernel set, model, machine and
prompts, so every field of ``COMPARE_FIELDS`` must agree: the engine version and git revision, every
kernel identity (target and draft backend, kernel set and hash, target and draft op set), row sets,
threads, k, commit path, max_new_tokens, the prompt set (a hash of its token ids) and the host (CPU
model and flags, core counts, Python, numpy and its BLAS). A field missing from either result (an
older result, a hand-edited one) counts as a difference: unknown is not equal; a key renamed since an
older result was written (``provenance.RENAMED``: its ``recurrence`` is today's ``ops``) is read under
its new name. A null is a recorded value (the host does not expose it, the backend has no kernel hash)
and compares as one. ``--allow-mismatch`` prints such results anyway, every row labelled, the
differences listed. Comparing two builds is what ``onebit bench`` in each build, read side by side, is for.
"""
from __future__ import annotations

import math
import sys
from typing import Any

from ..errors import OnebitError
from .provenance import upgraded

SCHEMA = "onebit.bench/1"
# Provenance fields two runs must share to be compared (dotted: inside ``host``).
COMPARE_FIELDS = (
    "engine_version", "git_revision", "model_hash", "draft_hash",
    "backend", "kernel_set", "kernel_hash", "backend_options", "ops",
    "draft_backend", "draft_kernel_set", "draft_kernel_hash", "draft_ops", "draft_version",
    "row_set", "plain_1row_row_set", "threads", "commit_path", "k", "max_new_tokens", "prompt_set_hash",
    "machine", "host.arch", "host.system", "host.cpu", "host.cpu_flags", "host.logical_cpus", "host.physical_cores",
    "host.usable_cpus", "host.python", "host.numpy", "host.blas",
)
MODES = ("plain", "plain_1row", "speculative")
METRICS = ("ratio_vs_plain", "ratio_vs_plain_1row", "acceptance", "tokens_per_round", "round_ms", "predicted_speedup")
_SHOWN = 6  # differences spelled out in a refusal; the rest are counted


class ProvenanceMismatch(OnebitError, ValueError):
    """Two benchmark results were measured with different builds, models, machines or settings."""


class ResultError(OnebitError, ValueError):
    """A benchmark result file is not a well-formed ``onebit bench --json`` result."""


_FLOAT_MAX = int(sys.float_info.max)


def _number(v: Any) -> bool:
    """A JSON number a ratio can use: an integer past a float's range is not (its division overflowed)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, float) or abs(v) <= _FLOAT_MAX)


def _non_finite(doc: Any) -> str | None:
    """The dotted path of the first NaN / Infinity in a parsed JSON document, else None (iterative:
    a deeply nested file must not overflow the stack)."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, obj = stack.pop()
        if isinstance(obj, float) and not math.isfinite(obj):
            return path or "(the document)"
        items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        kids = [(f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}" if path else str(k), v) for k, v in items]
        stack.extend(reversed(kids))
    return None


def check_result(doc: Any, name: str) -> dict[str, Any]:
    """``doc`` if it is a result ``compare`` can read; one ResultError line naming ``name`` and the key."""
    again = f"write it again with `onebit bench --out {name}`"
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = f"schema {doc.get('schema')!r}" if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise ResultError(f"{name} is not an `onebit bench --json` result (schema {SCHEMA!r}; it holds {got}); {again}")
    bad = _non_finite(doc)
    if bad:
        raise ResultError(f"{name}: key {bad} is NaN or Infinity, which strict JSON has no number for (a missing "
                          f"figure is null); {again}")
    for key in ("provenance", "results"):
        if not isinstance(doc.get(key), dict):
            raise ResultError(f"{name}: key {key!r} is {_kind(doc.get(key))}, not an object; {again}")
    doc = {**doc, "provenance": upgraded(doc["provenance"])}  # a result from before a key's rename compares too
    rates = doc["results"].get("tokens_per_s")
    if not isinstance(rates, dict):
        raise ResultError(f"{name}: key 'results.tokens_per_s' is {_kind(rates)}, not an object; {again}")
    for mode in MODES:
        v = rates.get(mode)
        if mode not in rates or not (v is None or (_number(v) and v >= 0)):
            raise ResultError(f"{name}: key 'results.tokens_per_s.{mode}' is {_kind(v, mode in rates)}, not a number "
                              f">= 0 or null; {again}")
    for key in METRICS:
        v = doc["results"].get(key)
        top = 1 if key == "acceptance" else math.inf
        if v is not None and not (_number(v) and 0 <= v <= top):
            rule = "a share in 0..1" if key == "acceptance" else "a number >= 0"
            raise ResultError(f"{name}: key 'results.{key}' is {_kind(v)}, not {rule} or null; {again}")
    _check_prompt_hash(doc, name, again)
    return doc


def _check_prompt_hash(doc: dict, name: str, again: str) -> None:
    """The recorded prompt-set hash must be the hash of the prompts the result says it ran."""
    from .provenance import prompt_set_hash

    prompts = doc.get("config", {}).get("prompts") if isinstance(doc.get("config"), dict) else None
    recorded = doc["provenance"].get("prompt_set_hash")
    if recorded is None or not isinstance(prompts, list):
        return  # a missing hash is a difference in compare; nothing to cross-check here
    ok = all(isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p) for p in prompts)
    if not ok or prompt_set_hash(prompts) != recorded:
        raise ResultError(f"{name}: key 'provenance.prompt_set_hash' does not match its 'config.prompts' (the file "
                          f"was edited); {again}")


def _kind(v: Any, present: bool = True) -> str:
    if not present:
        return "missing"
    text = "null" if v is None else f"{v!r} ({type(v).__name__})"
    return text if len(text) <= 40 else text[:37] + "..."


def _get(prov: dict[str, Any], field: str) -> tuple[bool, Any]:
    """(present, value) of a dotted field."""
    cur: Any = prov
    for part in field.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def provenance_differences(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str] = ("A", "B")) -> list[str]:
    """Every COMPARE_FIELDS entry on which two results differ, as readable one-line strings."""
    out = []
    for f in COMPARE_FIELDS:
        (ha, va), (hb, vb) = _get(a["provenance"], f), _get(b["provenance"], f)
        if not ha or not hb:
            where = " and ".join(n for n, h in zip(names, (ha, hb)) if not h)
            out.append(f"{f}: missing in {where}")
        elif va != vb:
            out.append(f"{f}: {_flags_diff(va, vb, names)}" if f == "host.cpu_flags" else f"{f}: {_short(va)} vs {_short(vb)}")
    return out


def _flags_diff(a: Any, b: Any, names: tuple[str, str]) -> str:
    if not (isinstance(a, str) and isinstance(b, str)):
        return f"{_short(a)} vs {_short(b)}"
    sa, sb = set(a.split()), set(b.split())
    parts = [f"only {n} has {' '.join(sorted(s)[:8])}{' ...' if len(s) > 8 else ''}" for n, s in ((names[0], sa - sb), (names[1], sb - sa)) if s]
    return ", ".join(parts) or "same flags, other order"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def compare(a: dict[str, Any], b: dict[str, Any], *, allow_mismatch: bool = False,
            names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    """Rows ``(metric, A, B, B/A)``; refuses different provenance unless ``allow_mismatch`` (then
    ``comparable`` is False and every row is labelled so)."""
    a, b = check_result(a, names[0]), check_result(b, names[1])
    diffs = provenance_differences(a, b, names)
    if diffs and not allow_mismatch:
        shown = "; ".join(diffs[:_SHOWN]) + (f"; and {len(diffs) - _SHOWN} more" if len(diffs) > _SHOWN else "")
        raise ProvenanceMismatch(
            f"{names[0]} and {names[1]} were measured with different provenance ({shown}); a speedup is only a speedup "
            f"against plain decoding of the same build, kernel set, model, machine and prompts - re-measure both with "
            f"one build on one machine, or pass --allow-mismatch to print them labelled as not comparable")
    ra, rb = a["results"], b["results"]
    rows = [(f"{m} tok/s", ra["tokens_per_s"][m], rb["tokens_per_s"][m]) for m in MODES]
    rows += [(key, ra.get(key), rb.get(key)) for key in METRICS]
    out = []
    for m, x, y in rows:
        ratio = y / x if x and y is not None else None
        row = {"metric": m, "a": x, "b": y, "b_over_a": ratio if ratio is None or math.isfinite(ratio) else None}
        if row["b_over_a"] is None:
            row["null_reasons"] = {"b_over_a": f"{names[1]} has no {m}" if y is None else f"{names[0]} has no nonzero {m}"
                                   if not x else "the ratio overflows a float"}
        out.append(row)
    return {"comparable": not diffs, "differences": diffs, "rows": out}


__all__ = ["compare", "check_result", "provenance_differences", "ProvenanceMismatch", "ResultError", "COMPARE_FIELDS",
           "SCHEMA"]
