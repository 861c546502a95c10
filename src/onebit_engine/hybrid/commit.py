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

from typing import Mapping, Protocol

import numpy as np

from ..errors import ConfigError, StateError, StateMismatch
from ..ops.kv_cache import KVCache
from .state import GDNLayerState, TargetState, VerifyRecord

COMMIT_PATHS = ("keep", "replay", "checkpoint")


class Replays(Protocol):
    """A delta-net mixer: the state ``len(mixed)`` steps leave after ``snapshot``, from recorded inputs."""

    def replay(self, snapshot: GDNLayerState, mixed: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> GDNLayerState: ...


def replay_layer(mixer: Replays, record: VerifyRecord, layer: int, accepted: int, *, in_place: bool = False) -> GDNLayerState:
    """Snapshot + the first ``accepted`` recorded rows of ``layer``, replayed by its own mixer (``in_place``:
    into the snapshot itself, for a commit that needs it no more)."""
    args = (record.snapshot[layer], record.mixed[layer][:accepted], record.alpha[layer][:accepted], record.beta[layer][:accepted])
    return mixer.replay(*args, in_place=True) if in_place else mixer.replay(*args)


def commit_verify(mixers: Mapping[int, Replays], state: TargetState, accepted_rows: int, *, path: str,
                  replay_check: bool) -> None:
    """``mixers``: the delta-net layers' mixers by layer index (the layers ``state.pending`` recorded)."""
    record = state.pending
    if record is None:
        raise StateError("commit() called with no pending verify; call verify(tokens, state) first")
    if path not in COMMIT_PATHS:
        raise ConfigError(f"commit path {path!r} is not one of {COMMIT_PATHS}")
    if isinstance(accepted_rows, bool) or not isinstance(accepted_rows, (int, np.integer)) or not 0 <= accepted_rows <= record.rows:
        raise StateError(
            f"accepted_rows={accepted_rows!r} is outside 0..{record.rows} (the last verify had {record.rows} rows)"
        )
    accepted = int(accepted_rows)
    if path == "checkpoint" and record.per_row is None:
        raise StateError("commit path 'checkpoint' needs the per-row states: call verify(..., checkpoints=True)")
    full = accepted == record.rows
    for i in record.snapshot:
        # No copies beyond the verify's snapshot: the record is dropped below, so the state taken from it is
        # not shared, and the buffers no longer used go to state.spare for the next snapshot (not with
        # replay_check, whose reference replay reads the snapshot again).
        if path == "keep" and full:
            chosen = state.layers[i]  # the batch's own recurrence already left exactly this state
        elif path == "checkpoint":
            chosen = record.per_row[i][accepted - 1] if accepted else record.snapshot[i]
            chosen = chosen.copy() if replay_check else chosen
        else:
            chosen = replay_layer(mixers[i], record, i, accepted, in_place=not replay_check)
        if not replay_check:
            unused = record.snapshot[i] if chosen is state.layers[i] else state.layers[i]
            if unused is not chosen:
                state.spare[i] = unused
        state.layers[i] = chosen
    for st in state.layers:
        if isinstance(st, KVCache):
            st.truncate(record.start_pos + accepted)
    state.pos = record.start_pos + accepted
    state.pending = None
    if replay_check:
        _check_against_replay(mixers, state, record, accepted, path)


def _check_against_replay(mixers: Mapping[int, Replays], state: TargetState, record: VerifyRecord, accepted: int,
                          path: str) -> None:
    first = None
    for i in record.snapshot:
        ref = replay_layer(mixers[i], record, i, accepted)
        got = state.layers[i]
        for name in ("conv", "recurrent"):
            a, b = getattr(got, name), getattr(ref, name)
            if first is None and not np.array_equal(a, b):
                diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                idx = np.unravel_index(int(np.argmax(a != b)), a.shape)
                first = (i, name, diff, f" (first at index {tuple(int(x) for x in idx)}: {a[idx]!r} vs replay {b[idx]!r})")
        state.layers[i] = ref
    if first is not None:
        raise StateMismatch(first[0], first[1], first[2], path, first[3])
