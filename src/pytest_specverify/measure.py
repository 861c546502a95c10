"""The measurement recorder: the largest error every comparison of one check measured, next to its bound
(what a passing check reports). The plugin wraps each check in :func:`measuring`; ``compare`` files each
comparison's :class:`~pytest_specverify.tolerance.Judgement` here."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

_MEASURE: ContextVar = ContextVar("specverify_measure", default=None)


class Measurement:
    """Per kind of array (``logits`` or the state array's last name part: ``conv``, ``keys``...): the
    largest (share of the bound, max |diff|, bound)."""

    def __init__(self):
        self.worst: dict[str, tuple[float, float, str]] = {}

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
    """Collect what every comparison inside measures."""
    m = Measurement()
    token = _MEASURE.set(m)
    try:
        yield m
    finally:
        _MEASURE.reset(token)


def record(label: str, judgement) -> None:
    """File one comparison's judgement (a no-op outside :func:`measuring`)."""
    m = _MEASURE.get()
    if m is not None:
        m.add(label, judgement.max_diff, judgement.share, judgement.bound)
