"""``--out``: checked before any work, so a bad path never costs a measurement and never destroys data.

Rules (docs/cli.md, "Output files"):
- the folder exists and a file can be created in it (tried, then removed);
- the path is new or a regular file (a symlink, FIFO, device node or socket is refused; see atomic.py);
- it is not one of the command's own inputs (same file, or inside an input folder for a folder output);
- it is not a checkpoint's file: a file beside a ``config.json`` (weights, index, config, tokenizer), or a
  ``.safetensors`` file that is neither a stage file nor a quantized-weights file of this engine; nor a new
  ``.safetensors`` file beside a ``config.json`` (the checkpoint's loader would read it as weights);
- a folder output (``quantize --out DIR``, ``synth --out DIR``) is new or an empty folder, never a file.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from ..atomic import check_replaceable, probe_writable
from ..errors import ConfigError, OutputError
from . import ui

# metadata keys of the safetensors files this engine itself writes (probe stage files, quantized weights)
OWN_KEYS = ("onebit.stage", "onebit.quant")
_CHECKPOINT_NAMES = ("config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
                     "tokenizer_config.json", "special_tokens_map.json")


def input_paths(args) -> list[tuple[str, Path]]:
    """(flag, path) of every file or folder the command reads."""
    out = []
    for flag in ("model", "draft", "capture", "drafts", "prompts"):
        v = getattr(args, flag, None)
        if v:
            out.append((f"--{flag}", Path(v)))
    for v in getattr(args, "compare", None) or ():
        out.append(("--compare", Path(v)))
    return out


PATH_FLAGS = ("model", "draft", "capture", "drafts", "prompts", "out", "cache")
DEFAULTS = {"--model": "the built-in pair", "--draft": "the built-in pair", "--prompts": "the built-in prompt set",
            "--cache": "the onebit cache folder"}


def check_paths(args) -> None:
    """Refuse a path given as an empty (or blank) string. Why: ``Path("")`` is the current folder, so ``''`` read or
    wrote ``.`` - ``quantize --out ''`` blamed '.', ``inspect ''`` said '. has no config.json' and ``quantize
    --model ''`` quantized the built-in target as if no --model had been given."""
    named = [(f"--{f}", getattr(args, f, None)) for f in PATH_FLAGS]
    named += [("--compare", v) for v in getattr(args, "compare", None) or ()]
    if args.command == "inspect":
        named.append(("PATH", args.path))
    for flag, v in named:
        if v is not None and not str(v).strip():
            msg = f"{flag} {str(v)!r} is a blank path (an empty one names the current folder); give a file or folder path" + (
                f", or leave {flag} out for {DEFAULTS[flag]}" if flag in DEFAULTS else "")
            raise (OutputError if flag == "--out" else ConfigError)(msg)


def check_output(args, *, builtin_inputs: "list[Path] | None" = None) -> None:
    """Refuse ``args.out`` before the command runs (no-op when the command writes nothing)."""
    out = getattr(args, "out", None)
    if not out:
        return
    dest = Path(out)
    # folders: synth's pair, quantize's servable folder (quantize --out X.safetensors writes one file)
    folder_out = args.command == "synth" or (args.command == "quantize" and not str(out).endswith(".safetensors"))
    inputs = input_paths(args) + [("the built-in pair", p) for p in builtin_inputs or ()]
    check_replaceable(dest, folder_ok=folder_out)
    _check_folder_writable(dest)
    for flag, src in inputs:
        if _same(dest, src):
            raise OutputError(f"--out {out} is the command's own input ({flag} {src}); writing it would destroy the "
                              f"input - give another --out path")
        if folder_out and src.is_dir() and (_inside(dest, src) or _inside(src, dest)):
            raise OutputError(f"--out {out} overlaps the input folder {flag} {src}; give a folder outside it")
    if folder_out:
        if dest.exists() and not dest.is_dir():
            what = ("a folder (target/ and draft/ in it)" if args.command == "synth" else
                    "a servable folder unless the path ends in .safetensors")
            raise OutputError(f"--out {out} is a file, and {args.command} writes {what}; refusing to replace it - give "
                              f"a new folder path")
        if dest.is_dir() and any(dest.iterdir()):
            raise OutputError(f"--out {out} is a folder that is not empty; refusing to replace what it holds - give a "
                              f"new path or empty it first")
        return
    if dest.is_file():
        why = _checkpoint_file(dest)
        if why:
            raise OutputError(f"--out {out} is {why}; refusing to overwrite it - give another --out path")
    if dest.suffix == ".safetensors" and (dest.parent / "config.json").is_file():
        # a new file there joins the checkpoint: its loader reads every *.safetensors beside config.json
        raise OutputError(f"--out {out} is inside the checkpoint folder {str(dest.parent)!r}, where every .safetensors "
                          f"file is read as the model's weights; give a path outside it")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _inside(a: Path, b: Path) -> bool:
    """``a`` is ``b`` or below it (paths resolved; a path that does not exist yet resolves lexically)."""
    try:
        ra, rb = a.resolve(), b.resolve()
    except OSError:
        return False
    return ra == rb or rb in ra.parents


def _check_folder_writable(dest: Path) -> None:
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"--out {dest}: folder {str(folder)!r} does not exist; create it first or give another path")
    try:
        probe_writable(folder, dest.name)
    except OSError as e:
        raise OutputError(f"--out {dest}: cannot create a file in {str(folder)!r} ({e.strerror}); nothing was run - "
                          f"give a writable path") from None


def _checkpoint_file(path: Path) -> str | None:
    """Why ``path`` is a checkpoint's file (a reason string), or None."""
    if (path.parent / "config.json").is_file() and (path.suffix == ".safetensors" or path.name in _CHECKPOINT_NAMES):
        return f"a file of the checkpoint in {str(path.parent)!r}"
    meta = _safetensors_metadata(path)  # whatever its name
    if meta is not None and not any(k in meta for k in OWN_KEYS):
        return "a safetensors file of model weights (not a file this engine writes)"
    return None


def _safetensors_metadata(path: Path) -> dict | None:
    """The ``__metadata__`` of a file whose header parses as safetensors, else None. Deliberately more
    lenient than ``safetensors_io.read_header``: a truncated weights file is still weights to keep."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None
            (n,) = struct.unpack("<Q", head)
            if not 2 <= n <= min(100 << 20, os.path.getsize(path) - 8):
                return None
            header = json.loads(f.read(n))
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict):
        return None
    meta = header.get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


def unwritten(doc: dict, err: OutputError, args) -> int:
    """A measurement whose --out could not be written is not lost: the result goes to stdout, the error to stderr
    (exit 2)."""
    msg = f"{err}; the result is printed on stdout instead"
    if args.json:
        ui.print_json(dict(doc, error=msg, exit_code=2))
    else:
        print(ui.dumps(doc), end="")
    ui.error(msg)
    return 2
