"""What every refusal test checks, and the guard that turns a blocked read into a failure."""
from __future__ import annotations

import signal

import pytest


def refused(code, err, *words):
    """Exit 2 and one line on stderr, ``onebit: error: ...``, holding each of ``words``."""
    assert code == 2, (code, err)
    assert err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


class Blocked(Exception):
    """Not an OSError (TimeoutError is one): code that shrugs off a failed read must not swallow it."""


@pytest.fixture
def no_hang():
    """Turns a blocked read or open (of a FIFO, say) into a failure after 20 s instead of a stuck test run."""
    def boom(*_):
        raise Blocked("the command blocked (a read or open of a FIFO?)")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
