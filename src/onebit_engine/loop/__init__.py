"""Decoding: plain (``generate.py``) and speculative (``speculative.py``), and the checks both make of
their inputs (``inputs.py``). The sampler both use is ``ops/sampling.py``."""
from .generate import GenerateResult, generate
from .speculative import RoundStats, SpecResult, speculative_generate

__all__ = ["GenerateResult", "RoundStats", "SpecResult", "generate", "speculative_generate"]
