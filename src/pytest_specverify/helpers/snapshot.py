"""``SnapshotCommit``: verify and commit for any port whose state can be snapshotted and restored.

A subclass provides ``forward(state, tokens) -> Rows`` (advances the state by len(tokens)),
``snapshot(state) -> obj`` (a deep copy: nothing the next forward writes in place may be shared) and
``restore(state, obj)``. It gets ``verify`` / ``commit`` with two commit paths:

* ``replay``: restore the snapshot taken before the verify, then run the kept rows again as single
  steps - the state is then prefill + steps of those rows by construction;
* ``keep``: on a full accept keep the state the batched verify left; on a partial accept restore and
  run the kept rows again in one batched pass.

``commit(..., replay_check=True)`` raises ``NotSupported`` (the documented opt-out: the battery's
replay check then compares keep with replay itself and skips only the port's own check).
"""
from __future__ import annotations

import warnings
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

from ..protocol import NotSupported, Rows
from .shallow import ShallowSnapshotWarning, changed, fingerprint

PATHS = ("keep", "replay")


@dataclass
class Pending:
    """An uncommitted verify: the snapshot from before it and its rows."""

    snapshot: Any
    rows: list[int]


def check_verify(port, state, path: str) -> None:
    """A verify may start: ``path`` is one of the port's commit paths and no verify is pending on ``state``."""
    if path not in port.commit_paths:
        raise ValueError(f"commit path {path!r} is not one of {tuple(port.commit_paths)}")
    if getattr(state, "pending", None) is not None:
        raise RuntimeError("verify() while a verify is pending: commit it first")


def take_pending(state, accepted_rows: int):
    """The pending verify of ``state`` (anything with ``.rows``), taken off it; ``accepted_rows`` checked against its rows."""
    pend = getattr(state, "pending", None)
    if pend is None:
        raise RuntimeError("commit() without a pending verify")
    if not 0 <= accepted_rows <= len(pend.rows):
        raise ValueError(f"accepted_rows={accepted_rows} is outside 0..{len(pend.rows)} (the verify's rows)")
    state.pending = None
    return pend


class SnapshotCommit(metaclass=ABCMeta):
    """A port missing one of the three methods below fails when it is built, not in the middle of a check."""

    commit_paths: Sequence[str] = PATHS

    # -- to implement ------------------------------------------------------------------------------
    @abstractmethod
    def forward(self, state, tokens: Sequence[int]) -> Rows:
        """Run ``tokens`` from ``state``, advance it by their count; the rows' logits (and taps)."""

    @abstractmethod
    def snapshot(self, state) -> Any:
        """A deep copy of ``state``: nothing the next forward writes in place may be shared."""

    @abstractmethod
    def restore(self, state, snap) -> None:
        """Put ``snap`` (from :meth:`snapshot`) back into ``state``."""

    # -- given ---------------------------------------------------------------------------------------
    def _pending(self, state) -> Pending | None:
        return getattr(state, "pending", None)

    def prefill(self, state, tokens: Sequence[int]) -> Rows:
        return self.forward(state, list(tokens))

    def step(self, state, token: int) -> Rows:
        return self.forward(state, [int(token)])

    def verify(self, state, tokens: Sequence[int], *, path: str) -> Rows:
        check_verify(self, state, path)
        snap = self.snapshot(state)
        audit = self._audit_left() and fingerprint(snap)
        out = self.forward(state, list(tokens))
        if audit and changed(snap, audit):
            bad = changed(snap, audit)
            warnings.warn(ShallowSnapshotWarning(
                f"port {getattr(self, 'name', self)!r}: its snapshot changed while the verify ran ({', '.join(bad[:3])}"
                f"{' ...' if len(bad) > 3 else ''}): snapshot() shares arrays the forward pass updates in place, so a "
                f"rollback restores nothing; copy them (np.array(a, copy=True), tensor.clone())"), stacklevel=2)
        state.pending = Pending(snap, [int(t) for t in tokens])
        return out

    AUDITS = 3  # snapshots fingerprinted per port (hashing every array of every verify would cost a pass)

    def _audit_left(self) -> bool:
        left = self.__dict__.get("_specverify_audits", self.AUDITS)
        self.__dict__["_specverify_audits"] = max(left - 1, 0)
        return left > 0

    def commit(self, state, accepted_rows: int, *, path: str, replay_check: bool = False) -> None:
        pend = take_pending(state, accepted_rows)
        kept = pend.rows[:accepted_rows]
        if path == "keep" and accepted_rows == len(pend.rows):
            pass  # the batch's own state
        elif path == "keep":
            self.restore(state, pend.snapshot)
            if kept:
                self.forward(state, kept)
        else:
            self.restore(state, pend.snapshot)
            for t in kept:
                self.forward(state, [t])
        if replay_check:
            raise NotSupported(f"port {getattr(self, 'name', self)!r} has no replay check of its own (SnapshotCommit)")
