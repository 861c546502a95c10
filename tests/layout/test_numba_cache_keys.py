"""numba keys a cached compiled function (``cache=True``) on its own source file: the cache is dropped when that
file changes, not when a compiled function it calls from another module does. The caller's cache then keeps the
old callee inlined, and a checkout that kept its ``__pycache__`` runs old code in one place and new code in
another (it happened: the row jobs of ``ops/row_jobs.py`` kept the RMSNorm's serial sum after ``ops/norm_fast.py``
moved to running sums, so a verify's rows on the pool no longer had a step's bits; docs/traps.md).

So every module whose cached functions call compiled code of other engine modules holds ``NUMBA_INLINES``, a
fingerprint of those modules' sources (transitively); this test recomputes it. A change to a callee fails it
until the caller's line is updated - and that edit is what drops the caller's stale cache."""
import ast
import hashlib
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "onebit_engine"


def _compiled(text: str) -> bool:
    """A module with cached compiled functions: its own ``cache=True``, the draft kernels' cached ``jit``, or the
    pool's cached job decorator (``ops.row_jobs.row_job``) used elsewhere (``draft/pool.py``)."""
    return "cache=True" in text or "from ._numba import jit" in text or "@row_job" in text


def _relative_imports(path: Path, tree: ast.AST) -> set[Path]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            target = base.joinpath(*node.module.split(".")).with_suffix(".py")
            if target.exists():
                out.add(target)
    return out


def _graph() -> dict[Path, set[Path]]:
    """Compiled modules -> the compiled modules they import from (directly)."""
    mods = {p: p.read_text() for p in SRC.rglob("*.py")}
    compiled = {p for p, t in mods.items() if _compiled(t)}
    return {p: _relative_imports(p, ast.parse(mods[p])) & compiled for p in compiled}


def _closure(graph: dict[Path, set[Path]], p: Path) -> set[Path]:
    seen, todo = set(), list(graph[p])
    while todo:
        q = todo.pop()
        if q not in seen:
            seen.add(q)
            todo += graph.get(q, ())
    return seen - {p}


def _strip(text: str) -> str:
    """A module's text as the fingerprint reads it: its own NUMBA_INLINES line left out (so one pass of updates
    settles every line), newlines normalised."""
    return "".join(line for line in text.replace("\r\n", "\n").splitlines(keepends=True)
                   if not line.startswith("NUMBA_INLINES ="))


def _source(q: Path) -> str:
    return _strip(q.read_text())


def fingerprint(deps: set[Path], source=_source) -> str:
    h = hashlib.sha256()
    for q in sorted(deps, key=lambda q: q.relative_to(SRC).as_posix()):
        h.update(q.relative_to(SRC).as_posix().encode() + b"\0" + source(q).encode() + b"\0")
    return h.hexdigest()[:16]


def _declared(path: Path) -> "str | None":
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "NUMBA_INLINES" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def test_every_cached_caller_declares_the_sources_it_inlines():
    graph = _graph()
    assert {SRC / "ops" / "row_jobs.py", SRC / "ops" / "exp_fast.py", SRC / "draft" / "pool.py"} <= set(graph)  # seen
    stale = []
    for p in sorted(graph):
        deps = _closure(graph, p)
        if not deps:
            continue
        want, got = fingerprint(deps), _declared(p)
        if got != want:
            names = ", ".join(sorted(q.relative_to(SRC).as_posix() for q in deps))
            stale.append(f"{p.relative_to(SRC).as_posix()}: NUMBA_INLINES = \"{want}\"  (it inlines {names}; found {got!r})")
    assert not stale, ("cached compiled code inlines changed sources; set these lines (the edit drops numba's stale "
                       "caches):\n" + "\n".join(stale))


def test_the_fingerprint_sees_a_callees_change():
    """Power: the fingerprint of row_jobs' callees (exp_fast through the others) moves when one of them changes by
    a character, and not when only a callee's own NUMBA_INLINES line does."""
    graph = _graph()
    deps = _closure(graph, SRC / "ops" / "row_jobs.py")
    assert SRC / "ops" / "norm_fast.py" in deps and SRC / "ops" / "exp_fast.py" in deps  # transitive
    norm = SRC / "ops" / "norm_fast.py"
    before = fingerprint(deps)
    assert fingerprint(deps, lambda q: _strip(q.read_text() + (" " if q == norm else ""))) != before
    assert fingerprint(deps, lambda q: _strip(q.read_text() + ("NUMBA_INLINES = 'x'\n" if q == norm else ""))) == before
