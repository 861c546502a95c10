"""The sparse MLP block (``Qwen3NextSparseMoeBlock`` / ``Qwen3_5MoeSparseMoeBlock``): router, routed
SwiGLU experts, and the shared expert scaled by ``sigmoid(shared_expert_gate(x))``.

Batch invariance: the router is one projection over the layer's row set like any other, and routing
(the op table's ``moe_route``: ``ops/moe.py``, compiled in ``ops/moe_fast.py``) reads each row alone. An
expert runs on the rows routed to it, gathered into row sets of the same size the dense MLP uses
(``row_set`` rows, zero-padded, or just the real rows on a ``row_invariant`` backend); a row's GEMM
result inside a row set does not depend on its position or on the other rows (the fact ``Linear`` rests
on), so the expert's output for a row is the bits a call with that row alone gives - whichever rows
shared the expert. Each row then sums its experts' weighted outputs in ascending expert id, an order
that depends on the row alone. ``grouped=False`` runs every (row, expert) pair in its own row set
instead: the same bits, (rows x top_k) expert calls instead of one per distinct expert (measured in
tests/bench/test_bench_moe.py).

On a ``row_invariant`` backend the grouped block runs every expert's gate/up projection (and the shared
expert's and its gate) as one backend call and every down projection as another (``gemm.run_packed``: the
bits of a call each, tested). Why: a 35B-A3B token runs 9 experts in each of 40 layers, ~720 small products,
and paid the thread pool's wake and join and Python's call cost on every one. The products read rows of one
flat input and write one flat output (the gathered pairs' rows, then h for the shared expert; the routed and
shared gate/up outputs back to back, so one SwiGLU call takes them and its output is the down projections'
input as it is): no per-product views, concatenates or checks (a 35B-A3B MoE layer 0.91x at 1 row and at 8,
medians; same bits). Around them the routed pairs travel as flat arrays (``ops.moe.route_plan``), and every path
adds them into their rows with the op table's ``moe_combine``: numpy calls per expert had cost ~39 ms of a
35B-A3B verify of 8 rows (~57 experts a layer).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..gemm.base import run_packed
from ..ops.moe import routing_margins
from ..ops.norm import sigmoid
from .moe_config import MoeConfig
from .ops import TargetOps

F32 = np.float32


class MoeMLP:
    """Shapes: h [R, D] (first n rows real, the rest zero padding) -> [R, D]; padding rows give 0."""

    def __init__(self, moe: MoeConfig, p: str, lin, mlp: Callable[[str], Callable], row_set: int, row_invariant: bool,
                 ops: TargetOps):
        self.moe = moe
        self.ops = ops
        self.router = lin(p + "gate.weight")  # [E, D]
        self.experts = [mlp(f"{p}experts.{e}.") for e in range(moe.num_experts)]
        self.shared = mlp(p + "shared_expert.") if moe.shared_expert_intermediate_size else None
        self.shared_gate = lin(p + "shared_expert_gate.weight") if self.shared is not None else None  # [1, D]
        self.row_set, self.row_invariant = row_set, row_invariant
        self.grouped = True
        self.trace: list | None = None  # a list: each call appends its distinct routed experts (benchmarks)
        # a list: each call appends, per real row, the router-logit gap between the last chosen and the first
        # unchosen expert and the last chosen logit's magnitude, float64 [n, 2] (a reference check's near-ties)
        self.margins: list | None = None

    def __call__(self, h: np.ndarray, n: int) -> np.ndarray:
        logits = self.router(h)
        if self.margins is not None:
            self.margins.append(routing_margins(logits[:n], self.moe.num_experts_per_tok))
        # every (row, expert) pair of the real rows, expert by expert (ascending id), rows ascending
        weights, ids, cuts, rows, ranks = self.ops.moe_route(logits, n, self.moe.num_experts_per_tok,
                                                             self.moe.norm_topk_prob)
        if self.trace is not None:
            self.trace.append(tuple(ids.tolist()))
        run = self._together if self.grouped and self.row_invariant else self._apart
        y, shared = run(h, ids, cuts.tolist(), rows)  # y [P, D]: pair p's expert output, in the plan's order
        out = np.zeros_like(h)
        if ids.size:  # each row sums its experts in ascending id: an order that depends on the row alone
            self.ops.moe_combine(out, y, rows, ranks, weights)
        return out if shared is None else out + shared

    def _apart(self, h: np.ndarray, ids: np.ndarray, cuts: list, rows: np.ndarray):
        """A call per expert on its rows in row sets (``grouped``) or a call per (row, expert) pair; the
        shared expert on all of h. -> (y [P, D], gated shared output or None)."""
        segs = [rows[a:b] for a, b in zip(cuts, cuts[1:])]
        ys = [self._expert(e, h[r]) if self.grouped else np.concatenate([self._expert(e, h[i : i + 1]) for i in r])
              for e, r in zip(ids.tolist(), segs)]
        shared = sigmoid(self.shared_gate(h)) * self.shared(h) if self.shared is not None else None
        return (np.concatenate(ys) if ys else None), shared

    def _together(self, h: np.ndarray, ids: np.ndarray, cuts: list, rows: np.ndarray):
        """Each routed expert on its rows and the gated shared expert on all of h, the gate/up projections in
        one backend call and the down projections in another (``gemm.run_packed``: the ``DenseMLP`` math, step
        for step), the SwiGLU gate once over every pair (elementwise: the bits of a call per expert, tested).
        -> (y [P, D], gated shared output or None)."""
        mlps = [self.experts[e] for e in ids.tolist()]
        m, (R, D), P = len(mlps), h.shape, cuts[-1]
        counts = [b - a for a, b in zip(cuts, cuts[1:])]
        if R == 1:  # a token: every pair's row is h itself, one input the backend quantizes once
            x, offs, at = h.reshape(-1), [0] * m, 0
        else:  # the rows of every (row, expert) pair, expert by expert, then h for the shared expert: [(P + R) * D]
            x = h[np.concatenate([rows, np.arange(R)]) if self.shared is not None else rows].reshape(-1)
            offs, at = [a * D for a in cuts[:-1]], P * D
        lins = [e.gate_up for e in mlps]
        if self.shared is not None:
            lins += [self.shared.gate_up, self.shared_gate]
            offs, counts = offs + [at, at], counts + [R, R]
        ups = run_packed(lins, x, offs, counts)  # [P, 2I] routed, then [R, 2I_s] shared, then [R, 1] its gate
        routed = P * lins[0].out_features if m else 0
        shared = routed + R * self.shared.gate_up.out_features if self.shared is not None else routed
        parts = [ups[:routed].reshape(P, -1)] if m else []
        if shared > routed:
            parts.append(ups[routed:shared].reshape(R, -1))
        if len(parts) == 2 and parts[0].shape[1] == parts[1].shape[1]:  # one SwiGLU call: contiguous, one width
            acts = self.ops.silu_mul(ups[:shared].reshape(P + R, -1)).reshape(-1)
        else:
            acts = np.concatenate([self.ops.silu_mul(a).reshape(-1) for a in parts]) if parts else np.zeros(0, F32)
        inner = mlps[0].down.in_features if m else 0
        downs, doffs = [e.down for e in mlps], [a * inner for a in cuts[:-1]]
        if self.shared is not None:
            downs, doffs, counts = downs + [self.shared.down], doffs + [P * inner], counts[:m] + [R]
        y = run_packed(downs, acts, doffs, counts).reshape(-1, D)
        if self.shared is None:
            return (y if m else None), None
        gate = ups[shared:].reshape(R, 1)
        return (y[:P] if m else None), sigmoid(gate) * y[P:]

    def _expert(self, e: int, x: np.ndarray) -> np.ndarray:
        """Expert ``e`` on rows x [m, D], padded to whole row sets as the dense MLP's input is."""
        m = x.shape[0]
        if self.row_invariant:
            return self.experts[e](x)
        xp = np.zeros((-(-m // self.row_set) * self.row_set, x.shape[1]), F32)
        xp[:m] = x
        return self.experts[e](xp)[:m]


def sparse_blocks(model) -> "list[MoeMLP]":
    """The sparse MLP blocks of a model with ``layers`` (a ``Target``), in layer order; [] for a dense one."""
    return [layer.mlp for layer in model.layers if isinstance(getattr(layer, "mlp", None), MoeMLP)]
