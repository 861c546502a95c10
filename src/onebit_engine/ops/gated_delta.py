"""One token of a Gated DeltaNet layer's recurrences: the causal depthwise conv and the gated delta rule.

Both the plain step, the batched verify and the commit replay call :func:`gdn_token` row by row, so a
replayed state is bitwise the state the verify left (docs/model-math.md, "Gated DeltaNet layer", (b)-(e)).
"""
from __future__ import annotations

import numpy as np

from .norm import l2norm, silu

F32 = np.float32


def conv_step(conv_state: np.ndarray, column: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Causal depthwise conv for one new pre-conv column.

    Shapes: conv_state [C, K-1] (the last K-1 pre-conv columns, oldest first); column [C];
    weight [C, K] (weight[:, K-1] multiplies the current column). Returns (out [C], new_state [C, K-1]).
    """
    k = weight.shape[1]
    out = weight[:, k - 1] * column
    for j in range(k - 1):  # fixed tap order: oldest history column first
        out = out + weight[:, j] * conv_state[:, j]
    if k > 1:
        new_state = np.concatenate([conv_state[:, 1:], column[:, None]], axis=1)
    else:
        new_state = conv_state
    return out.astype(F32), new_state


def delta_rule_step(
    S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, alpha: np.ndarray, beta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decay, read, delta-rule write, read-out (in exactly that order).

    Shapes: S [HV, dk, dv]; q, k [HV, dk] (already l2-normed, q scaled, heads repeated);
    v [HV, dv]; alpha, beta [HV]. Returns (o [HV, dv], new S).
    """
    S = S * alpha[:, None, None]
    mem = np.matmul(k[:, None, :], S)[:, 0, :]  # [HV, dv]
    delta = (v - mem) * beta[:, None]
    S = S + k[:, :, None] * delta[:, None, :]
    o = np.matmul(q[:, None, :], S)[:, 0, :]
    return o, S


def gdn_token(
    conv_state: np.ndarray,
    S: np.ndarray,
    mixed: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    conv_weight: np.ndarray,
    n_k_heads: int,
    dk: int,
    dv: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One token through conv + SiLU + split + l2norm + delta rule.

    Shapes: mixed [C] (the projection output before the conv, channel order [q | k | v]);
    alpha, beta [HV]. Returns (o [HV, dv], new conv_state, new S).
    """
    out, conv_state = conv_step(conv_state, mixed, conv_weight)
    x = silu(out)
    key_dim = n_k_heads * dk
    n_v_heads = S.shape[0]
    r = n_v_heads // n_k_heads
    q = l2norm(x[:key_dim].reshape(n_k_heads, dk)) * F32(1.0 / np.sqrt(dk))
    k = l2norm(x[key_dim : 2 * key_dim].reshape(n_k_heads, dk))
    v = x[2 * key_dim :].reshape(n_v_heads, dv)
    if r > 1:  # value head h reads key head h // r
        q = np.repeat(q, r, axis=0)
        k = np.repeat(k, r, axis=0)
    o, S = delta_rule_step(S, q, k, v, alpha, beta)
    return o, conv_state, S
