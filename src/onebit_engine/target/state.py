"""The target's decoding state: one explicit object per layer, passed into every call.

Rollback contract. Attention KV rolls back by lowering ``length`` (rows past it are dead). A Gated
DeltaNet layer's conv window and recurrent matrix cannot be "trimmed": after a verify they already hold
every verified row. ``Target.commit`` makes them what ``accepted_rows`` sequential steps would have
left, from the ``VerifyRecord`` the verify stored in ``TargetState.pending`` (snapshot + recorded
per-row inputs, and on the ``checkpoint`` path the state after every row).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = np.float32


@dataclass
class GDNLayerState:
    """conv [C, K-1]: the last K-1 pre-conv columns; recurrent [HV, dk, dv]: the delta-rule matrix S."""

    conv: np.ndarray
    recurrent: np.ndarray

    def copy(self) -> "GDNLayerState":
        return GDNLayerState(self.conv.copy(), self.recurrent.copy())


@dataclass
class KVLayerState:
    """keys, values [HKV, capacity, hd] (post-norm, post-RoPE keys); rows [0, length) are live."""

    keys: np.ndarray
    values: np.ndarray
    length: int = 0

    @classmethod
    def empty(cls, n_kv: int, head_dim: int, capacity: int = 64) -> "KVLayerState":
        z = np.zeros((n_kv, capacity, head_dim), F32)
        return cls(z, z.copy(), 0)

    def reserve(self, capacity: int) -> None:
        """Grow the buffers (at least doubling) so that rows [0, capacity) exist; live rows are kept."""
        have = self.keys.shape[1]
        if capacity <= have:
            return
        grow = max(capacity - have, 64, have)
        pad = np.zeros((self.keys.shape[0], grow, self.keys.shape[2]), F32)
        self.keys = np.concatenate([self.keys, pad], axis=1)
        self.values = np.concatenate([self.values, pad.copy()], axis=1)

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        """k, v [HKV, hd] for the next position."""
        self.reserve(self.length + 1)
        self.keys[:, self.length] = k
        self.values[:, self.length] = v
        self.length += 1

    def prefix(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Contiguous copies of the first n keys and values: [HKV, n, hd] each."""
        return np.ascontiguousarray(self.keys[:, :n]), np.ascontiguousarray(self.values[:, :n])

    def truncate(self, n: int) -> None:
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot truncate a KV cache of length {self.length} to {n}")
        self.length = n

    def copy(self) -> "KVLayerState":
        return KVLayerState(self.keys.copy(), self.values.copy(), self.length)


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
    """Per-layer state (GDNLayerState or KVLayerState), the number of tokens consumed, and the
    pending verify record (``None`` when the last call was not a verify or was committed)."""

    layers: list
    pos: int = 0
    pending: VerifyRecord | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        """Every live array, named ``layer.{i}.{conv|recurrent|keys|values}`` (KV cut to its length)."""
        out = {}
        for i, st in enumerate(self.layers):
            if isinstance(st, GDNLayerState):
                out[f"layer.{i}.conv"] = st.conv
                out[f"layer.{i}.recurrent"] = st.recurrent
            else:
                k, v = st.prefix(st.length)
                out[f"layer.{i}.keys"] = k
                out[f"layer.{i}.values"] = v
        return out

    def copy(self) -> "TargetState":
        return TargetState([s.copy() for s in self.layers], self.pos, None)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())
