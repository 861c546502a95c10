"""The engine's floors, read from the source (ast, nothing imported): no module imports in a circle, each
part imports only the parts below it, only the xrt backend imports pyxrt, only the CLI reads the
environment, and the engine never imports the plugin or pytest. docs/architecture.md draws the same
picture; a new import that breaks a floor fails here with the file and line."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# part of onebit_engine -> the parts it may import (besides itself); lazy imports inside functions count
ALLOWED = {
    "errors": set(), "version": set(),
    "atomic": {"errors"},
    "ops": {"errors"},
    "checkpoint": {"errors"},
    "quant": {"errors", "checkpoint"},
    "gemm": {"errors", "quant", "checkpoint"},
    "hybrid": {"errors", "ops", "gemm", "quant", "checkpoint"},
    "draft": {"errors", "ops", "gemm", "quant", "checkpoint", "hybrid"},
    "loop": {"errors", "ops", "hybrid"},
    "synth": {"errors", "atomic", "checkpoint", "quant", "hybrid", "draft"},
    "measure": {"errors", "version", "atomic", "ops", "gemm", "checkpoint", "hybrid", "draft", "loop"},
    "default_model": {"errors", "checkpoint", "hybrid", "draft"},
    "__init__": {"errors", "version", "gemm", "hybrid", "draft", "loop"},
    "__main__": {"cli"},
    "cli": None,  # the top floor: anything in the engine
}


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for p in sorted((SRC / package).rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = {**_modules("onebit_engine"), **_modules("pytest_specverify")}


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(absolute module imported, line) for every import in the file, relative ones resolved."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) if node.level \
                else node.module or ""
            for a in node.names:  # `from pkg import module` imports the module
                out.append((f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod, node.lineno))
    return out


def _internal(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


GRAPH = {m: {t for t, _ in _imports(m, p) if _internal(t) and _internal(t) != m} for m, p in MODULES.items()}
GRAPH = {m: {_internal(t) for t in ts} for m, ts in GRAPH.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_no_module_imports_in_a_circle():
    seen, stack, cycles = {}, [], []

    def visit(m):
        seen[m] = "open"
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if seen.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in seen:
                visit(t)
        stack.pop()
        seen[m] = "done"

    for m in sorted(GRAPH):
        if m not in seen:
            visit(m)
    assert not cycles, "import circles: " + "; ".join(cycles)


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_imports_only_the_floors_below(part):
    allowed = ALLOWED[part]
    bad = []
    for m, path in MODULES.items():
        if not m.startswith("onebit_engine") or _part(m) != part or allowed is None:
            continue
        for target, line in _imports(m, path):
            t = _internal(target)
            if t and t.startswith("onebit_engine") and _part(t) not in allowed | {part}:
                bad.append(f"{path.relative_to(SRC)}:{line} imports {t}")
    assert not bad, f"{part} may import only {sorted(allowed)}: " + "; ".join(bad)


def test_every_engine_part_has_a_floor():
    parts = {_part(m) for m in MODULES if m.startswith("onebit_engine")}
    assert parts <= set(ALLOWED), f"parts without a floor in ALLOWED: {sorted(parts - set(ALLOWED))}"


def test_only_the_xrt_backend_imports_pyxrt():
    users = sorted(f"{p.relative_to(SRC)}:{line}" for m, p in MODULES.items() for t, line in _imports(m, p)
                   if t.split(".")[0] == "pyxrt")
    assert users and all(u.startswith("onebit_engine/gemm/npu/xrt.py:") for u in users), users


def test_the_engine_never_imports_the_plugin_or_pytest():
    bad = [f"{p.relative_to(SRC)}:{line} imports {t}" for m, p in MODULES.items() if m.startswith("onebit_engine")
           for t, line in _imports(m, p) if t.split(".")[0] in ("pytest", "pytest_specverify", "_pytest")]
    assert not bad, bad


def _env_reads(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in ("environ", "getenv", "putenv", "environb"):
            lines.append(node.lineno)
    return lines


def test_only_the_cli_reads_the_environment():
    bad = [f"{p.relative_to(SRC)}:{line}" for m, p in MODULES.items() if not m.startswith("onebit_engine.cli")
           for line in _env_reads(p)]
    assert not bad, f"the environment is read outside the CLI: {bad}"


def test_the_floor_check_sees_a_bad_import(tmp_path):
    """The checker's own power: an ops module importing the target is reported."""
    fake = tmp_path / "bad.py"
    fake.write_text("from ..hybrid import Target\nimport os\nx = os.environ\n")
    got = _imports("onebit_engine.ops.bad", fake)
    assert ("onebit_engine.hybrid", 1) in got and _part(_internal(got[0][0])) not in ALLOWED["ops"]
    assert _env_reads(fake) == [3]
