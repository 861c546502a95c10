"""Stage 1: the training documents (this interpreter's stdlib source and prose), the held-out rule,
and the held-out prompts."""
from __future__ import annotations

import ast
import hashlib
import platform
import sysconfig
from pathlib import Path

import numpy as np

EXCLUDED_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__", "lib-dynload", "encodings"}
EXCLUDED_PREFIXES = ("config-", "_sysconfigdata")
PROSE_TOPICS_FILE = "pydoc_data/topics.py"  # prose, not code
LICENSES_DIR = Path("/usr/share/common-licenses")
HELDOUT_LICENSES = ("Artistic", "CC0-1.0")
HELDOUT_MOD = 10  # a file / topic is held out iff int(sha256(name)) % 10 == 0

Docs = list[tuple[str, str]]  # (name, text)


def held_out(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % HELDOUT_MOD == 0


def sha256_text(t: str) -> str:
    return hashlib.sha256(t.encode("utf-8")).hexdigest()


def collect_data() -> dict:
    """Every document, split into train / held-out, with the manifest that pins them."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code_train, code_held, files = code_documents(stdlib)
    prose_train, prose_held, prose_items = prose_documents(stdlib)
    manifest = {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "stdlib_dir": str(stdlib),
        "code_rule": (
            "every *.py under the stdlib dir, sorted, excluding any file under a directory named "
            f"{sorted(EXCLUDED_DIRS)}, paths starting with {list(EXCLUDED_PREFIXES)}, {PROSE_TOPICS_FILE} "
            "(used as prose) and empty / non-UTF-8 files"
        ),
        "held_out_rule": f"int(sha256(relative_path).hexdigest(), 16) % {HELDOUT_MOD} == 0 "
                         f"(topics: sha256('topic:' + key)); licenses held out: {list(HELDOUT_LICENSES)}",
        "prose_sources": [f"{PROSE_TOPICS_FILE} (topics dict: the Python reference's pydoc texts)",
                          f"{LICENSES_DIR}/* (Debian common-licenses, symlinks de-duplicated)"],
        "code_files": files,
        "code_manifest_sha256": hashlib.sha256("".join(f["path"] + f["sha256"] for f in files).encode()).hexdigest(),
        "prose_items": prose_items,
        "counts": {
            "code_train_files": len(code_train), "code_held_files": len(code_held),
            "code_train_chars": sum(len(t) for _, t in code_train),
            "code_held_chars": sum(len(t) for _, t in code_held),
            "prose_train_docs": len(prose_train), "prose_held_docs": len(prose_held),
            "prose_train_chars": sum(len(t) for _, t in prose_train),
            "prose_held_chars": sum(len(t) for _, t in prose_held),
        },
    }
    return {"code_train": code_train, "code_held": code_held, "prose_train": prose_train,
            "prose_held": prose_held, "manifest": manifest}


def code_documents(stdlib: Path) -> tuple[Docs, Docs, list[dict]]:
    """(train, held-out, per-file manifest rows) of the stdlib's *.py files under the code rule."""
    code_train, code_held = [], []
    files = []
    for p in sorted(stdlib.rglob("*.py")):
        rel = p.relative_to(stdlib).as_posix()
        parts = rel.split("/")
        if any(d in EXCLUDED_DIRS for d in parts[:-1]) or parts[0].startswith(EXCLUDED_PREFIXES):
            continue
        if parts[-1].startswith(EXCLUDED_PREFIXES) or rel == PROSE_TOPICS_FILE:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if not text.strip():
            continue
        h = held_out(rel)
        files.append({"path": rel, "sha256": sha256_text(text), "chars": len(text), "held_out": h})
        (code_held if h else code_train).append((rel, text))
    return code_train, code_held, files


def prose_documents(stdlib: Path) -> tuple[Docs, Docs, list[dict]]:
    """(train, held-out, manifest rows) of the pydoc topics, then the common licenses."""
    ns: dict = {}
    exec(compile((stdlib / PROSE_TOPICS_FILE).read_text(encoding="utf-8"), PROSE_TOPICS_FILE, "exec"), ns)
    topics = ns["topics"]
    prose_train, prose_held, prose_items = [], [], []
    for key in sorted(topics):
        text = topics[key].strip() + "\n"
        h = held_out("topic:" + key)
        prose_items.append({"source": f"pydoc_data.topics[{key!r}]", "sha256": sha256_text(text), "chars": len(text), "held_out": h})
        (prose_held if h else prose_train).append((f"topic:{key}", text))
    seen = set()
    for p in sorted(LICENSES_DIR.iterdir()) if LICENSES_DIR.is_dir() else []:
        real = p.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        text = real.read_text(encoding="utf-8", errors="replace")
        h = p.name in HELDOUT_LICENSES
        prose_items.append({"source": str(real), "sha256": sha256_text(text), "chars": len(text), "held_out": h})
        (prose_held if h else prose_train).append((f"license:{p.name}", text))
    return prose_train, prose_held, prose_items


# ---- prompts ---------------------------------------------------------------------------------------
def code_prompts(code_held: Docs, n: int) -> list[dict]:
    """Starts of documented top-level functions / methods of held-out files (signature + docstring)."""
    out = []
    for rel, text in code_held:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        cands = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) and node.body:
                doc = node.body[0]
                body_after = node.body[1] if len(node.body) > 1 else None
                if body_after is None or doc.end_lineno - node.lineno > 12:
                    continue
                start = node.lineno - 1 - len(node.decorator_list)
                seg = "".join(lines[start: doc.end_lineno])
                # end right after the closing quotes: a prompt ending in a bare "\n" token would sit on a
                # token boundary the tokenizer never produces before indented code (it merges "\n" with
                # the indentation), and the model would continue at column 0
                seg = seg.rstrip("\n")
                if 80 <= len(seg) <= 600:
                    cands.append((node.lineno, seg))
        if cands:
            cands.sort()
            lineno, seg = cands[len(cands) // 2]
            out.append({"kind": "code", "source": f"{rel}:{lineno}", "text": seg})
    return spread(out, n)


def prose_prompts(prose_held: Docs, n: int) -> list[dict]:
    """Opening paragraphs (120-500 chars) of held-out prose documents."""
    out = []
    for name, text in prose_held:
        paras = [p.strip() for p in text.split("\n\n") if len(p.strip()) >= 120 and "***" not in p]
        for j, p in enumerate(paras[:6]):
            if len(p) <= 500:
                out.append({"kind": "prose", "source": f"{name}#p{j}", "text": p})  # no trailing "\n" (see code_prompts)
    return spread(out, n)


def spread(items: list, n: int) -> list:
    """A deterministic, varied pick of n items: evenly spread over the (sorted) list."""
    if len(items) > n:
        idx = np.linspace(0, len(items) - 1, n).round().astype(int)
        items = [items[i] for i in idx]
    return items
