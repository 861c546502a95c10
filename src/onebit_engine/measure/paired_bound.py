"""Plain decoding against the memory bandwidth of the same moment.

A plain step of a model far larger than the caches reads every weight once, so its bound is the bytes it
reads over what the memory delivers. On a shared VM that delivery is not one number: this one's read stream
moved between ~33 and ~57 GB/s from one minute to the next, and a 27B plain run once streamed 43 GB/s while
every stream read of the same run (shuffled between the variants) met a slow minute and got at most 37.9 -
a "bound" plain decoding beat by 1.14x. The run's fastest read, the older bound, lets a fast moment of the
stream judge plain steps that met slow ones (0.47 in one 35B-A3B run, 0.75 in the next, same code).

So each plain step here is timed right after a timed read of the stream, and its share is its own read
rate over that read's: both sides of a ratio see the same moment. ``paired_steps`` decodes the run's own
tokens this way; ``paired_share`` is the median over steps.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from .membw import stream_gb_s

READS = 2  # timed reads of the stream before each step; the faster counts (a bound is the best the memory does)


def paired_steps(target, prompt: Sequence[int], tokens: Sequence[int], stream, reads: int = READS) -> list[tuple[float, float]]:
    """Prefill ``prompt``, then feed ``tokens`` one plain step each (plain greedy decoding's steps when
    ``tokens`` are its output but the last), each step right after ``reads`` timed reads of ``stream``
    (``membw.ReadStream``). -> [(stream GB/s, step seconds)], a pair per step."""
    if reads < 1:
        raise ValueError(f"reads={reads}: at least one stream read goes before each step")
    state = target.new_state()
    target.forward(list(prompt), state)
    out = []
    for tok in tokens:
        gb_s = stream_gb_s(stream, reads)
        t0 = time.perf_counter()
        target.forward([int(tok)], state)
        out.append((gb_s, time.perf_counter() - t0))
    return out


def paired_share(pairs: Sequence[tuple[float, float]], step_bytes: int) -> "dict | None":
    """The median over steps of (step_bytes / step seconds) / (the stream's bytes a second just before it),
    with the quartiles and the medians of each side; None for no pairs."""
    pairs = [(g, s) for g, s in pairs if g > 0 and s > 0 and np.isfinite(g) and np.isfinite(s)]
    if not pairs:
        return None
    shares = np.array([step_bytes / s / (g * 1e9) for g, s in pairs])
    q25, q50, q75 = (float(x) for x in np.percentile(shares, [25, 50, 75]))
    return {"share": q50, "share_quartiles": [q25, q75], "steps": len(pairs),
            "stream_gb_s_median": float(np.median([g for g, _ in pairs])),
            "step_ms_median": float(np.median([s for _, s in pairs]) * 1e3)}
