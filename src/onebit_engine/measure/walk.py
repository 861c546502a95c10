"""The model's projections as the benchmarks count them: every ``gemm.Linear`` reachable from a model object,
and the bytes its backend holds for one."""
from __future__ import annotations

import numpy as np


def linears(obj, seen=None):
    """Every ``gemm.Linear`` reachable from ``obj`` through lists, tuples, dicts and the attributes of the
    engine's own objects (never into a library's: a compiled function's object graph is large and imports)."""
    from ..gemm import Linear

    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (np.ndarray, str, bytes, int, float)) or obj is None:
        return
    seen.add(id(obj))
    if isinstance(obj, Linear):
        yield obj
        return
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif type(obj).__module__.startswith("onebit_engine."):  # the model's own parts, not a library's object graph
        attrs = getattr(obj, "__dict__", None)
        items = attrs.values() if isinstance(attrs, dict) else ()
    else:
        return
    for v in items:
        yield from linears(v, seen)


def packed_bytes(lin) -> int:
    return int(getattr(lin.packed, "nbytes", 0))
