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

F32 = np.float32


@dataclass
class GDNLayerState:
    """conv [C, K-1]: the last K-1 pre-conv columns; recurrent [HV, dk, dv]: the delta-rule matrix S."""

    conv: np.ndarray
    recurrent: np.ndarray

    def copy(self) -> "GDNLayerState":
        return GDNLayerState(self.conv.copy(), self.recurrent.copy())


@dataclass(frozen=True)
class RecordedRows:
    """The slots of a verify's record one call of a delta-net layer fills, for its n real rows (views into
    the ``VerifyRecord``): mixed [n, C], alpha and beta [n, HV]: the rows' recurrence inputs; conv
    [n, C, K-1] and recurrent [n, HV, dk, dv]: the state after each row on the checkpoint path, else
    zero-length arrays (nothing to keep)."""

    mixed: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    conv: np.ndarray
    recurrent: np.ndarray

    @staticmethod
    def none(st: GDNLayerState) -> "RecordedRows":
        """Zero rows to record (a forward), shaped for the layer of ``st``."""
        C, HV = st.conv.shape[0], st.recurrent.shape[0]
        return RecordedRows(np.empty((0, C), F32), np.empty((0, HV), F32), np.empty((0, HV), F32),
                            np.empty((0, *st.conv.shape), F32), np.empty((0, *st.recurrent.shape), F32))


@dataclass
class VerifyRecord:
    """What one ``verify`` leaves for ``commit``; it is ``TargetState.pending`` from the verify's start, and
    each delta-net layer records its rows into it as they go by (:meth:`rows_of`).

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
    # per layer, the states after each row: conv [R, C, K-1] and recurrent [R, HV, dk, dv] on the checkpoint
    # path (per_row's entries are views of their rows), else 0 rows each
    blocks: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @classmethod
    def begin(cls, start_pos: int, rows: int, snapshot: dict[int, GDNLayerState], checkpoints: bool) -> "VerifyRecord":
        """An empty record of ``rows`` rows for the delta-net layers of ``snapshot`` (sized from their states)."""
        def empty(*shape: int) -> np.ndarray:
            return np.empty((rows, *shape), F32)

        rec = cls(start_pos, rows, snapshot, {}, {}, {}, {} if checkpoints else None)
        for i, s in snapshot.items():
            C, HV = s.conv.shape[0], s.recurrent.shape[0]
            rec.mixed[i], rec.alpha[i], rec.beta[i] = empty(C), empty(HV), empty(HV)
            kept = rows if checkpoints else 0
            conv, recurrent = rec.blocks[i] = np.empty((kept, *s.conv.shape), F32), np.empty((kept, *s.recurrent.shape), F32)
            if checkpoints:
                rec.per_row[i] = [GDNLayerState(conv[t], recurrent[t]) for t in range(rows)]
        return rec

    def rows_of(self, layer: int, pos: int, n: int) -> RecordedRows:
        """The slots of rows ``pos .. pos + n - 1`` (absolute positions) of delta-net layer ``layer``."""
        a, b = pos - self.start_pos, pos - self.start_pos + n
        conv, recurrent = self.blocks[layer]
        return RecordedRows(self.mixed[layer][a:b], self.alpha[layer][a:b], self.beta[layer][a:b], conv[a:b], recurrent[a:b])

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
    # delta-net layer buffers no one uses, kept for the next verify to write into: fresh memory for a 27B's
    # 151 MB of state costs its page faults again every round, a reused buffer nothing
    spare: dict = field(default_factory=dict, repr=False)

    def hand_over(self, i: int) -> GDNLayerState:
        """A verify's snapshot of delta-net layer ``i``: the live state itself, which from now on is only
        read; the layer gets a buffer of its shape (a spare one, or fresh) that the verify's first call of
        the layer writes as it advances the snapshot's state (``TargetOps.gdn_rows``'s ``src``; the compiled
        mixer reads the snapshot in its first row's sweep), not 151 MB (27B) of copies up front that the
        mixers then read again from memory. Until that call the buffer's contents mean nothing."""
        live, buf = self.layers[i], self.spare.pop(i, None)
        if buf is None or buf.conv.shape != live.conv.shape or buf.recurrent.shape != live.recurrent.shape:
            buf = GDNLayerState(np.empty_like(live.conv, dtype=F32), np.empty_like(live.recurrent, dtype=F32))
        self.layers[i] = buf
        return live

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
