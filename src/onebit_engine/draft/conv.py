"""DFlash 2 grouped dynamic causal convolution (REF-NEW ``GroupedDynamicCausalConv``; docs/draft.md,
"DFlash 2 additions").

It runs over the rows of one draft block only (stateless across rounds; row 0 sees zero padding)::

    dyn = kernel_projection(x) reshaped [T, 2 (side), K (tap), G]     # from the PRE-conv input x
    conv_side(y)[t, c] = sum_{o<K} (base_kernel[side, o, c] + dyn[t, side, o, c // g]) * y[t-o, c]

``prepare(x)`` returns ``(conv_0(x), dyn[:, 1])`` and is applied to a sublayer's normed input;
``finish(y, dyn1)`` returns ``conv_1(y)`` and is applied to the sublayer output before the residual add.
The dynamic taps of row t come from row t's input, not from row t - o.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..gemm import Linear

F32 = np.float32


@dataclass(frozen=True)
class GroupedDynamicConv:
    """One conv module. ``base_kernel`` float32 [2, K, H] ([side, tap, channel]);
    ``kernel_projection`` a Linear H -> 2*K*G (G = H / group_size)."""

    base_kernel: np.ndarray
    kernel_projection: Linear
    group_size: int

    @property
    def kernel_size(self) -> int:
        return self.base_kernel.shape[1]

    def dynamic(self, x: np.ndarray) -> np.ndarray:
        """Per-row dynamic taps. Shapes: x [T, H] -> [T, 2, K, G]."""
        g = x.shape[1] // self.group_size
        return self.kernel_projection(x).reshape(x.shape[0], 2, self.kernel_size, g)

    def prepare(self, x: np.ndarray, side: Callable[..., np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Shapes: x [T, H] -> (conv_0(x) [T, H], dyn1 [T, K, G]). ``side``: a twin of
        :func:`grouped_dynamic_conv` (``draft.ops``); None means that function."""
        dyn = self.dynamic(x)
        return (side or grouped_dynamic_conv)(x, dyn[:, 0], self.base_kernel[0], self.group_size), dyn[:, 1]

    def finish(self, y: np.ndarray, dyn1: np.ndarray, side: Callable[..., np.ndarray] | None = None) -> np.ndarray:
        """Shapes: y [T, H], dyn1 [T, K, G] -> [T, H]."""
        return (side or grouped_dynamic_conv)(y, dyn1, self.base_kernel[1], self.group_size)


def grouped_dynamic_conv(y: np.ndarray, dyn: np.ndarray, base: np.ndarray, group_size: int) -> np.ndarray:
    """One side of the conv, vectorised over rows and channels.

    Shapes: y [T, H]; dyn [T, K, G]; base [K, H]; returns [T, H]. Accumulates tap by tap in REF's order
    (``out + base * y_shift`` then ``+ dyn * y_shift``).
    """
    t, _ = y.shape
    out = np.zeros_like(y, dtype=F32)
    for o in range(base.shape[0]):
        shifted = np.zeros_like(y, dtype=F32)  # y[t - o], zero above row 0
        shifted[o:] = y[: t - o] if o else y
        out = out + base[o][None, :] * shifted
        out = out + np.repeat(dyn[:, o, :], group_size, axis=1) * shifted
    return out


def grouped_dynamic_conv_slow(y: np.ndarray, dyn: np.ndarray, base: np.ndarray, group_size: int) -> np.ndarray:
    """The obviously-correct twin of :func:`grouped_dynamic_conv`: explicit loops, float64 sums."""
    t_len, h = y.shape
    out = np.zeros((t_len, h), np.float64)
    for t in range(t_len):
        for c in range(h):
            for o in range(base.shape[0]):
                if t - o >= 0:
                    w = float(base[o, c]) + float(dyn[t, o, c // group_size])
                    out[t, c] += w * float(y[t - o, c])
    return out.astype(F32)
