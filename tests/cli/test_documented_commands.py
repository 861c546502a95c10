"""Every command line the docs show is run (issue 24: help and docs that match behaviour).

The lines: in ``docs/*.md`` and ``README.md``, fenced ``bash`` / ``console`` blocks (``sh``, ``shell``
too), those starting with ``onebit`` or ``python -m onebit_engine`` (in a console block, the lines after
``$ ``; a line chained with ``&&`` runs its ``onebit`` part). Each page's lines run in order, in one
scratch folder, in this process (the compiled kernels are shared: seconds, not minutes), and each must
exit 0 with no traceback - or, in a console block whose next line shows ``onebit: error: ...``, exit 2
with exactly that line on stderr. A line marked ``# not in CI: <reason>`` is not run: it is listed as a skipped
test with its page, line and reason. docs/cli.md, "The command lines in these pages are run in CI".
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from onebit_engine.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
SHELL_BLOCKS = ("bash", "console", "sh", "shell")
NOT_IN_CI = re.compile(r"#\s*not in CI:\s*(?P<why>.+)$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w-]*)")


@dataclass(frozen=True)
class Line:
    page: str
    number: int
    argv: tuple[str, ...]  # after `onebit` / `python -m onebit_engine`
    text: str
    skip: str | None  # the reason it is not run in CI
    error: str | None = None  # the error line a console block shows right after it: expected exactly

    @property
    def id(self) -> str:
        return f"{self.page}:{self.number}"


def _command(segment: str) -> tuple[str, ...] | None:
    words = shlex.split(segment, comments=True)
    for head in (["onebit"], ["python", "-m", "onebit_engine"], ["python3", "-m", "onebit_engine"]):
        if words[: len(head)] == head:
            return tuple(words[len(head):])
    return None


def documented(text: str, page: str) -> list[Line]:
    """The runnable command lines of one page's text."""
    out, lang, fence, pending = [], None, None, ""
    for number, raw in enumerate(text.splitlines(), 1):
        m = _FENCE.match(raw)
        if m and (fence is None or m["fence"][0] == fence[0] and len(m["fence"]) >= len(fence)):
            lang, fence = (m["lang"].lower(), m["fence"]) if fence is None else (None, None)
            continue
        if lang not in SHELL_BLOCKS:
            continue
        line = raw.strip()
        if lang == "console":
            if not line.startswith("$ "):
                if line.startswith("onebit: error: ") and out and out[-1].number == number - 1:
                    out[-1] = replace(out[-1], error=line)
                continue
            line = line[2:]
        line = pending + line
        if line.endswith("\\"):  # a continued line: joined with the next
            pending = line[:-1] + " "
            continue
        pending = ""
        marked = NOT_IN_CI.search(line)
        for segment in line.split("&&"):
            argv = _command(segment)
            if argv is not None:
                text = " ".join(["onebit", *map(shlex.quote, argv)])
                out.append(Line(page, number, argv, text, marked["why"].strip() if marked else None))
    return out


ALL = [line for p in PAGES for line in documented(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]
BY_PAGE = {}
for _line in ALL:
    BY_PAGE.setdefault(_line.page, []).append(_line)


def test_the_documents_have_commands_and_the_start_line_is_among_them():
    assert any(line.page == "README.md" and line.argv == ("loop",) for line in ALL), "README's `onebit loop` not found"
    assert len(ALL) >= 10, [line.id for line in ALL]


@pytest.mark.parametrize("page", sorted(BY_PAGE))
def test_documented_commands_run(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the files a page's lines write (cap.st, ...) land here, read by its later lines
    for line in BY_PAGE[page]:
        if line.skip:
            continue
        code = main(list(line.argv))
        out = capsys.readouterr()
        if line.error:
            assert (code, out.err.strip()) == (2, line.error), f"{line.id}: `{line.text}` exited {code}:\n{out.err}"
            continue
        assert code == 0, f"{line.id}: `{line.text}` exited {code}:\n{out.err}"
        assert "Traceback" not in out.err and out.out.strip(), f"{line.id}: `{line.text}`:\n{out.err}"


@pytest.mark.parametrize("line", [line for line in ALL if line.skip], ids=lambda line: line.id)
def test_lines_marked_not_in_ci(line):
    """Listed so that `pytest -rs` shows each with its reason; the line must still parse as a command."""
    from onebit_engine.cli import build_parser

    build_parser().parse_args(list(line.argv))
    pytest.skip(f"{line.id}: not in CI ({line.skip}): {line.text}")


# -- the parser itself: what it finds and what it leaves alone ---------------------------------------------
SAMPLE = """
Some text with `onebit loop` inline (not a block).

```bash
pip install -e '.[cli]' && onebit loop --max-new-tokens 4   # a comment
nox -s host
python -m onebit_engine generate \\
    --max-new-tokens 2
onebit bench --shape qwen3.6-27b   # not in CI: needs 15 GB
```

```console
$ onebit inspect x.safetensors
x.safetensors: quantized ...
onebit looks like a command but is output
$ onebit loop --k 0
onebit: error: --k 0 is out of range
```

```text
onebit probe capture --out cap.st [--model M]
```

````markdown
```bash
onebit generate   # inside another fence: an example of markdown, not a command
```
````
"""


def test_the_parser_finds_exactly_the_runnable_lines():
    got = [(line.number, line.argv, line.skip) for line in documented(SAMPLE, "sample.md")]
    assert got == [
        (5, ("loop", "--max-new-tokens", "4"), None),
        (8, ("generate", "--max-new-tokens", "2"), None),
        (9, ("bench", "--shape", "qwen3.6-27b"), "needs 15 GB"),
        (13, ("inspect", "x.safetensors"), None),
        (16, ("loop", "--k", "0"), None),
    ]
    assert [line.error for line in documented(SAMPLE, "sample.md")] == [None] * 4 + ["onebit: error: --k 0 is out of range"]


def test_a_broken_documented_line_fails(tmp_path, monkeypatch, capsys):
    """The check has power: a line with a flag that does not exist is caught (prefixes are not flags)."""
    monkeypatch.chdir(tmp_path)
    (line,) = documented("```bash\nonebit generate --max-new-token 4\n```\n", "bad.md")
    assert main(list(line.argv)) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("argv, helps", [
    (["loop", "--bogus"], "onebit loop --help"),
    (["probe", "score", "--capture", "c", "--drafts", "d", "--bogus"], "onebit probe score --help"),
    (["bench", "--shape", "qwen3.6-27b", "--zz"], "onebit bench --help"),
])
def test_an_unknown_option_names_its_subcommands_help(argv, helps, capsys):
    """The options a user can give are in the subcommand's help, not the top-level one (which lists commands)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unrecognized arguments" in err and f"(see `{helps}`)" in err, err
