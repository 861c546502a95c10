"""The compute side of the scale benchmark's bounds: the multiply-adds a second the backend's GEMM does on
this machine, and what that rate and the read stream leave the loop.

Why: a plain step reads every weight once, so it is bound by memory; a verify of k + 1 rows does k + 1 times
its multiply-adds on the same bytes, and on a CPU that work can take longer than the read (a 27B int4 verify
of 8 rows is ~205 G multiply-adds). A loop / plain target can then be out of any engine's reach on a given
machine, and the run should say so: ``ceilings`` takes the time a verify and a draft round *must* take -
the larger of their multiply-adds at the measured rate and their weight bytes at the run's fastest stream
read - and gives the most the loop could yield over the plain decoding measured beside it. Attention, the
delta rule, the commit and Python are not counted, and the rate is the run's best per-thread rate times the
loop's threads (no thread pool's cost: 2 threads measured ~1.8x one on the probe's weight, while a 27B
verify's large products got ~1.9x), so it is a ceiling, not an estimate.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from ..hybrid.moe_mlp import MoeMLP, sparse_blocks
from ..loop.stages import best_passes
from .walk import linears, packed_bytes

WEIGHT_SHAPE = (2048, 4096)  # 8 M weights: in the last-level cache (4-8 MiB packed), out of a core's L2
CALLS = 12  # timed calls per measurement; the fastest counts (as the stream's fastest read does)


def linear_macs(lin) -> int:
    """Multiply-adds one row of a projection does: its weight's N x K."""
    return int(lin.in_features) * int(lin.out_features)


def expert_size(block, size: Callable[[Any], int]) -> int:
    """``size`` of one expert of a sparse block (its projections; the mean, all experts being one size)."""
    return int(np.mean([sum(size(x) for x in linears(e)) for e in block.experts]))


def active_sum(target, size: Callable[[Any], int]) -> int:
    """``size`` summed over the projections one token runs: every layer's (of a sparse block the router,
    the shared expert and top-k of its experts) and the lm_head."""
    total = size(target.lm_head)
    for layer in target.layers:
        mlp = getattr(layer, "mlp", None)
        skip = set()
        if isinstance(mlp, MoeMLP):
            total += expert_size(mlp, size) * mlp.moe.num_experts_per_tok
            skip = {id(x) for e in mlp.experts for x in linears(e)}
        total += sum(size(x) for x in linears(layer) if id(x) not in skip)
    return total


def draft_round(draft, size: Callable[[Any], int]) -> tuple[int, int]:
    """``size`` of a draft round's projections as (its layers, its lm_head): a round runs the layers on the
    block's k + 1 rows and the lm_head on the k drafted rows. The context update (fc and the context's keys
    and values over the accepted rows) is left out: a floor."""
    return sum(size(x) for x in linears(draft.layers)), size(draft.lm_head)


def verify_extra_bytes(target, before: Sequence[int], rows: Sequence[int]) -> int:
    """Bytes a verify of ``rows`` (after ``before``) reads beyond one step's: in each sparse block the
    distinct experts those rows route to in this target (run once, traced) instead of top-k. Rows that route
    apart read more experts than a step (a 35B-A3B verify of 8 rows ~57 a layer, not 8); 0 for a dense model."""
    blocks = sparse_blocks(target)
    if not blocks:
        return 0
    kept = [b.trace for b in blocks]  # a caller's own traces: neither run here goes into them, put back after
    try:
        for b in blocks:
            b.trace = None
        state = target.new_state()
        target.forward(list(before), state)
        for b in blocks:
            b.trace = []
        target.verify(list(rows), state, logits=False)
        distinct = [len(set().union(*b.trace)) for b in blocks]
    finally:
        for b, trace in zip(blocks, kept):
            b.trace = trace
    return sum((d - b.moe.num_experts_per_tok) * expert_size(b, packed_bytes) for b, d in zip(blocks, distinct))


class MacRate:
    """Times ``rows``-row products with a packed weight of ``WEIGHT_SHAPE`` (seeded random, cache-resident)
    on ``backend`` as it is set now (its thread count); ``gmac_s()`` is the fastest of ``CALLS`` calls."""

    def __init__(self, backend, rows: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        n, kdim = WEIGHT_SHAPE
        self.backend, self.rows = backend, rows
        self.packed = backend.pack(rng.standard_normal((n, kdim), dtype=np.float32), name="roofline.weight")
        self.x = rng.standard_normal((rows, kdim), dtype=np.float32)

    def gmac_s(self) -> float:
        self.backend.matmul(self.x, self.packed)  # untimed: the pool awake, the weight in cache
        best = float("inf")
        for _ in range(CALLS):
            t0 = time.perf_counter()
            self.backend.matmul(self.x, self.packed)
            best = min(best, time.perf_counter() - t0)
        n, kdim = WEIGHT_SHAPE
        return self.rows * n * kdim / best / 1e9


def ceilings(*, k: int, step_macs: int, step_bytes: int, draft_macs: tuple[int, int], draft_bytes: tuple[int, int],
             gmac_s: "float | None", stream_gb_s: "float | None", tokens_per_round: "float | None",
             plain_tokens_per_s: "float | None", plain_step_ms: "float | None",
             verify_bytes: "int | None" = None, keep: "Sequence[float] | None" = None) -> dict[str, Any]:
    """The floors and the ceiling (module docstring). ``draft_macs`` / ``draft_bytes``: (layers per row,
    lm_head per row) as ``draft_round`` gives them; ``verify_bytes``: what a verify reads (a step's plus
    ``verify_extra_bytes``; default a step's). None where an input is missing (with the reason).
    ``keep``: P(draft i + 1 kept | drafts 1..i kept) for i < k: also the verify floor of the best schedule of
    passes (``loop/stages.py``; a pass of r rows at max(r rows' multiply-adds, a verify's bytes): for a sparse
    target the bytes of k + 1 rows' experts, an upper bound for fewer rows), and the ceiling is the better one."""
    if not gmac_s or not stream_gb_s:
        return {"null_reason": "no multiply-add rate or no read stream measured"}
    verify_bytes = step_bytes if verify_bytes is None else verify_bytes
    verify_c = (k + 1) * step_macs / (gmac_s * 1e9) * 1e3
    verify_m = verify_bytes / (stream_gb_s * 1e9) * 1e3
    draft_round_macs = (k + 1) * draft_macs[0] + k * draft_macs[1]
    draft_c = draft_round_macs / (gmac_s * 1e9) * 1e3
    draft_m = sum(draft_bytes) / (stream_gb_s * 1e9) * 1e3
    verify_floor, draft_floor = max(verify_c, verify_m), max(draft_c, draft_m)
    out: dict[str, Any] = {
        "gmac_s": gmac_s, "stream_gb_s": stream_gb_s, "rows": k + 1,
        "step_macs": step_macs, "draft_round_macs": draft_round_macs,
        "verify_floor_ms": verify_floor, "verify_bound_by": "compute" if verify_c >= verify_m else "memory",
        "draft_floor_ms": draft_floor, "draft_bound_by": "compute" if draft_c >= draft_m else "memory",
        "verify_bytes": verify_bytes, "plain_floor_ms": step_bytes / (stream_gb_s * 1e9) * 1e3,
    }
    if plain_step_ms:
        out["verify_floor_over_plain_step"] = verify_floor / plain_step_ms
        out["draft_floor_over_plain_step"] = draft_floor / plain_step_ms
    if keep is not None and len(keep) == k:
        floor = lambda r: max(r * step_macs / (gmac_s * 1e9) * 1e3, verify_m)  # noqa: E731  a pass of r rows
        kept = lambda d, s: float(np.prod(keep[d: d + s]))  # noqa: E731
        staged, first = best_passes(floor, kept, 0, k)
        out["staged_verify_floor_ms"], out["staged_first_pass_rows"] = staged, first
        verify_floor = min(verify_floor, staged)
    if tokens_per_round and plain_tokens_per_s:
        out["loop_ceiling_vs_plain"] = tokens_per_round / ((verify_floor + draft_floor) / 1e3) / plain_tokens_per_s
    return out
