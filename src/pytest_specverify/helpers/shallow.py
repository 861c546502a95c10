"""Catching a shallow snapshot: a snapshot that shares an array with the live state, which the next pass
updates in place (transformers' delta-net caches ``copy_`` into their tensors; a numpy port that writes
``state.h[:] = ...``). Restoring such a snapshot restores nothing. ``SnapshotCommit`` fingerprints the first
few snapshots of a port when it takes them and again after the verify ran: a changed fingerprint is a
:class:`ShallowSnapshotWarning` naming the array."""
from __future__ import annotations

import hashlib
from typing import Any, Iterator


class ShallowSnapshotWarning(UserWarning):
    """A snapshot changed while the state it was taken from was advanced: it shares that state's memory."""


def _arrays(obj: Any, path: str = "snapshot", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(path, numpy array) for every array (numpy, or a tensor with ``.detach().cpu().numpy()``) in ``obj``."""
    import numpy as np

    if depth > 6:
        return
    if isinstance(obj, np.ndarray):
        yield path, obj
    elif hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch tensor, without importing torch
        yield path, obj.detach().cpu().numpy()
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _arrays(v, f"{path}[{k!r}]", depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _arrays(v, f"{path}[{i}]", depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for k, v in vars(obj).items():
            yield from _arrays(v, f"{path}.{k}", depth + 1)


def fingerprint(snap: Any) -> dict[str, str]:
    """A digest of every array in ``snap`` by its path."""
    return {p: hashlib.blake2b(a.tobytes(), digest_size=16).hexdigest() for p, a in _arrays(snap)}


def changed(snap: Any, before: dict[str, str]) -> list[str]:
    """The paths whose arrays differ from ``before`` (the fingerprint taken with the snapshot)."""
    now = fingerprint(snap)
    return [p for p, d in before.items() if now.get(p) != d]
