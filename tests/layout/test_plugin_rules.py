"""Rules read from the source (ast and text, nothing imported): the plugin's checks do not word their own
failures (the text lives in ``failure.py`` and the comparisons of ``compare.py``), and every Markdown file
the code or the tests name is in the repository (a clone has nothing else to follow)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "src" / "pytest_specverify"


# -- no module both defines a check and formats its failure ------------------------------------------
def check_functions(verifier_source: str) -> set[tuple[str, str]]:
    """(module, function) of every check: what the ``@check`` methods of ``Verifier`` import lazily."""
    found = set()
    for cls in ast.walk(ast.parse(verifier_source)):
        if not (isinstance(cls, ast.ClassDef) and cls.name == "Verifier"):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and any(getattr(d, "id", None) == "check" for d in fn.decorator_list):
                found |= {(node.module, a.name) for node in ast.walk(fn)
                          if isinstance(node, ast.ImportFrom) and node.level == 1 for a in node.names}
    return found


def text_formatters(source: str) -> list[str]:
    """Functions (and methods) annotated to return text: ``-> str`` or ``-> str | None``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.returns is not None:
            ann = ast.unparse(node.returns).replace(" ", "")
            if ann in ("str", "str|None", "Optional[str]"):
                out.append(f"{node.name} (line {node.lineno})")
    return out


def defines(source: str, names: set[str]) -> set[str]:
    return {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in names}


def test_the_check_table_is_read():
    checks = check_functions((PLUGIN / "verifier.py").read_text(encoding="utf-8"))
    assert len({m for m, _ in checks}) >= 5 and ("checks", "commit_equivalence") in checks, checks


def test_no_module_both_defines_a_check_and_formats_its_failure():
    checks = check_functions((PLUGIN / "verifier.py").read_text(encoding="utf-8"))
    bad = []
    for module in sorted({m for m, _ in checks}):
        source = (PLUGIN / f"{module}.py").read_text(encoding="utf-8")
        mine = defines(source, {f for m, f in checks if m == module})
        fmt = text_formatters(source)
        if mine and fmt:
            bad.append(f"{module}.py defines the check(s) {sorted(mine)} and the text formatter(s) {fmt}: move the "
                       f"wording to failure.py")
    failure = (PLUGIN / "failure.py").read_text(encoding="utf-8")
    if defines(failure, {f for _, f in checks}):
        bad.append("failure.py defines a check")
    assert not bad, "; ".join(bad)


def test_the_rule_sees_a_check_that_formats_its_own_failure():
    source = "def commit_equivalence(port):\n    pass\n\ndef where_text(i) -> str:\n    return str(i)\n"
    assert defines(source, {"commit_equivalence"}) and text_formatters(source) == ["where_text (line 4)"]


# -- every Markdown file named in src/ or tests/ is in the repository ---------------------------------
MD = re.compile(r"(?<![\w/.-])([\w][\w./-]*\.md)\b")
SKIP_DIRS = {"__pycache__", ".git", ".hypothesis", ".benchmarks", "golden"}
TEXT = {".py", ".md", ".toml", ".txt", ".json", ".c", ".h", ".cfg", ".ini", ".yaml", ".yml"}
#: engine files that still name Markdown files the repository lacks (dflash.md, hybrid-target.md,
#: npu-stack.md, verification.md): what they rely on moves into docs/ with the engine's rename. Listed file
#: by file, so a new file that names a missing one fails; an entry fixed upstream simply goes.
# files that name Markdown files which do not exist on purpose: the rules' own tests
FIXTURE_NAMES = {"tests/cli/test_documented_commands.py"}  # its fake pages (sample.md, bad.md) are written by the test
SELF = "tests/layout/test_plugin_rules.py"  # its own test names missing files on purpose


def named_markdown(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, name) for every ``*.md`` named in a text file under src/ and tests/."""
    out = []
    for top in ("src", "tests"):
        for path in sorted((root / top).rglob("*")):
            if not path.is_file() or path.suffix not in TEXT or SKIP_DIRS & set(path.parts) or \
                    path.relative_to(root).as_posix() == SELF:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                out += [(path.relative_to(root).as_posix(), n, name) for name in MD.findall(line)]
    return out


def missing_markdown(root: Path) -> list[str]:
    present = {p.relative_to(root).as_posix() for p in root.rglob("*.md") if not SKIP_DIRS & set(p.parts)}
    names = {Path(p).name for p in present}
    bad = []
    for file, line, name in named_markdown(root):
        here = (Path(file).parent / name).as_posix()
        ok = name in present or here in present or ("/" not in name and name in names) \
            or any(p.endswith("/" + name) for p in present)
        if not ok:
            bad.append(f"{file}:{line} names {name}")
    return bad


def test_every_markdown_file_named_in_src_or_tests_is_in_the_repository():
    bad = [b for b in missing_markdown(ROOT) if b.split(":")[0] not in FIXTURE_NAMES]
    assert not bad, "Markdown files named but not in the repository: " + "; ".join(bad)


def test_the_markdown_rule_sees_a_missing_file(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x")
    (tmp_path / "src" / "a.py").write_text('"""See docs/here.md and here.md, not gone.md."""\n')
    assert missing_markdown(tmp_path) == ["src/a.py:1 names gone.md"]
