"""Named tolerance profiles (like Hypothesis settings profiles): how close is "equal" for a port."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """``atol``/``rtol`` bound every state array and logit row (``|a-b| <= atol + rtol*|b|``);
    ``exact`` means bitwise; ``tie_margin``: at a greedy divergence, a top-2 logit gap at or below it
    is a near-tie (reported, not failed) when the profile is not exact. ``kl_max`` / ``logprob_max``
    bound the decode vs re-prefill check (``reprefill.py``): the k3 KL estimate over the generated
    tokens and each token's |log p difference|; they apply to exact profiles too (exact covers verify
    and commit, not a prefill's summation order)."""

    name: str
    exact: bool = False
    atol: float = 0.0
    rtol: float = 0.0
    tie_margin: float = 0.0
    # exact / fp32 defaults. Measured: a correct float32 port (qwen3-numpy) k3 1.5e-13, max |dlogprob| 1.6e-6;
    # the prefill mutants k3 2e-2 to 3e-2, max |dlogprob| 0.4 to 0.9.
    kl_max: float = 1e-6
    logprob_max: float = 1e-3

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
    "fp16": Tolerance("fp16", atol=2e-3, rtol=2e-3, tie_margin=1e-2, kl_max=1e-3, logprob_max=0.1),
    # kl_max / logprob_max: SGLang's bf16 thresholds for its decode vs re-prefill check
    "npu": Tolerance("npu", atol=5e-2, rtol=5e-2, tie_margin=1e-1, kl_max=8e-3, logprob_max=0.25),
}


def profile(name: str) -> Tolerance:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"tolerance profile {name!r} is not known; choose one of {sorted(PROFILES)}") from None
