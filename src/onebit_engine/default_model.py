"""The default model, in one place: the built-in trained pair (a tiny hybrid target, its DFlash 2 draft,
the tokenizer, default prompts) and, for a source tree without it, the seeded random pair.

Everything ships inside the package (``data/builtin/`` and ``data/prompts/default.json``); nothing is
downloaded. How it was trained, on what, and how well it does: ``docs/trained-pair.md`` and
``data/builtin/TRAINING.json``. Rebuild it with ``python tools/train_pair.py``.

``tokenizers`` is imported lazily (only :func:`load_tokenizer` needs it), so the engine itself keeps
depending on numpy + safetensors only.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from .checkpoint.jsonfile import read_json
from .errors import CheckpointError, MissingExtra

DATA_DIR = Path(__file__).resolve().parent / "data"
BUILTIN_DIR = DATA_DIR / "builtin"
PROMPTS_FILE = DATA_DIR / "prompts" / "default.json"

# The shipped pair's best drafts per round (docs/trained-pair.md: k = 15 verifies two row sets a round and
# its later positions rarely hit); the CLI's default k for it.
RECOMMENDED_K = 7

# The seeded random pair used when the trained one is not installed, and the cache folder name it is written to.
RANDOM_SEED = 20261130
RANDOM_KEY = "builtin-random-v1"

MASK_TOKEN = "<|mask|>"
EOT_TOKEN = "<|endoftext|>"


def builtin_paths() -> tuple[Path, Path, Path]:
    """``(target_dir, draft_dir, tokenizer_path)`` of the shipped pair (HF folders + ``tokenizer.json``)."""
    paths = (BUILTIN_DIR / "target", BUILTIN_DIR / "draft", BUILTIN_DIR / "tokenizer.json")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"the built-in pair is incomplete, missing {missing}; reinstall the package or rebuild it with "
            f"`python tools/train_pair.py`"
        )
    return paths


class Tokenizer:
    """A thin wrapper over a ``tokenizers.Tokenizer`` (byte-level BPE): ``encode(text) -> list[int]``,
    ``decode(ids) -> str``; byte-level, so ``decode(encode(text)) == text`` for any text."""

    def __init__(self, tok: Any):
        self._tok = tok
        self.vocab_size: int = tok.get_vocab_size()
        self.eos_token_id: int | None = tok.token_to_id(EOT_TOKEN)
        self.mask_token_id: int | None = tok.token_to_id(MASK_TOKEN)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, eos={self.eos_token_id}, mask={self.mask_token_id})"


CLI_EXTRA = "pip install 'onebit-specverify[cli]'"


def load_tokenizer(path: str | Path | None = None) -> Tokenizer:
    """The shipped tokenizer (or the ``tokenizer.json`` at ``path``). Needs the ``tokenizers`` package.

    A file that is not UTF-8, not JSON or not a tokenizer the ``tokenizers`` library can build is refused
    with one :class:`CheckpointError` naming it."""
    try:
        from tokenizers import Tokenizer as _HFTokenizer
    except ImportError:
        raise MissingExtra(f"reading a tokenizer.json needs the 'tokenizers' package, which is not installed: "
                           f"{CLI_EXTRA} (or pip install tokenizers)") from None
    p = Path(path) if path is not None else builtin_paths()[2]
    raw = read_json(p, "tokenizer.json", redo="copy the tokenizer.json that came with the model again")
    if not isinstance(raw, dict) or not isinstance(raw.get("model"), dict):
        raise CheckpointError(f"{p}: tokenizer.json is not a tokenizers file (needs a JSON object with a 'model' "
                              f"object); copy the tokenizer.json that came with the model again")
    try:
        tok = _HFTokenizer.from_file(str(p))
    except Exception as e:  # the library raises a bare Exception for any structure it cannot build
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(f"{p}: the tokenizers library cannot build this tokenizer.json ({reason}); copy the "
                              f"tokenizer.json that came with the model again") from None
    return Tokenizer(tok)


@lru_cache(maxsize=1)
def _prompt_file() -> dict:
    return json.loads(PROMPTS_FILE.read_text(encoding="utf-8"))


def default_prompts(kind: str | None = None) -> list[dict]:
    """The default prompt set: dicts ``{kind, source, text}``; ``kind`` "code" or "prose" filters.

    All are held out: cut from stdlib files / prose documents the pair was never trained on."""
    prompts = _prompt_file()["prompts"]
    if kind is None:
        return [dict(p) for p in prompts]
    if kind not in ("code", "prose"):
        raise ValueError(f"kind must be 'code', 'prose' or None, got {kind!r}")
    return [dict(p) for p in prompts if p["kind"] == kind]


def default_prompt_texts(kind: str | None = None) -> list[str]:
    """Just the texts of :func:`default_prompts`."""
    return [p["text"] for p in default_prompts(kind)]


def default_code_prompt() -> str:
    """The first held-out code prompt (what a default run uses)."""
    return default_prompt_texts("code")[0]


def training_info() -> dict:
    """The parsed ``TRAINING.json`` (data manifest, recipe, seeds, losses, times, evaluation)."""
    return json.loads((BUILTIN_DIR / "TRAINING.json").read_text(encoding="utf-8"))


def load_builtin_pair(*, backend: Any = "reference", row_set: int = 8) -> tuple[Any, Any]:
    """``(target, draft)``: the shipped target via ``load_target`` and its draft via ``draft.load_draft``."""
    from .draft import load_draft
    from .hybrid import load_target

    target_dir, draft_dir, _ = builtin_paths()
    target = load_target(target_dir, backend=backend, row_set=row_set)
    return target, load_draft(draft_dir, target, backend=backend, row_set=row_set)


def acceptance_profile(backend: str = "host-int") -> list[float]:
    """The shipped pair's acceptance by draft position over its held-out prompts (code and prose pooled
    by rounds), from the longest k of ``EVAL_NUMPY[_HOST_INT].json`` (``tools/eval_pair.py``): what
    ``tune.expected_tokens`` needs to choose k without looking at the run being measured."""
    name = "EVAL_NUMPY_HOST_INT.json" if backend == "host-int" else "EVAL_NUMPY.json"
    kinds = json.loads((BUILTIN_DIR / name).read_text(encoding="utf-8"))["kinds"].values()
    runs = [kind["by_k"][max(kind["by_k"], key=int)] for kind in kinds]
    total = sum(r["rounds"] for r in runs)
    n = min(len(r["acceptance_by_position"]) for r in runs)
    return [sum(r["rounds"] * r["acceptance_by_position"][i] for r in runs) / total for i in range(n)]


def _random_config():
    """The seeded random target's config (4 layers 3:1, hidden 64, vocabulary 256)."""
    from .hybrid.synthetic import tiny_config

    return tiny_config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, head_dim=16)


def random_pair(cache: Path) -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of the seeded random pair under ``cache``, written on first use to a
    temporary folder then renamed into place (two processes racing keep one complete copy)."""
    folder = cache / RANDOM_KEY
    if not (folder / "target" / "config.json").exists() or not (folder / "draft" / "config.json").exists():
        _write_random_pair(folder)
    return folder / "target", folder / "draft"


def _write_random_pair(folder: Path) -> None:
    from .draft import write_synthetic_draft
    from .hybrid.synthetic import random_weights, write_checkpoint

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        cfg = _random_config()
        write_checkpoint(tmp / "target", cfg, random_weights(cfg, RANDOM_SEED))
        write_synthetic_draft(tmp / "draft", cfg, version=2, block_size=8, seed=RANDOM_SEED + 1)
        try:
            os.rename(tmp, folder)
        except OSError:
            if (folder / "target" / "config.json").exists() and (folder / "draft" / "config.json").exists():
                return  # another process finished first; its copy is the same seeded pair
            shutil.rmtree(folder)  # an incomplete copy left by an interrupted run
            os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
