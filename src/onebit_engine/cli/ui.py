"""Output for people and machines: plain tables, one-line JSON, progress bars on stderr.

Progress bars are drawn with rich (or tqdm) on stderr, and only when stderr is a terminal and the
output is neither ``--json`` nor ``--quiet``: a pipe or a test never sees one. Lines saying what is
being done are ``status.py``'s.

JSON is strict (``allow_nan=False``): a figure that was not measured is ``null`` with its reason in
``null_reasons`` of the object holding it. The commands put None and a reason where they know why;
``strict`` turns any NaN / Infinity left over into null with a generic reason, so no command can print
a constant that ``JSON.parse`` or ``json.loads(..., parse_constant=...)`` rejects.
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any, Sequence


class Bar:
    """``with Bar(total, "capture", enabled) as bar: bar(1)``; a no-op when disabled."""

    def __init__(self, total: int, description: str, enabled: bool):
        self.total, self.description, self.enabled = total, description, enabled
        self._impl = None

    def __enter__(self) -> "Bar":
        if not self.enabled:
            return self
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=True)
            self._rich.start()
            task = self._rich.add_task(self.description, total=self.total)
            self._impl = lambda n: self._rich.advance(task, n)
        except ImportError:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=self.total, desc=self.description, file=sys.stderr, leave=False)
                self._impl = self._tqdm.update
            except ImportError:
                self.enabled = False
        return self

    def __call__(self, n: int = 1) -> None:
        if self._impl is not None:
            self._impl(n)

    def __exit__(self, *exc) -> None:
        if hasattr(self, "_rich"):
            self._rich.stop()
        if hasattr(self, "_tqdm"):
            self._tqdm.close()


def progress_enabled(args) -> bool:
    return not getattr(args, "json", False) and not getattr(args, "quiet", False) and sys.stderr.isatty()


def note(args, text: str) -> None:
    """A line about what is happening, on stderr, by ``status.Status``'s rule (a terminal or --verbose;
    never --quiet): stdout stays the result."""
    from .status import Status

    Status(args).say(text)


def error(msg: str) -> None:
    """The refusal's one stderr line (docs/cli.md: ``onebit: error: ...``, then exit 2 by the caller)."""
    print(f"onebit: error: {msg}", file=sys.stderr)


def warning(msg: str, file=None) -> None:
    """A warning's one stderr line, ``onebit: warning: ...``."""
    print(f"onebit: warning: {msg}", file=sys.stderr if file is None else file)


def count(n: int, noun: str) -> str:
    """``1 repeat``, ``3 repeats``."""
    return f"{n} {noun}{'s' * (n != 1)}"


def fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 2) -> str:
    """A plain aligned text table (numbers right-aligned)."""
    cells = [[fmt(c, digits) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(headers))]

    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def print_json(obj: Any) -> None:
    print(json.dumps(strict(obj), default=str, sort_keys=False, allow_nan=False))


def dumps(obj: Any) -> str:
    return json.dumps(strict(obj), default=str, indent=2, allow_nan=False) + "\n"


NOT_FINITE = "not a finite number ({value}): nothing was measured for it"


def strict(obj: Any) -> Any:
    """A copy of ``obj`` that strict JSON can hold: numpy values as Python ones, objects as their
    fields, and each NaN / Infinity as None with ``null_reasons[key]`` set in the dict holding it (a
    reason already there is kept)."""
    return _strict(obj, None, "")


def _strict(o: Any, reasons: dict | None, key: str) -> Any:
    if not isinstance(o, (dict, list, tuple, str, int, float, bool, type(None))):
        o = _jsonable(o)
    if isinstance(o, float) and not math.isfinite(o):
        if reasons is not None:
            reasons.setdefault(key, NOT_FINITE.format(value=o))
        return None
    if isinstance(o, dict):
        found: dict[str, str] = {}
        out = {k: _strict(v, found, str(k)) for k, v in o.items() if k != "null_reasons"}
        given = o.get("null_reasons")
        if isinstance(given, dict):
            out["null_reasons"] = {**found, **_strict(given, None, "")}
        elif "null_reasons" in o:
            out["null_reasons"] = _strict(given, None, "")
        elif found:
            out["null_reasons"] = found
        return out
    if isinstance(o, (list, tuple)):
        return [_strict(v, reasons, f"{key}[{i}]") for i, v in enumerate(o)]
    return o


def _jsonable(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    if hasattr(o, "__dict__"):
        return dict(vars(o))
    return str(o)
