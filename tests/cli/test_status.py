"""Status lines on stderr (issue 24 point 1): the first says what is being prepared before any model
loads; a stage that runs long says why; shown on a terminal or with --verbose, never with --quiet,
and stdout is the same either way."""
import io
import threading
from types import SimpleNamespace

import pytest

from onebit_engine.cli import models
from onebit_engine.cli.status import COMPILING, Status


class Tty(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty, json, quiet, verbose, shown", [
    (True, False, False, False, True),    # a person at a terminal
    (False, False, False, False, False),  # a pipe or a script: stderr stays for errors
    (True, True, False, False, False),    # --json: a machine reads
    (True, False, True, False, False),    # --quiet
    (False, False, False, True, True),    # --verbose, even into a pipe
    (False, True, False, True, True),     # --verbose with --json (stdout stays the one object)
])
def test_when_status_lines_show(tty, json, quiet, verbose, shown):
    stream = Tty(tty)
    st = Status(SimpleNamespace(json=json, quiet=quiet, verbose=verbose), stream)
    with st.stage("loading the pair"):
        pass
    assert (stream.getvalue().startswith("loading the pair ...\n")) is shown
    assert ("done in" in stream.getvalue()) is verbose


def test_a_slow_stage_says_why_once():
    said = threading.Event()

    class Watch(Tty):
        def write(self, s):
            if COMPILING in s:
                said.set()
            return super().write(s)

    stream = Watch(True)
    st = Status(SimpleNamespace(json=False, quiet=False, verbose=False), stream, slow_after=0.0)
    with st.stage("loading the pair", slow_hint=COMPILING):
        assert said.wait(30), "the hint never came"
    with st.stage("loading it again", slow_hint=COMPILING):
        said.clear()
        assert not said.wait(0.2)
    assert stream.getvalue().count(COMPILING) == 1


def test_a_quick_stage_gives_no_hint():
    stream = Tty(True)
    st = Status(SimpleNamespace(json=False, quiet=False, verbose=False), stream, slow_after=60.0)
    with st.stage("loading the pair", slow_hint=COMPILING):
        pass
    assert stream.getvalue() == "loading the pair ...\n"


@pytest.mark.parametrize("command", ["loop", "generate"])
def test_the_first_line_comes_before_anything_loads(run, pair, monkeypatch, capsys, command):
    seen = []
    real = models.load

    def spy(*a, **k):
        seen.append(capsys.readouterr().err)
        return real(*a, **k)

    monkeypatch.setattr(models, "load", spy)
    argv = [command, "--model", pair[0], "--max-new-tokens", 3, "--verbose"]
    if command == "loop":
        argv += ["--draft", pair[1], "--k", 1, "--threads", 1]
    code, out, err = run(*argv)
    assert code == 0, err
    assert seen[0].splitlines()[0] == f"loading --model {pair[0]}{' and its draft' if command == 'loop' else ''} ..."
    assert "loading" not in out and "done in" not in out  # stdout holds the result only


def test_quiet_and_verbose_leave_stdout_alone(run, pair):
    base = ("generate", "--model", pair[0], "--prompt-ids", "5 6", "--max-new-tokens", 4)
    outs = {}
    for flag in ("--quiet", "--verbose", None):
        code, out, err = run(*base, *([flag] if flag else []))
        assert code == 0, err
        outs[flag] = (out.split("\n\n")[0], err)  # the labelled prompt and output (the figures vary run to run)
    assert outs["--quiet"][0] == outs["--verbose"][0] == outs[None][0]
    assert outs["--quiet"][1] == "" and outs[None][1] == "" and "loading" in outs["--verbose"][1]
    code, _, err = run(*base, "--quiet", "--verbose")
    assert code == 2 and "not allowed with argument" in err
