"""Committing a verify: keep ``accepted_rows`` rows, make the state what that many plain steps leave.

Three paths (the attention KV is always trimmed to ``verify_pos + accepted_rows``):

* ``replay``: restore the snapshot taken before the verify, replay the accepted rows through the conv
  and delta-rule recurrences from the recorded inputs (no GEMM is recomputed);
* ``keep``: as ``replay``, except that on a full accept the state the batch's own recurrence left is
  kept (no restore, no replay) - the seed PR's ``commit_verify_rows()``;
* ``checkpoint``: pick the state recorded after row ``accepted_rows - 1`` (needs
  ``verify(..., checkpoints=True)``).

``replay_check=True`` also runs the replay and raises ``StateMismatch`` unless the chosen path's state
is bitwise equal to it (the state is then left holding the replayed, reference state).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import ConfigError, StateError, StateMismatch
from .state import GDNLayerState, KVLayerState, TargetState, VerifyRecord

if TYPE_CHECKING:
    from .target import Target

COMMIT_PATHS = ("keep", "replay", "checkpoint")


def replay_layer(target: "Target", rec: VerifyRecord, layer: int, accepted: int) -> GDNLayerState:
    """Snapshot + the first ``accepted`` recorded rows, replayed by the layer's own mixer."""
    mixer = target.layers[layer].mixer
    return mixer.replay(rec.snapshot[layer], rec.mixed[layer][:accepted], rec.alpha[layer][:accepted],
                        rec.beta[layer][:accepted])


def commit_verify(target: "Target", state: TargetState, accepted_rows: int, *, path: str, replay_check: bool) -> None:
    rec = state.pending
    if rec is None:
        raise StateError("commit() called with no pending verify; call verify(tokens, state) first")
    if path not in COMMIT_PATHS:
        raise ConfigError(f"commit path {path!r} is not one of {COMMIT_PATHS}")
    if isinstance(accepted_rows, bool) or not isinstance(accepted_rows, (int, np.integer)) or not 0 <= accepted_rows <= rec.rows:
        raise StateError(
            f"accepted_rows={accepted_rows!r} is outside 0..{rec.rows} (the last verify had {rec.rows} rows)"
        )
    accepted = int(accepted_rows)
    if path == "checkpoint" and rec.per_row is None:
        raise StateError("commit path 'checkpoint' needs the per-row states: call verify(..., checkpoints=True)")
    full = accepted == rec.rows
    for i in rec.snapshot:
        if path == "keep" and full:
            continue  # the batch's own recurrence already left exactly this state
        if path == "checkpoint":
            chosen = rec.per_row[i][accepted - 1] if accepted else rec.snapshot[i]
            state.layers[i] = chosen.copy()
        else:
            state.layers[i] = replay_layer(target, rec, i, accepted)
    for st in state.layers:
        if isinstance(st, KVLayerState):
            st.truncate(rec.start_pos + accepted)
    state.pos = rec.start_pos + accepted
    state.pending = None
    if replay_check:
        _check_against_replay(target, state, rec, accepted, path)


def _check_against_replay(target, state: TargetState, rec: VerifyRecord, accepted: int, path: str) -> None:
    first = None
    for i in rec.snapshot:
        ref = replay_layer(target, rec, i, accepted)
        got = state.layers[i]
        for name in ("conv", "rec"):
            a, b = getattr(got, name), getattr(ref, name)
            if first is None and not np.array_equal(a, b):
                diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                idx = np.unravel_index(int(np.argmax(a != b)), a.shape)
                first = (i, name, diff, f" (first at index {tuple(int(x) for x in idx)}: {a[idx]!r} vs replay {b[idx]!r})")
        state.layers[i] = ref
    if first is not None:
        raise StateMismatch(first[0], first[1], first[2], path, first[3])
