"""Named tolerance profiles (like Hypothesis settings profiles): how close is "equal" for a port."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """``atol``/``rtol`` bound every state array and logit row (``|a-b| <= atol + rtol*|b|``);
    ``exact`` means bitwise; ``tie_margin``: at a greedy divergence, a top-2 logit gap at or below it
    is a near-tie (reported, not failed) when the profile is not exact."""

    name: str
    exact: bool = False
    atol: float = 0.0
    rtol: float = 0.0
    tie_margin: float = 0.0

    def close(self, a, b) -> bool:
        import numpy as np

        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if self.exact:
            return bool(np.array_equal(a, b))
        return bool(np.allclose(a, b, atol=self.atol, rtol=self.rtol, equal_nan=False))

    def describe(self) -> str:
        return "bitwise" if self.exact else f"atol={self.atol:g} rtol={self.rtol:g} tie_margin={self.tie_margin:g}"


PROFILES: dict[str, Tolerance] = {
    "exact": Tolerance("exact", exact=True),
    "fp32": Tolerance("fp32", atol=1e-5, rtol=1e-5, tie_margin=1e-4),
    "fp16": Tolerance("fp16", atol=2e-3, rtol=2e-3, tie_margin=1e-2),
    "npu": Tolerance("npu", atol=5e-2, rtol=5e-2, tie_margin=1e-1),
}


def profile(name: str) -> Tolerance:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"tolerance profile {name!r} is not known; choose one of {sorted(PROFILES)}") from None
