"""What a failing check says: the failure type and the text pieces its messages share (a token window
around a divergence, the round a token came from, a logit margin, a row-count hint). No comparison and
no check lives here: the checks decide, this module words it."""
from __future__ import annotations

from typing import Sequence


class SpecVerifyFailure(AssertionError):
    """A check found the port wrong; the message says where and by how much."""


def token_window(got: Sequence[int], ref: Sequence[int], i: int, width: int = 6) -> str:
    """The speculative and the plain token streams around index ``i`` (the first difference marked)."""
    lo = max(0, i - width)

    def fmt(s) -> str:
        return " ".join(f"[{t}]" if j == i else str(t) for j, t in enumerate(list(s)[lo : i + width + 1], lo))

    return f"  tokens {lo}..{i + width}:\n    speculative: {fmt(got)}\n    plain      : {fmt(ref)}"


def round_of(run, index: int) -> str:
    """Which round of ``run`` (a SpecRun) emitted output token ``index``, and what it was there."""
    pos = 1  # tokens[0] comes from the prefill
    if index == 0:
        return "the token from the prefill"
    for j, (a, n) in enumerate(zip(run.accepted, run.proposed)):
        if pos + a + 1 > index:
            kind = "an accepted draft" if index - pos < a else "the bonus token"
            return f"round {j} ({a} of {n} drafts accepted; it is {kind} of that round)"
        pos += a + 1
    return "after the last recorded round (a plain step)"


def rows_label(r: int, k: int) -> str:
    """A kept-row count in words: r rows of a k-draft verify."""
    if r == 0:
        return "no row kept"
    if r == k + 1:
        return f"full accept ({k} of {k} drafts)"
    return f"{r - 1} of {k} drafts accepted"


def row_hint(got_shape, want_shape) -> str:
    """" - 2 rows too many along axis 1" when two shapes differ along one axis only, else ""."""
    d = [i for i, (x, y) in enumerate(zip(got_shape, want_shape)) if x != y] if len(got_shape) == len(want_shape) else []
    if len(d) == 1:
        n = got_shape[d[0]] - want_shape[d[0]]
        return f" - {abs(n)} row{'s' if abs(n) != 1 else ''} {'too many' if n > 0 else 'too few'} along axis {d[0]}"
    return ""


def margin_text(logits, top: int, second: int, gap: float) -> str:
    """The top-2 logits of one row and their gap."""
    return (f"plain logits there: top {top} ({logits[top]:.6g}), runner-up {second} ({logits[second]:.6g}), "
            f"margin {gap:.3e}")


def bound_text(measured: float, bound: str, what: str, profile_name: str, exact: bool) -> str:
    """The sentence every tolerance failure ends with: a measured error against the declared bound, and the
    way out when the engine merely rounds (an exact profile's failure is not a bug when the engine does not
    claim bitwise results)."""
    if exact:
        return (f"measured {what} {measured:.3e} where profile {profile_name!r} declares bitwise equality: if your "
                f"engine rounds this way (a batched pass that sums in another order than single steps), declare a "
                f"profile with a bound (fp32, or your own Tolerance)")
    return (f"measured {what} {measured:.3e} exceeds the declared bound {bound} of profile {profile_name!r}: declare a "
            f"profile if your engine rounds this way")
