"""Pure comparisons that produce readable failure text (no pytest): state dicts, token streams."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Mapping, Sequence

from .tolerance import Tolerance

_MEASURE: ContextVar = ContextVar("specverify_measure", default=None)


class Measurement:
    """The largest error every comparison of one check measured, per kind of array (``logits`` or the
    state array's last name part: ``conv``, ``keys``...), next to its bound: what a pass reports."""

    def __init__(self):
        self.worst: dict[str, tuple[float, float, str]] = {}  # kind -> (share of the bound, max |diff|, bound)

    def add(self, kind: str, diff: float, share: float, bound: str) -> None:
        if kind not in self.worst or (share, diff) > self.worst[kind][:2]:
            self.worst[kind] = (share, diff, bound)

    @property
    def share(self) -> float:
        return max((w[0] for w in self.worst.values()), default=0.0)

    def describe(self) -> str:
        if not self.worst:
            return "no array compared"
        parts = [f"{k} max |diff| {d:.2e} ({b}{'' if b == 'bitwise' else f', {s:.0%} of the bound'})"
                 for k, (s, d, b) in sorted(self.worst.items())]
        return "measured " + "; ".join(parts)


@contextmanager
def measuring():
    """Collect what every comparison inside measures (the plugin wraps each check in one)."""
    m = Measurement()
    token = _MEASURE.set(m)
    try:
        yield m
    finally:
        _MEASURE.reset(token)


def _record(tol: Tolerance, a, b, kind: str, label: str) -> None:
    m = _MEASURE.get()
    if m is None:
        return
    diff, share = tol.excess(a, b, kind)
    m.add(label, diff, share, tol.describe(kind) if not tol.exact else "bitwise")


def owned(a):
    """A copy of an array a port or draft returned. It may hand out views of a buffer that its next call
    overwrites (zero-copy outputs of a C++ or device port); two such results compared later would be
    the same memory and always "equal". Checks drive ports through :func:`owned_outputs`."""
    import numpy as np

    return None if a is None else np.array(a, copy=True)


def owned_arrays(arrays: Mapping[str, Any]) -> dict:
    """:func:`owned` for every array of a ``state_arrays`` result (a device port may download every state
    into the same host buffers)."""
    return {name: owned(a) for name, a in arrays.items()}


class _OwnedOutputs:
    """The port, with every array it hands to a check copied on the way out: ``prefill`` / ``step`` /
    ``verify`` logits and taps, and ``state_arrays``. Everything else is the port's own."""

    def __init__(self, port):
        self._port = port

    def __getattr__(self, name):
        return getattr(self._port, name)

    def _rows(self, rows):
        from .protocol import Rows

        return Rows(owned(rows.logits), owned(getattr(rows, "taps", None)))

    def prefill(self, state, tokens):
        return self._rows(self._port.prefill(state, tokens))

    def step(self, state, token):
        return self._rows(self._port.step(state, token))

    def verify(self, state, tokens, *, path):
        return self._rows(self._port.verify(state, tokens, path=path))

    def state_arrays(self, state):
        return owned_arrays(self._port.state_arrays(state))


def owned_outputs(port):
    """``port`` as every check drives it: its outputs copied (idempotent)."""
    return port if isinstance(port, _OwnedOutputs) else _OwnedOutputs(port)


def unwrapped(port):
    """The port itself, under the :func:`owned_outputs` wrapper if it is one."""
    return port._port if isinstance(port, _OwnedOutputs) else port


class SpecVerifyFailure(AssertionError):
    """A check found the port wrong; the message says where and by how much."""


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
            return (f"array {name!r}: shape {a.shape} but the sequential reference has {b.shape}"
                    f"{_row_hint(a.shape, b.shape)}")
        if tol.close(a, b, name):
            _record(tol, a, b, name, str(name).rsplit(".", 1)[-1])
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        diff = np.abs(a64 - b64)
        atol, rtol = tol.bounds(name)
        bad = (a != b) if tol.exact else ~np.isclose(a64, b64, atol=atol, rtol=rtol)
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))
        return (f"array {name!r} first differs at index {idx}: port {a[idx].item()!r} vs reference {b[idx].item()!r} "
                f"(max |diff| {float(diff.max()):.3e}, {int(bad.sum())} of {a.size} elements outside "
                f"{tol.describe(name)} of profile {tol.name!r})")
    return None


def first_logit_difference(got, want, tol: Tolerance) -> str | None:
    """None when two logit rows agree within ``tol``; else "token i: got vs want; <tolerance>" at the
    largest difference."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    if tol.close(got, want, "logits"):
        _record(tol, got, want, "logits", "logits")
        return None
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    i = int(np.argmax(np.abs(got.astype(np.float64) - want)))
    return f"token {i}: {got[i]!r} vs {want[i]!r}; {tol.describe('logits')} (profile {tol.name!r})"


def _row_hint(sa, sb) -> str:
    d = [i for i, (x, y) in enumerate(zip(sa, sb)) if x != y] if len(sa) == len(sb) else []
    if len(d) == 1:
        n = sa[d[0]] - sb[d[0]]
        return f" - {abs(n)} row{'s' if abs(n) != 1 else ''} {'too many' if n > 0 else 'too few'} along axis {d[0]}"
    return ""


def first_token_divergence(got: Sequence[int], ref: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts at the shorter length)."""
    for i, (a, b) in enumerate(zip(got, ref)):
        if a != b:
            return i
    return None if len(got) == len(ref) else min(len(got), len(ref))


def token_window(got: Sequence[int], ref: Sequence[int], i: int, width: int = 6) -> str:
    lo = max(0, i - width)
    fmt = lambda s: " ".join(f"[{t}]" if j == i else str(t) for j, t in enumerate(s[lo : i + width + 1], lo))  # noqa: E731
    return (f"  tokens {lo}..{i + width}:\n    speculative: {fmt(list(got))}\n    plain      : {fmt(list(ref))}")


def logit_margin(logits) -> tuple[int, int, float]:
    """(top token, runner-up token, top-2 gap) of one logit row."""
    import numpy as np

    row = np.asarray(logits, np.float64)
    order = np.argsort(-row, kind="stable")
    return int(order[0]), int(order[1]), float(row[order[0]] - row[order[1]])
