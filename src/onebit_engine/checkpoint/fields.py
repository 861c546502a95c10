"""Typed, ranged reading of ``config.json`` values that collects every problem before refusing.

JSON types are taken at their word: an integer field takes a JSON integer (not ``192.5``, not ``"4"``,
not ``true``), a boolean field a JSON boolean (``"false"`` is a string, not false), a float field any
finite JSON number. A :class:`Field` table says what each key must be; :func:`read_fields` reads one,
and :class:`Problems` turns what went wrong into one line.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

REQUIRED = object()  # a Field default: the key must be present


def show(v: Any, limit: int = 40) -> str:
    """A value as JSON (so null, strings and lists read as in the file), cut to ``limit`` characters."""
    try:
        s = json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def first_few(items: list[str], n: int = 3) -> str:
    """``a, b, c and 41 more``: long lists named by their first few and counted."""
    head = ", ".join(items[:n])
    return head if len(items) <= n else f"{head} and {len(items) - n} more"


class Problems:
    """Problems of one file, listed in the order found; :meth:`check` raises them as one ConfigError."""

    def __init__(self, source: str):
        self.source, self.items = source, []

    def add(self, msg: str) -> None:
        self.items.append(msg)

    def check(self, way_out: str) -> None:
        if self.items:
            n = len(self.items)
            raise ConfigError(f"{self.source}: {n} problem{'s' if n > 1 else ''}: " + "; ".join(self.items)
                              + f"; {way_out}")


@dataclass(frozen=True)
class Field:
    """One config value: ``kind`` is "int", "float", "bool" or "str"; ``default`` is used when the key is
    absent (or null, with ``null_is_default``); bounds are inclusive (``min``/``max``) or exclusive
    (``above``); ``choices`` lists the allowed values."""

    key: str
    kind: str
    default: Any = REQUIRED
    min: float | None = None
    max: float | None = None
    above: float | None = None
    choices: tuple | None = None
    null_is_default: bool = False


def typed(p: Problems, label: str, v: Any, f: Field) -> Any:
    """``v`` when it has ``f``'s type and range, else None with the problem added."""
    if f.kind == "int":
        ok, want = isinstance(v, int) and not isinstance(v, bool), "an integer"
    elif f.kind == "float":
        # finite as float32, not only as a JSON number: the engine computes in float32, where 1e39 is inf
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v) and abs(v) <= F32_MAX
        want = "a finite float32 number (|x| <= 3.4e38: the engine computes in float32)"
    elif f.kind == "bool":
        ok, want = isinstance(v, bool), "a JSON boolean (true or false, unquoted)"
    else:
        ok, want = isinstance(v, str), "a string"
    if not ok:
        p.add(f"{label} is {show(v)}, must be {want}")
        return None
    if f.choices is not None and v not in f.choices:
        p.add(f"{label} {show(v)} is not supported (supported: {', '.join(show(c) for c in f.choices)})")
        return None
    bad = ((f.min is not None and v < f.min) or (f.max is not None and v > f.max)
           or (f.above is not None and v <= f.above))
    if bad:
        rng = [f"> {f.above}" if f.above is not None else None, f">= {f.min}" if f.min is not None else None,
               f"<= {f.max}" if f.max is not None else None]
        p.add(f"{label} is {show(v)}, must be {' and '.join(r for r in rng if r)}")
        return None
    return float(v) if f.kind == "float" else v


F32_MAX = 3.4028234663852886e38  # float32's largest finite value


def _finite(v: int | float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # a JSON integer too large for a float
        return False


def lookup(key: str, sources: list[tuple[str, dict]]) -> tuple[str, Any, bool]:
    """``(label, value, found)`` from the first source object holding ``key``; labels are dotted paths."""
    for prefix, obj in sources:
        if key in obj:
            return prefix + key, obj[key], True
    return sources[-1][0] + key, None, False


def read_field(p: Problems, f: Field, sources: list[tuple[str, dict]]) -> Any:
    """The value of ``f`` (its default when absent), or None with the problem added."""
    label, v, found = lookup(f.key, sources)
    if not found or (v is None and f.null_is_default):
        if f.default is REQUIRED:
            p.add(f"{label} is missing (required)")
            return None
        return f.default
    return typed(p, label, v, f)


def read_object(p: Problems, label: str, v: Any) -> dict:
    """An optional JSON object (absent or null reads as empty)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        p.add(f"{label} is {show(v)}, must be a JSON object or null")
        return {}
    return v


def read_int_list(p: Problems, label: str, v: Any, *, min: int = 0) -> list[int] | None:
    """A JSON list of integers >= ``min``."""
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        p.add(f"{label} is {show(v)}, must be a list of integers")
        return None
    low = [x for x in v if x < min]
    if low:
        p.add(f"{label} holds {show(low)}, every entry must be >= {min}")
        return None
    return v


def read_name_list(p: Problems, label: str, v: Any, names: tuple[str, ...]) -> list[str] | None:
    """A JSON list of strings each in ``names`` (a string is refused: it is not one name per layer)."""
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        p.add(f"{label} is {show(v)}, must be a list of strings (one per layer)")
        return None
    bad = sorted({x for x in v if x not in names})
    if bad:
        p.add(f"{label} holds unknown layer type(s) {bad} (known: {list(names)})")
        return None
    return v


def known(v: dict[str, Any], *keys: str) -> bool:
    """Every key was read cleanly (None: missing or already refused), so a rule between them can be checked."""
    return all(v.get(k) is not None for k in keys)


def divisible(v: dict[str, Any], a: str, b: str) -> list[str]:
    """The rule "a is divisible by b", as a problem list (empty when it holds or a value is unknown)."""
    if known(v, a, b) and v[a] % v[b]:
        return [f"{a} ({v[a]}) must be divisible by {b} ({v[b]})"]
    return []


def layer_type_problems(v: dict[str, Any], allowed: tuple[str, ...], what: str = "") -> list[str]:
    """``layer_types`` has one known type per layer (``what``: "draft " in the draft's messages)."""
    if not known(v, "layer_types", "num_hidden_layers"):
        return []
    out = []
    if len(v["layer_types"]) != v["num_hidden_layers"]:
        out.append(f"layer_types has {len(v['layer_types'])} entries but num_hidden_layers is "
                   f"{v['num_hidden_layers']}; give one type per {what}layer")
    bad = sorted({t for t in v["layer_types"] if t not in allowed})
    if bad:
        out.append(f"unknown {what}layer type(s) {bad}; expected one of {allowed}")
    return out


def top_object(raw: Any, source: str) -> dict:
    """The top level of a config file must be a JSON object."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level is {show(raw)} ({type(raw).__name__}), must be a JSON object "
                          f"{{...}}; use the config.json that came with the weights")
    return raw
