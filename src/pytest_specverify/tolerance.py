"""Tolerance profiles (like Hypothesis settings profiles): how close is "equal" for a port.

Four named profiles ship (``PROFILES``); a port declares its own by setting ``tolerance`` to a
:class:`Tolerance` object (or a profile name), or a run declares one in its ini file::

    [pytest]
    specverify_tolerance =
        name = my-fp32
        atol = 1e-5
        rtol = 1e-5
        logits.atol = 1e-4      # per kind of array: logits, taps, or a state array's name (fnmatch)
        *.conv.rtol = 1e-4
        tie_margin = 1e-4
        kl_max = 1e-6
        logprob_max = 1e-3
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Judgement:
    """One comparison, judged once: ``max_diff`` = max |a - b|, ``share`` = the largest
    |a - b| / (atol + rtol |b|) (0 when equal; inf for an exact profile with any difference or for a NaN),
    ``within`` the verdict, ``bound`` the bound in words ("bitwise" or "atol=.. rtol=..")."""

    max_diff: float
    share: float
    within: bool
    bound: str


@dataclass(frozen=True)
class Tolerance:
    """``atol``/``rtol`` bound every state array and logit row (``|a-b| <= atol + rtol*|b|``);
    ``kinds`` overrides them per kind of array: ``"logits"``, ``"taps"`` or an fnmatch pattern over a
    state array's name (``"*.conv"``, ``"layer.0.*"``), each mapped to ``(atol, rtol)``; the first
    matching pattern wins. ``exact`` means bitwise; ``tie_margin``: at a greedy divergence, a top-2
    logit gap at or below it is a near-tie (reported, not failed) when the profile is not exact.
    ``kl_max`` / ``logprob_max`` bound the decode vs re-prefill checks (``reprefill.py``,
    ``long_context.py``): the k3 KL estimate and each token's |log p difference|; they apply to exact
    profiles too (exact covers verify and commit, not a prefill's summation order)."""

    name: str
    exact: bool = False
    atol: float = 0.0
    rtol: float = 0.0
    tie_margin: float = 0.0
    # exact / fp32 defaults. Measured: a correct float32 port (qwen3-numpy) k3 1.5e-13, max |dlogprob| 1.6e-6;
    # the prefill mutants k3 2e-2 to 3e-2, max |dlogprob| 0.4 to 0.9.
    kl_max: float = 1e-6
    logprob_max: float = 1e-3
    kinds: tuple[tuple[str, float, float], ...] = field(default=())
    source: str = "shipped profile"
    # (atol, rtol) of the port's logits against the float32 reference model (the reference-agreement check),
    # for a port whose own claims are exact but whose numbers are not the reference's (int8 GEMMs, fp16);
    # None: the profile's own bound for the kind "reference" (bitwise for an exact profile)
    reference: tuple[float, float] | None = None

    def for_reference(self) -> "Tolerance":
        """The profile the reference-agreement check judges with (``reference`` bounds, when declared)."""
        if self.reference is None:
            return self
        atol, rtol = self.reference
        return replace(self, exact=False, atol=atol, rtol=rtol, kinds=(), name=f"{self.name} (reference bound)")

    def bounds(self, kind: str | None = None) -> tuple[float, float]:
        """(atol, rtol) for one kind of array (a state array's name, ``"logits"`` or ``"taps"``)."""
        if kind is not None:
            for pattern, atol, rtol in self.kinds:
                if pattern == kind or fnmatch.fnmatchcase(kind, pattern):
                    return atol, rtol
        return self.atol, self.rtol

    def close(self, a, b, kind: str | None = None) -> bool:
        import numpy as np

        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if self.exact:
            return bool(np.array_equal(a, b))
        atol, rtol = self.bounds(kind)
        return bool(np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=False))

    def excess(self, a, b, kind: str | None = None) -> tuple[float, float]:
        """(max |a - b|, the largest |a - b| / (atol + rtol |b|)): the measured error and its share of the
        bound (1.0 = at the bound; inf for an exact profile with any difference)."""
        import numpy as np

        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a64.size == 0:
            return 0.0, 0.0
        diff = np.abs(a64 - b64)
        worst = float(diff.max())
        if self.exact:
            return worst, (0.0 if worst == 0 else float("inf"))
        atol, rtol = self.bounds(kind)
        bound = atol + rtol * np.abs(b64)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(diff == 0, 0.0, diff / bound)
        return worst, float(np.nanmax(share))

    def judge(self, a, b, kind: str | None = None) -> Judgement:
        """:meth:`close` and :meth:`excess` in one pass (what ``compare`` asks); shapes must match."""
        import numpy as np

        a, b = np.asarray(a), np.asarray(b)
        within = self.close(a, b, kind)
        diff, share = self.excess(a, b, kind)
        if not within and not share > 1:  # NaN: allclose refuses it, the share does not show it
            share = float("inf")
        return Judgement(diff, share, within, "bitwise" if self.exact else self.describe(kind))

    def describe(self, kind: str | None = None) -> str:
        if self.exact:
            return "bitwise"
        if kind is not None:
            atol, rtol = self.bounds(kind)
            return f"atol={atol:g} rtol={rtol:g}"
        extra = "".join(f" {p}:atol={a:g},rtol={r:g}" for p, a, r in self.kinds)
        return f"atol={self.atol:g} rtol={self.rtol:g}{extra} tie_margin={self.tie_margin:g}"

    def summary(self) -> str:
        """One line for the header: name, where it came from, every bound."""
        ref = "" if self.reference is None else f" reference:atol={self.reference[0]:g},rtol={self.reference[1]:g}"
        return (f"{self.name} ({self.source}): {self.describe()}{ref} kl_max={self.kl_max:g} "
                f"logprob_max={self.logprob_max:g}")


PROFILES: dict[str, Tolerance] = {
    "exact": Tolerance("exact", exact=True),
    "fp32": Tolerance("fp32", atol=1e-5, rtol=1e-5, tie_margin=1e-4),
    "fp16": Tolerance("fp16", atol=2e-3, rtol=2e-3, tie_margin=1e-2, kl_max=1e-3, logprob_max=0.1),
    # kl_max / logprob_max: SGLang's bf16 thresholds for its decode vs re-prefill check
    "npu": Tolerance("npu", atol=5e-2, rtol=5e-2, tie_margin=1e-1, kl_max=8e-3, logprob_max=0.25),
}

_SCALARS = ("atol", "rtol", "tie_margin", "kl_max", "logprob_max")


def profile(name) -> Tolerance:
    """A profile by name, or a :class:`Tolerance` a port declared (returned as it is)."""
    if isinstance(name, Tolerance):
        return name
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise ValueError(f"tolerance profile {name!r} is not known; choose one of {sorted(PROFILES)}, or declare "
                         f"your own: a pytest_specverify.Tolerance object as the port's tolerance, or a "
                         f"specverify_tolerance table in the ini file") from None


def from_table(lines: Iterable[str], base: Tolerance | None = None, source: str = "ini specverify_tolerance") -> Tolerance:
    """A profile from ``key = value`` lines (the ini table; ``#`` starts a comment). Keys: ``name``,
    ``base`` (a shipped profile to start from), ``exact``, ``atol``, ``rtol``, ``tie_margin``,
    ``kl_max``, ``logprob_max``, and ``<kind>.atol`` / ``<kind>.rtol`` per kind of array."""
    pairs = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"specverify_tolerance line {raw.strip()!r} is not 'key = value'; e.g. 'atol = 1e-5'")
        pairs.append((key.strip(), value.strip()))
    values = dict(pairs)
    tol = profile(values.pop("base")) if "base" in values else (base or PROFILES["fp32"])
    changes: dict = {"name": values.pop("name", "declared"), "source": source}
    if "exact" in values:
        changes["exact"] = values.pop("exact").lower() in ("1", "true", "yes")
    kinds: dict[str, list[float]] = {}
    for key, value in values.items():
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"specverify_tolerance: {key} = {value!r} is not a number") from None
        if not number >= 0:
            raise ValueError(f"specverify_tolerance: {key} = {value} must be >= 0")
        if key in _SCALARS:
            changes[key] = number
            continue
        kind, _, what = key.rpartition(".")
        if not kind or what not in ("atol", "rtol"):
            raise ValueError(f"specverify_tolerance: unknown key {key!r}; use {', '.join(_SCALARS)}, name, base, exact "
                             f"or <kind>.atol / <kind>.rtol (kind: logits, taps, or a state array name pattern)")
        kinds.setdefault(kind, [None, None])[0 if what == "atol" else 1] = number
    tol = replace(tol, **changes)
    if kinds:
        rows = tuple((k, tol.atol if a is None else a, tol.rtol if r is None else r) for k, (a, r) in kinds.items())
        tol = replace(tol, kinds=rows + tol.kinds)
    return tol


def declared(kinds: Mapping[str, tuple[float, float]] | None = None, **kw) -> Tolerance:
    """Shorthand for a port: ``tolerance = declared(name="hf-fp32", atol=1e-5, rtol=1e-4,
    kinds={"logits": (1e-4, 1e-4)})``; unspecified values come from the fp32 profile."""
    base = PROFILES[kw.pop("base", "fp32")]
    tol = replace(base, source="declared by the port", **{"name": "declared", **kw})
    if kinds:
        tol = replace(tol, kinds=tuple((k, float(a), float(r)) for k, (a, r) in kinds.items()))
    return tol
