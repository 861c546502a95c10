"""Pure comparisons: state dicts, logit rows, token streams. Each judges with the profile once
(``Tolerance.judge``), files the measurement (``measure.record``) and returns None, or the difference in
words for the check's failure message."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .failure import bound_text, row_hint
from .measure import record
from .tolerance import Tolerance


def first_state_difference(got: Mapping[str, Any], ref: Mapping[str, Any], tol: Tolerance) -> str | None:
    """None when every array matches; else one paragraph naming the array, the index of the first
    offending element, both values and the max |diff| (or the shape / missing-name problem)."""
    import numpy as np

    missing, extra = sorted(set(ref) - set(got)), sorted(set(got) - set(ref))
    if missing or extra:
        return f"state arrays differ in names: missing {missing}, unexpected {extra}"
    for name in ref:  # the reference's order: layer by layer
        a, b = np.asarray(got[name]), np.asarray(ref[name])
        if a.shape != b.shape:
            return f"array {name!r}: shape {a.shape} but the sequential reference has {b.shape}{row_hint(a.shape, b.shape)}"
        j = tol.judge(a, b, name)
        if j.within:
            record(str(name).rsplit(".", 1)[-1], j)
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        atol, rtol = tol.bounds(name)
        bad = (a != b) if tol.exact else ~np.isclose(a64, b64, atol=atol, rtol=rtol)
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))
        return (f"array {name!r} first differs at index {idx}: port {a[idx].item()!r} vs reference {b[idx].item()!r} "
                f"({int(bad.sum())} of {a.size} elements outside {tol.describe(name)}); "
                + bound_text(j.max_diff, j.bound, "max |diff|", tol.name, tol.exact))
    return None


def first_logit_difference(got, want, tol: Tolerance) -> str | None:
    """None when two logit rows agree within ``tol``; else "token i: got vs want; <the bound>" at the
    largest difference."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    j = tol.judge(got, want, "logits")
    if j.within:
        record("logits", j)
        return None
    i = int(np.argmax(np.abs(got.astype(np.float64) - want)))
    return f"token {i}: {got[i]!r} vs {want[i]!r}; " + bound_text(j.max_diff, j.bound, "max |diff|", tol.name, tol.exact)


def first_token_divergence(got: Sequence[int], ref: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts at the shorter length)."""
    for i, (a, b) in enumerate(zip(got, ref)):
        if a != b:
            return i
    return None if len(got) == len(ref) else min(len(got), len(ref))


def logit_margin(logits) -> tuple[int, int, float]:
    """(top token, runner-up token, top-2 gap) of one logit row."""
    import numpy as np

    row = np.asarray(logits, np.float64)
    order = np.argsort(-row, kind="stable")
    return int(order[0]), int(order[1]), float(row[order[0]] - row[order[1]])
