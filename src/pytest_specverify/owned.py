"""The port as every check drives it: each array it hands out copied on the way (``owned_outputs``).

A port may hand out views of a buffer that its next call overwrites (zero-copy outputs of a C++ or
device port); two such results compared later would be the same memory and always "equal"."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Mapping

_LEDGER: ContextVar = ContextVar("specverify_states", default=None)


def owned(a):
    """A copy of an array a port or draft returned (None stays None)."""
    import numpy as np

    return None if a is None else np.array(a, copy=True)


def owned_arrays(arrays: Mapping[str, Any]) -> dict:
    """:func:`owned` for every array of a ``state_arrays`` result (a device port may download every state
    into the same host buffers)."""
    return {name: owned(a) for name, a in arrays.items()}


class PortContractError(AssertionError):
    """The port broke the adapter protocol (``protocol.SpecPort``): a missing method, logits of the wrong
    shape, dtype or values. A failure of the port, said in its terms, not a traceback from inside a check."""


TARGET_METHODS = ("new_state", "prefill", "step", "verify", "commit", "state_arrays")  # SpecPort's: every check drives them


def check_port(port, attributes: tuple[str, ...] = ()) -> None:
    """Refuse an object that is no port before a check runs on it: ``protocol.SpecPort``'s target methods, the
    ``attributes`` the caller reads, and a positive integer ``vocab_size``. The other members are named where a check
    asks for one the port lacks (``OwnedOutputs.__getattr__``): a port may leave out what its checks never call."""
    name = getattr(port, "name", type(port).__name__)
    missing = [f"method {n}" for n in TARGET_METHODS if not callable(getattr(port, n, None))]
    missing += [f"attribute {n}" for n in attributes if not hasattr(port, n)]
    if missing:
        raise PortContractError(f"the port {name!r} ({type(port).__name__}) has no {', '.join(missing)}: a specverify "
                                f"port implements protocol.SpecPort (docs/verify-your-port.md)")
    v = getattr(port, "vocab_size", None)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PortContractError(f"the port {name!r} has vocab_size {v!r}, must be a positive integer (its logits' width)")


def check_logits(port, method: str, logits, rows: int):
    """``logits`` of a ``method`` call of ``rows`` rows as the protocol says: a float array [rows, vocab_size]
    with finite values. Returns it as an array."""
    import numpy as np

    name = getattr(port, "name", type(port).__name__)
    where = f"the port {name!r}: {method}() returned logits"
    if logits is None:
        raise PortContractError(f"{where} None; Rows.logits must be a float array [T, vocab_size]")
    try:
        a = np.asarray(logits)
    except Exception as e:  # noqa: BLE001 - whatever the port returned, say what it was
        raise PortContractError(f"{where} of type {type(logits).__name__} that is no array ({e})") from None
    if a.dtype.kind != "f" and "float" not in a.dtype.name:  # any float dtype (bfloat16 included)
        raise PortContractError(f"{where} of dtype {a.dtype}; they must be a float array")
    want = (rows, port.vocab_size)
    if a.shape != want:
        raise PortContractError(f"{where} of shape {a.shape}; a call of {rows} row(s) gives [{rows}, vocab_size] = {want}")
    bad = ~np.isfinite(a.astype(np.float32, copy=False))
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise PortContractError(f"{where} holding {float(a[r, c])!r} at row {r}, token {c} ({int(bad.sum())} non-finite value(s)); "
                                f"a forward that overflows or reads uninitialised memory - logits must be finite")
    return a


class OwnedOutputs:
    """The port, with every array it hands to a check copied on the way out: ``prefill`` / ``step`` /
    ``verify`` logits and taps, and ``state_arrays``. Everything else is the port's own. The logits are checked
    against the protocol on the way (``check_logits``), and the port itself when wrapped (``check_port``)."""

    def __init__(self, port):
        check_port(port)
        self._port = port

    def __getattr__(self, name):
        try:
            return getattr(self._port, name)
        except AttributeError:  # getattr(port, "max_k", None) still works: this is an AttributeError too
            raise AttributeError(f"the port {getattr(self._port, 'name', type(self._port).__name__)!r} has no "
                                 f"attribute {name!r} (protocol.SpecPort, docs/verify-your-port.md)") from None

    def new_state(self):
        """The port's new state, noted in the open :func:`closing_states` ledger (if any)."""
        state = self._port.new_state()
        ledger = _LEDGER.get()
        if ledger is not None:
            ledger.append(state)
            if len(ledger) > SWEEP_AT:
                _close_unheld(self._port, ledger)
        return state

    def _rows(self, rows, method: str, n: int):
        from .protocol import Rows

        if not hasattr(rows, "logits"):
            raise PortContractError(f"the port {getattr(self._port, 'name', '?')!r}: {method}() returned "
                                    f"{type(rows).__name__}, not a protocol.Rows (logits, taps)")
        return Rows(owned(check_logits(self._port, method, rows.logits, n)), owned(getattr(rows, "taps", None)))

    def prefill(self, state, tokens):
        return self._rows(self._port.prefill(state, tokens), "prefill", len(tokens))

    def step(self, state, token):
        return self._rows(self._port.step(state, token), "step", 1)

    def verify(self, state, tokens, *, path):
        return self._rows(self._port.verify(state, tokens, path=path), "verify", len(tokens))

    def state_arrays(self, state):
        return owned_arrays(self._port.state_arrays(state))


def owned_outputs(port):
    """``port`` as every check drives it: its outputs copied (idempotent)."""
    return port if isinstance(port, OwnedOutputs) else OwnedOutputs(port)


def unwrapped(port):
    """The port itself, under the :func:`owned_outputs` wrapper if it is one."""
    return port._port if isinstance(port, OwnedOutputs) else port


SWEEP_AT = 16  # ledgered states past this count are swept for the ones nothing else holds any more


def _close_unheld(port, ledger: list) -> None:
    """Close (once) and drop the ledger's states that nothing but the ledger holds: the check is done with
    them. Without this a check that goes through hundreds of states (the sampling rounds) held every one
    alive to its end, each a native context (a llama.cpp check reached 20 GB). Refcounts are CPython's."""
    import sys

    close = getattr(port, "close", None)
    for i in range(len(ledger) - 1, -1, -1):
        state = ledger[i]
        if sys.getrefcount(state) <= 3:  # the ledger's entry, this name, getrefcount's argument
            del ledger[i]
            if close is not None:
                close(state)
        del state


def release(port, state) -> None:
    """A state the check is done with before its block ends: closed now and dropped from the ledger, so a
    check that goes through many states (the sampling rounds) never holds them all alive at once."""
    ledger = _LEDGER.get()
    if ledger is not None:
        for i, s in enumerate(ledger):
            if s is state:
                del ledger[i]
                break
    close = getattr(unwrapped(port), "close", None)
    if close is not None:
        close(state)


@contextmanager
def closing_states(port):
    """Every state a check obtains inside (through :func:`owned_outputs`) is handed to the port's optional
    ``close(state)`` once when the block ends, pass or fail, so a native engine can free its contexts."""
    states: list = []
    token = _LEDGER.set(states)
    try:
        yield states
    finally:
        _LEDGER.reset(token)
        close = getattr(unwrapped(port), "close", None)
        if close is not None:
            for state in states:
                close(state)
