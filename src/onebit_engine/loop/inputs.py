"""The checks plain decoding and the speculative loop make of their inputs, in one place."""
from __future__ import annotations

import math
import numbers
import operator
from typing import Sequence

from ..errors import ConfigError, ContextLimitError
from ..ops.sampling import temperature_floor_problem


def check_run(target, prompt: Sequence[int], *, max_new_tokens: int, temperature: float, seed=None) -> list[int]:
    """The prompt as a list of ints, after refusing what no run can do: an empty prompt, a negative
    length, a negative seed, a temperature that is negative or not finite, and a prompt plus ``max_new_tokens`` past the
    model's ``max_position_embeddings``."""
    max_new_tokens = _integer(max_new_tokens, "max_new_tokens")
    if max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    # a number, not text float() would read ("0.5" passed here, then failed in the sampler with a TypeError)
    try:
        t = float(temperature) if isinstance(temperature, numbers.Real) else float("nan")
    except OverflowError:  # an int past float's range
        t = float("inf")
    if isinstance(temperature, bool) or not math.isfinite(t) or t < 0:
        raise ConfigError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if (why := temperature_floor_problem(t)) is not None:
        raise ConfigError(f"temperature {why}")
    if seed is not None and _integer(seed, "seed") < 0:
        raise ConfigError(f"seed must be None or an integer >= 0 (numpy's rule), got {seed!r}")
    # integers only: int() made 1.7 token 1 and "3" token 3 without a word
    prompt = [_integer(t, f"prompt token {i}") for i, t in enumerate(prompt)]
    if not prompt:
        raise ConfigError("prompt is empty; give at least one token")
    limit = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    # The last token is emitted, never forwarded: a run holds prompt + max_new_tokens - 1 positions.
    need = len(prompt) + max(max_new_tokens - 1, 0)
    if limit is not None and need > limit:
        raise ContextLimitError(
            f"a prompt of {len(prompt)} tokens plus max_new_tokens={max_new_tokens} needs {need} positions but the model "
            f"has max_position_embeddings={limit}; shorten the prompt or lower max_new_tokens to at most "
            f"{max(limit - len(prompt) + 1, 0)}")
    return prompt


def _integer(v, name: str) -> int:
    """Any integer, numpy's included (``operator.index``); not a bool, a float or a string."""
    if isinstance(v, bool):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise ConfigError(f"{name} must be an integer, got {v!r}") from None
