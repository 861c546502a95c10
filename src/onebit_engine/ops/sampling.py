"""Turning logits into tokens: greedy at T = 0, otherwise a seeded draw from softmax(logits / T)."""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError, NumericalError


# The smallest T > 0 a run takes: a float32 logit (|z| <= 3.4e38) over T stays finite in float64 down to
# T ~ 1e-270, and in the float32 softmax of a draft (softcapped logits, |z| <= ~50) down to ~1e-37; below
# 1e-30 the draw is greedy decoding in all but name, and a subnormal T (1e-320) turned every row to NaN.
MIN_TEMPERATURE = 1e-30


def temperature_floor_problem(t: float) -> "str | None":
    """Why T cannot be used (0 < T < MIN_TEMPERATURE), else None."""
    if 0 < t < MIN_TEMPERATURE:
        return (f"{t!r} is below {MIN_TEMPERATURE:g}, where logits / T overflow; give 0 for greedy decoding (what so "
                f"small a T means) or a temperature >= {MIN_TEMPERATURE:g}")
    return None


def finite_row(logits: np.ndarray, where: str) -> np.ndarray:
    """``logits`` [V] unchanged, or a NumericalError naming ``where`` when any value is NaN or inf: a token
    chosen from such a row is meaningless (argmax of NaN is 0), so the run stops instead of emitting it."""
    ok = np.isfinite(logits)
    if not ok.all():
        bad = np.asarray(logits)[~ok]
        kinds = "/".join(sorted({"NaN" if np.isnan(v) else "inf" for v in bad[:64].tolist()}))
        raise NumericalError(
            f"{where}: the target's logits hold {kinds} ({bad.size} of {ok.size} values); no token is emitted - the "
            f"weights or activations overflowed: check the checkpoint's weights (values near float32's limit, 3.4e38, "
            f"overflow) or run it on another backend to compare")
    return logits


def probs(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T) in float64 over the last axis. Shapes: [..., V] -> [..., V]."""
    if temperature <= 0:
        raise ConfigError(f"temperature must be > 0 for a distribution, got {temperature}; use greedy() at T = 0")
    z = np.asarray(logits, np.float64) / float(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def greedy(logits: np.ndarray) -> int:
    """argmax; ties go to the lowest id (numpy's rule), the same everywhere in the engine."""
    return int(np.argmax(logits))


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from a probability vector by inverse CDF (one uniform per draw; zero-mass ids never win)."""
    c = np.cumsum(p, dtype=np.float64)
    u = rng.random() * c[-1]
    i = int(np.searchsorted(c, u, side="right"))
    i = min(i, len(p) - 1)
    while p[i] <= 0:  # guard against landing on a zero-probability id at a float boundary
        i -= 1
    return i


def choose(logits: np.ndarray, temperature: float, rng: np.random.Generator | None) -> int:
    if temperature <= 0:
        return greedy(logits)
    if rng is None:
        raise ConfigError("sampling at temperature > 0 needs an rng (np.random.Generator); pass seed=")
    return draw(probs(logits, temperature), rng)
