"""What a command is doing, told on stderr while a person waits (git's habit): one line as each stage
starts ("loading ...", "choosing k and threads ..."), and a second line when a stage that is usually
quick is still running after ``SLOW_AFTER`` seconds (the first run on a machine compiles the kernels).

Shown when stderr is a terminal, and always with ``--verbose`` (which also prints each stage's time
and details such as the tuning table); never with ``--quiet``, nor with ``--json`` unless ``--verbose``
is given too. stdout only ever carries the result, so a pipe or a script sees the same output either way.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Iterator, TextIO

SLOW_AFTER = 2.0  # seconds: past this, a stage that is usually quick says why it is not
COMPILING = ("the first run on this machine compiles the kernels (about a minute); later runs start in a "
             "second or two")


class Status:
    def __init__(self, args, stream: "TextIO | None" = None, *, slow_after: float = SLOW_AFTER):
        self.stream = stream if stream is not None else sys.stderr
        quiet, verbose = bool(getattr(args, "quiet", False)), bool(getattr(args, "verbose", False))
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.verbose = verbose and not quiet
        self.enabled = self.verbose or (not quiet and tty and not getattr(args, "json", False))
        self.slow_after = slow_after
        self._hinted: set[str] = set()
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        if self.enabled:
            with self._lock:
                print(text, file=self.stream, flush=True)

    def detail(self, text: str) -> None:
        """A line for --verbose only."""
        if self.verbose:
            self.say(f"  {text}")

    def _hint(self, text: str) -> None:
        if text not in self._hinted:
            self._hinted.add(text)
            self.say(f"  ({text})")

    @contextlib.contextmanager
    def stage(self, text: str, *, slow_hint: "str | None" = None) -> Iterator[None]:
        """``with status.stage("loading the pair"):`` - the line now; ``slow_hint`` if it runs long."""
        self.say(f"{text} ...")
        timer = None
        if self.enabled and slow_hint and slow_hint not in self._hinted:
            timer = threading.Timer(self.slow_after, self._hint, (slow_hint,))
            timer.daemon = True
            timer.start()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()
            self.detail(f"done in {time.perf_counter() - t0:.2f} s")
