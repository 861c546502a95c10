"""The numba decorator every draft kernel uses; without numba it leaves a plain Python function."""
from __future__ import annotations

try:
    import numba as nb
except ImportError:  # numba is the optional `fast` extra
    nb = None


def _identity(f):
    return f


# error_model="numpy": IEEE division with no zero checks (they block vectorisation). Never fastmath:
# a sum's order, hence its bits, must not depend on how LLVM vectorises it. Small helpers are plain
# jitted functions too: LLVM inlines them into the caller's loops (measured: the same speed as numba's
# inline="always", at half the first-run compile time).
jit = nb.njit(nogil=True, cache=True, error_model="numpy") if nb is not None else _identity
