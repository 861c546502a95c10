"""Decoding: plain (``generate.py``) and speculative (``speculative.py``), the sampler both use
(``sampling.py``) and the checks both make of their inputs (``inputs.py``)."""
from .generate import GenerateResult, generate
from .speculative import RoundStats, SpecResult, speculative_generate

__all__ = ["GenerateResult", "RoundStats", "SpecResult", "generate", "speculative_generate"]
