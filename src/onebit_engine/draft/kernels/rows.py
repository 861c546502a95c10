"""Row-wise kernel of a draft layer: one side of the grouped dynamic conv (the norms and the SwiGLU gate are
``ops.norm_fast``'s, shared with the target)."""
from __future__ import annotations

import numpy as np

from ._numba import jit

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "592b05135390c262"

F32 = np.float32


@jit
def conv_side(y, dyn, base, group_size, out):
    """One side of the grouped dynamic conv, bitwise equal to ``conv.grouped_dynamic_conv``.

    Shapes: y [T, H]; dyn [T, K, G]; base [K, H]; out [T, H] (written, returned). The same float32
    steps per element: ``acc = acc + base * y[t-o]`` then ``acc = acc + dyn * y[t-o]``, tap by tap.
    """
    t_len, h = y.shape
    k = base.shape[0]
    wrow = np.empty(h, np.float32)  # the row's dynamic tap per channel (its group's value)
    for t in range(t_len):
        dst = out[t]
        for c in range(h):
            dst[c] = 0.0
        for o in range(min(k, t + 1)):
            src = y[t - o]
            bo = base[o]
            for grp in range(h // group_size):  # no division per channel
                w = dyn[t, o, grp]
                wg = wrow[grp * group_size : (grp + 1) * group_size]
                for c in range(group_size):
                    wg[c] = w
            for c in range(h):  # the twin's two steps, in its order
                dst[c] = (dst[c] + bo[c] * src[c]) + wrow[c] * src[c]
    return out
