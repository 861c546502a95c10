"""Plain decoding: one batched prefill, then one ``forward`` per token (the speculative loop's twin)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..ops.sampling import choose, finite_row
from .inputs import check_run


@dataclass
class GenerateResult:
    """tokens: the generated ids (prompt excluded; a stop token, when hit, is the last one).
    stop_reason: "stop_token" or "max_new_tokens"."""

    tokens: list[int]
    prompt_tokens: int
    stop_reason: str
    prefill_s: float
    decode_s: float
    provenance: dict[str, Any] = field(default_factory=dict)  # empty: the reporting caller fills it (plain_provenance)

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput: tokens after the first over the decode time (prefill excluded)."""
        n = max(len(self.tokens) - 1, 0)
        return n / self.decode_s if self.decode_s > 0 else float("nan")


def generate(
    target, prompt: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None,
    stop_tokens: Sequence[int] | None = None,
) -> GenerateResult:
    """Greedy (T = 0) or sampled decoding of ``max_new_tokens`` tokens after ``prompt``."""
    prompt = check_run(target, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    stops = set(target.config.eos_token_ids if stop_tokens is None else stop_tokens)
    rng = np.random.default_rng(seed) if temperature > 0 else None
    state = target.new_state()
    out: list[int] = []
    t0 = time.perf_counter()
    logits = target.forward(prompt, state).logits[-1]
    t1 = time.perf_counter()
    reason = "max_new_tokens"
    while len(out) < max_new_tokens:
        tok = choose(finite_row(logits, f"token {len(out)} (plain decoding)"), temperature, rng)
        out.append(tok)
        if tok in stops:
            reason = "stop_token"
            break
        if len(out) == max_new_tokens:
            break
        logits = target.forward([tok], state).logits[0]
    t2 = time.perf_counter()
    return GenerateResult(out, len(prompt), reason, t1 - t0, t2 - t1)
