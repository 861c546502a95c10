"""Compiled (numba) twins of the draft's non-GEMM operations; ``draft.ops`` pairs each with its numpy twin.

Every kernel computes a row with the same code whatever the number of rows, in a fixed summation
order (no fastmath, so LLVM may vectorise across independent elements but never reorders a sum): a
row's bits never depend on the other rows, the row count or the row set. Where a kernel only moves
or compares values (``conv_side``, ``top_candidates_into``, ``greedy_walk_into`` on given scores) or
repeats the twin's elementwise steps it is bitwise equal to its twin; where it sums (norms,
attention, selector scores) or evaluates exp/tanh (``mathf``) it differs by rounding only
(``tests/draft/test_ops_twins.py`` pins both).

Inner loops index views with the loop variable only: numba then knows the index is non-negative and
LLVM vectorises them (an index like ``p - lo`` carries a wraparound check that blocks it).

Modules: ``attention`` (heads, attention), ``rows`` (the conv; RMSNorm and SwiGLU are ``ops.norm_fast``), ``mathf`` (exp, tanh,
softcap), ``select`` (top-k, greedy walk). Without numba every name here is None.
"""
from ._numba import nb

if nb is not None:
    from .attention import attend_block, attention_qkv, norm_rope_heads
    from .mathf import exp_neg32, softcap, tanh32
    from .rows import conv_side
    from .select import greedy_walk_into, pair_scores, top_candidates_into
else:
    attend_block = attention_qkv = norm_rope_heads = exp_neg32 = softcap = tanh32 = None
    conv_side = greedy_walk_into = pair_scores = top_candidates_into = None

__all__ = ["nb", "attend_block", "attention_qkv", "norm_rope_heads", "exp_neg32", "softcap", "tanh32", "conv_side",
           "greedy_walk_into", "pair_scores", "top_candidates_into"]
