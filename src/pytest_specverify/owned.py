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


class OwnedOutputs:
    """The port, with every array it hands to a check copied on the way out: ``prefill`` / ``step`` /
    ``verify`` logits and taps, and ``state_arrays``. Everything else is the port's own."""

    def __init__(self, port):
        self._port = port

    def __getattr__(self, name):
        return getattr(self._port, name)

    def new_state(self):
        """The port's new state, noted in the open :func:`closing_states` ledger (if any)."""
        state = self._port.new_state()
        ledger = _LEDGER.get()
        if ledger is not None:
            ledger.append(state)
            if len(ledger) > SWEEP_AT:
                _close_unheld(self._port, ledger)
        return state

    def _rows(self, rows):
        from .protocol import Rows

        return Rows(owned(rows.logits), owned(getattr(rows, "taps", None)))

    def prefill(self, state, tokens):
        return self._rows(self._port.prefill(state, tokens))

    def step(self, state, token):
        return self._rows(self._port.step(state, token))

    def verify(self, state, tokens, *, path):
        return self._rows(self._port.verify(state, tokens, path=path))

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
