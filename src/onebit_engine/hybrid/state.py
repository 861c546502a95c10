"""The target's decoding state: one explicit object per layer, passed into every call.

Attention layers hold an ``ops.kv_cache.KVCache`` (the engine's one KV cache, rows layout; the draft
uses it too). Rollback contract. Attention KV rolls back by lowering ``length`` (rows past it are dead). A Gated
DeltaNet layer's conv window and recurrent matrix cannot be "trimmed": after a verify they already hold
every verified row. ``Target.commit`` makes them what ``accepted_rows`` sequential steps would have
left, from the ``VerifyRecord`` the verify stored in ``TargetState.pending`` (snapshot + recorded
per-row inputs, and on the ``checkpoint`` path the state after every row).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class GDNLayerState:
    """conv [C, K-1]: the last K-1 pre-conv columns; recurrent [HV, dk, dv]: the delta-rule matrix S."""

    conv: np.ndarray
    recurrent: np.ndarray

    def copy(self) -> "GDNLayerState":
        return GDNLayerState(self.conv.copy(), self.recurrent.copy())


@dataclass
class VerifyRecord:
    """What one ``verify`` left for ``commit``.

    snapshot: the GDN layer states before the verify (index = layer); mixed[l] [R, C], alpha[l] and
    beta[l] [R, HV]: the per-row recurrence inputs (no GEMM is needed to replay them);
    per_row[l]: on the checkpoint path, the GDN state after every row (R entries).
    """

    start_pos: int
    rows: int
    snapshot: dict[int, GDNLayerState]
    mixed: dict[int, np.ndarray]
    alpha: dict[int, np.ndarray]
    beta: dict[int, np.ndarray]
    per_row: dict[int, list[GDNLayerState]] | None = None

    def checkpoint_nbytes(self) -> int:
        if not self.per_row:
            return 0
        return sum(s.conv.nbytes + s.recurrent.nbytes for states in self.per_row.values() for s in states)


@dataclass
class TargetState:
    """Per-layer state (GDNLayerState or KVCache), the number of tokens consumed, and the
    pending verify record (``None`` when the last call was not a verify or was committed)."""

    layers: list
    pos: int = 0
    pending: VerifyRecord | None = None
    # delta-net layer buffers no one uses, kept for the next verify's snapshot: copying a 27B's 151 MB of
    # state into fresh memory costs its page faults again every round, into a reused buffer only the copy
    spare: dict = field(default_factory=dict, repr=False)

    def snapshot(self, i: int) -> GDNLayerState:
        """A copy of delta-net layer ``i``'s state, in a spare buffer when there is one of its shape."""
        live, buf = self.layers[i], self.spare.pop(i, None)
        if buf is None or buf.conv.shape != live.conv.shape or buf.recurrent.shape != live.recurrent.shape:
            return live.copy()
        np.copyto(buf.conv, live.conv)
        np.copyto(buf.recurrent, live.recurrent)
        return buf

    def arrays(self) -> dict[str, np.ndarray]:
        """Every live array, named ``layer.{i}.{conv|recurrent|keys|values}`` (KV cut to its length)."""
        out = {}
        for i, st in enumerate(self.layers):
            if isinstance(st, GDNLayerState):
                out[f"layer.{i}.conv"] = st.conv
                out[f"layer.{i}.recurrent"] = st.recurrent
            else:  # KVCache
                k, v = st.prefix(st.length)
                out[f"layer.{i}.keys"] = k
                out[f"layer.{i}.values"] = v
        return out

    def copy(self) -> "TargetState":
        return TargetState([s.copy() for s in self.layers], self.pos, None)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())
