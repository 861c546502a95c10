"""Which model, draft, tokenizer and prompts a command runs on. The CLI's one environment read lives
here: ``ONEBIT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/onebit``, else ``~/.cache/onebit``), where the
built-in random pair is written on first use when no trained pair ships with the package.

Models are named by path (``--model`` / ``--draft``); with neither, the built-in pair is used. A model
given without a draft is refused for the speculative commands: the built-in draft belongs to the
built-in model.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import default_model
from ..checkpoint.jsonfile import read_json
from ..errors import ConfigError

DEFAULT_IDS = [1, 2, 3, 4]


def cache_dir() -> Path:
    """Absolute: a relative ONEBIT_CACHE_DIR is taken from the folder the command starts in (said once, in
    full, wherever the folder is named); a relative XDG_CACHE_HOME is ignored, as the XDG base-directory
    specification asks (it made a ./onebit folder wherever a command ran)."""
    env = os.environ.get("ONEBIT_CACHE_DIR")
    if env:
        return Path(env).absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "onebit"


TRAINED_SOURCE = "built-in trained pair"


def builtin_paths() -> tuple[Path, Path, str, Path | None]:
    """(target folder, draft folder, description, tokenizer file or None) of the built-in pair."""
    try:
        target_dir, draft_dir, tok = default_model.builtin_paths()
    except FileNotFoundError as e:  # the trained pair is not in this install: the seeded random pair
        target_dir, draft_dir = default_model.random_pair(cache_dir())
        missing = str(e).split(";")[0]
        return target_dir, draft_dir, f"built-in random pair ({target_dir.parent}; trained pair unavailable: {missing})", None
    return target_dir, draft_dir, TRAINED_SOURCE, tok


def resolve_backend(name: str) -> str:
    """``auto``: host-int when its native kernel builds and runs here (exact integers, the fastest host
    path), else reference; any other name as given."""
    if name != "auto":
        return name
    from ..gemm.host_int import native
    from ..gemm.host_int.backend import DISPATCH

    return "host-int" if any(native.available(p) for p in DISPATCH) else "reference"


def make_backend(name: str, threads: int | None):
    from ..gemm import get_backend

    name = resolve_backend(name)
    return get_backend(name, threads=threads or 1) if name == "host-int" else get_backend(name)


def default_row_set(backend) -> int:
    """16 where rows are never padded (one call per verify of up to 16 rows), else 8 (BLAS's measured
    row-invariant block, ``gemm/reference.py``)."""
    return 16 if getattr(backend, "row_invariant", False) else 8


@dataclass
class Loaded:
    target: Any
    draft: Any
    target_path: Path
    draft_path: Path | None
    model_hash: str
    draft_hash: str | None
    tokenizer: Any
    source: str

    @property
    def builtin_trained(self) -> bool:
        return self.source == TRAINED_SOURCE

    @property
    def default_k(self) -> int | None:
        """The trained pair's measured best k (``pretrained.RECOMMENDED_K``); other drafts: block - 1."""
        return default_model.RECOMMENDED_K if self.builtin_trained else None

    def provenance(self, **extra: Any) -> dict[str, Any]:
        from ..measure.provenance import pair_provenance

        return pair_provenance(self.target, model_hash=self.model_hash, draft=self.draft, draft_hash=self.draft_hash,
                               model_path=str(self.target_path), draft_path=str(self.draft_path) if self.draft_path else None,
                               **extra)


def folder_kind(raw: Any) -> str | None:
    """"draft" for a DFlash draft's parsed config.json (``dflash_config`` or a DFlash architecture), "target"
    for a config naming a model_type, else None (the loaders then say what is wrong with it)."""
    if not isinstance(raw, dict):
        return None
    archs = raw.get("architectures")
    if "dflash_config" in raw or (isinstance(archs, list) and any("DFlash" in str(a) for a in archs)):
        return "draft"
    return "target" if "model_type" in raw else None


def _peek_kind(folder: Path) -> str | None:
    """``folder_kind`` of a folder's config.json when it reads as JSON; else None (the loader's error)."""
    import json

    cfg = folder / "config.json"
    try:  # a regular file only: a FIFO would block the read and /dev/zero never end it (read_config refuses both)
        if not cfg.is_file():
            return None
        return folder_kind(json.loads(cfg.read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):
        return None


def paths(args, *, need_draft: bool) -> tuple[Path, Path | None, str, Path | None]:
    """(target folder, draft folder or None, description, tokenizer file or None) the flags name; a folder
    given in the other role (a draft as --model, a target as --draft) is refused, saying which it is."""
    model, draft = getattr(args, "model", None), getattr(args, "draft", None)
    if not model:
        if draft:
            raise ConfigError(f"--draft {draft} was given without --model; a draft only fits the target it was "
                              f"trained for - give that target with --model PATH")
        tpath, dpath, source, tok = builtin_paths()
        return tpath, dpath if need_draft else None, source, tok
    tpath, dpath = Path(model), Path(draft) if draft else None
    if _peek_kind(tpath) == "draft":
        raise ConfigError(f"--model {model} is a DFlash draft folder (its config.json has dflash_config), not a target; "
                          f"give the target checkpoint as --model and this folder as --draft")
    if need_draft and dpath is None:
        raise ConfigError(f"--model {model} was given without --draft; the built-in draft belongs to the built-in "
                          f"model - give the draft trained for this model with --draft PATH")
    if need_draft and _peek_kind(dpath) == "target":
        raise ConfigError(f"--draft {draft} is a target checkpoint folder (its config.json has no dflash_config), not a "
                          f"DFlash draft; give the draft trained for --model as --draft")
    return tpath, dpath if need_draft else None, f"model {model}", None


def draft_block(args) -> int:
    """The block size of the draft the flags name, read from its config alone (before any weight loads)."""
    from ..checkpoint.safetensors import read_config
    from ..draft.config import DraftConfig

    _, dpath, _, _ = paths(args, need_draft=True)
    return DraftConfig.from_hf(read_config(dpath), source=str(dpath / "config.json")).block_size


def load(args, *, need_draft: bool, row_set: int | None = None, backend: str | None = None) -> Loaded:
    """Load the target (and the draft) the flags name, on the flags' backends and row set."""
    from ..draft import load_draft
    from ..hybrid import load_target
    from ..measure.provenance import checkpoint_hash

    tpath, dpath, source, tok_path = paths(args, need_draft=need_draft)
    tb = make_backend(backend or args.target_backend or args.backend, args.threads)
    rs = row_set or args.row_set or default_row_set(tb)
    target = load_target(tpath, backend=tb, row_set=rs)
    dr, dhash = None, None
    if need_draft:
        db = make_backend(args.draft_backend or args.backend, args.threads)
        dr = load_draft(dpath, target, backend=db, row_set=rs)
        dhash = checkpoint_hash(dpath)
    return Loaded(target, dr, tpath, dpath if need_draft else None, checkpoint_hash(tpath), dhash,
                  load_tokenizer(tok_path or tpath / "tokenizer.json"), source)


def sampling_seed(args) -> int:
    """--seed of ``generate`` / ``loop``: 0 when not given. Greedy decoding draws no random number, so a seed given at
    --temperature 0 would change nothing; the run goes on (the output is still the right one) and says so."""
    if args.seed is None:
        return 0
    if args.temperature == 0:
        from . import ui

        ui.warning(f"--seed {args.seed} has no effect at --temperature 0: greedy decoding draws no random number; "
                   f"give --temperature above 0 to sample, or drop --seed")
    return args.seed


def check_stages(stages, k: int | None, block: int | None = None) -> None:
    """--verify-stages S: a first pass of more than k+1 rows would be one pass, so it is refused, not clamped
    without a word. With k open (None), the bound is the draft's largest verify, ``block`` rows (the loop
    then chooses among the k with k+1 >= S: ``tuning.candidates``)."""
    if not isinstance(stages, int):
        return
    if k is not None and stages > k + 1:
        raise ConfigError(f"--verify-stages {stages} is more rows than a verify of k={k} drafts has (k+1 = {k + 1}); "
                          f"give 1..{k + 1} ({k + 1}: one pass, as 'one'), 'one' or 'auto'")
    if k is None and block is not None and stages > block:
        raise ConfigError(f"--verify-stages {stages} is more rows than a verify of this draft has (k+1 = {block} at "
                          f"the largest k, its block size {block} minus the anchor); give 1..{block}, 'one' or 'auto'")


def check_k(k: int | None, draft, default: int | None = None) -> int:
    """k defaults to ``default`` (else block - 1); anything outside 1..block-1 is refused with the range.
    ``draft``: a loaded draft, or its block size."""
    block = draft if isinstance(draft, int) else draft.config.block_size
    top = block - 1
    if k is None:
        return min(default, top) if default else top
    if not 1 <= k <= top:
        raise ConfigError(f"--k {k} is out of range: this draft proposes 1..{top} tokens a round (block size "
                          f"{block} minus the anchor); give --k between 1 and {top}")
    return k


def check_length(max_new_tokens: int, prompts: list[list[int]], limit: int | None, *, least: int = 1,
                 why: str = "") -> None:
    """--max-new-tokens in ``least``..(this model's context less the longest prompt), refused before any
    decoding with the range that applies here. The last token is emitted, never forwarded: a run holds
    prompt + max_new_tokens - 1 positions (``loop.inputs.check_run``'s rule). ``why``: why ``least``."""
    longest = max((len(p) for p in prompts), default=0)
    top = None if limit is None else limit - longest + 1
    if max_new_tokens < least or (top is not None and max_new_tokens > top):
        if top is None:
            raise ConfigError(f"--max-new-tokens {max_new_tokens} is out of range: give {least} or more{why}")
        if top < least:
            raise ConfigError(f"the prompt of {longest} tokens leaves no room in this model's context "
                              f"(max_position_embeddings={limit}) for {least} new tokens; give a shorter prompt")
        raise ConfigError(f"--max-new-tokens {max_new_tokens} is out of range: this model's context "
                          f"(max_position_embeddings={limit}) with a prompt of {longest} tokens allows {least}..{top}{why}; "
                          f"give --max-new-tokens in that range")


# -- tokenizer and prompts ------------------------------------------------------------------------------
def load_tokenizer(path: Path):
    """The tokenizer at ``path`` (a ``tokenizer.json``), or None when there is none.

    A tokenizer.json that is there but broken (or unreadable for want of the ``tokenizers`` package) is
    refused, naming the file, even for a run given --prompt-ids: such a run still prints its tokens as
    text with it, and a model folder whose tokenizer is broken is a broken folder - better said at load,
    before any decoding work, than as a traceback after it (or as a silent run without text)."""
    if not path.is_file():
        return None
    return default_model.load_tokenizer(path)


def encode(tok, text: str) -> list[int]:
    r = tok.encode(text)
    return list(r.ids) if hasattr(r, "ids") else [int(t) for t in r]


def decode(tok, ids: list[int]) -> str:
    return tok.decode(list(ids))


def parse_ids(text: str, what: str = "--prompt-ids") -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"{what} must be integers separated by spaces or commas, got {text!r}") from None
    if not ids:
        raise ConfigError(f"{what} is empty; give at least one token id")
    return ids


def prompt(args, loaded: Loaded) -> list[int]:
    """The one prompt of generate / loop: --prompt TEXT (needs a tokenizer), --prompt-ids, or the default."""
    if args.prompt is not None:
        return _text(args.prompt, loaded)
    if args.prompt_ids is not None:
        return in_vocab(parse_ids(args.prompt_ids), loaded, "--prompt-ids")
    return default_prompts(loaded)[0]


def in_vocab(ids: list[int], loaded: Loaded, where: str, fix: str = "give ids the model's tokenizer makes") -> list[int]:
    vocab = loaded.target.config.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ConfigError(f"{where}: token id {bad[0]} is outside this model's vocabulary 0..{vocab - 1}"
                          f"{f' ({len(bad)} ids are)' if len(bad) > 1 else ''}; {fix}")
    return ids


def _text(text: str, loaded: Loaded, where: str = "--prompt") -> list[int]:
    if loaded.tokenizer is None:
        raise ConfigError(f"{where} needs a tokenizer and {loaded.source} has none (no tokenizer.json); "
                          f"give token ids instead (--prompt-ids, or id lists in a --prompts file)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes the shell passed that are not UTF-8 (or a lone surrogate escape)
        raise ConfigError(f"{where} {text[:40]!r} is not valid UTF-8 text (character {e.start}); give UTF-8 text or "
                          f"token ids") from None
    ids = encode(loaded.tokenizer, text)
    if not ids:
        raise ConfigError(f"{where} {text!r} encodes to no tokens; give a longer prompt")
    # the ids are the tokenizer's own: out of range, the tokenizer and the model disagree, not the prompt
    return in_vocab(ids, loaded, f"the tokenizer's encoding of {where} {text[:40]!r}",
                    f"the tokenizer.json is not this model's (in {loaded.target_path}: its config.json vocab_size) - "
                    f"use the one that came with it, or give token ids")


def prompt_set(args, loaded: Loaded) -> list[list[int]]:
    """The prompts of probe capture / bench: --prompts FILE, a single prompt flag, or the built-in set."""
    if getattr(args, "prompts", None):
        path = Path(args.prompts)
        if path.is_dir():
            raise ConfigError(f"prompt file {str(path)!r} is a folder; give a JSON file holding a list of prompts")
        if not path.is_file():
            what = "is not a regular file (a FIFO or a device)" if path.exists() else "does not exist"
            raise ConfigError(f"prompt file {str(path)!r} {what}; give a JSON list of strings or of token-id lists")
        items = read_json(path, "prompt file", error=ConfigError,
                          redo="give a JSON list of strings or of token-id lists")
        held = type(items).__name__
        if isinstance(items, dict):
            held = "an object without a list under 'prompts'" if not isinstance(items.get("prompts"), list) else held
            items = items.get("prompts")
        if not isinstance(items, list):
            raise ConfigError(f"prompt file {str(path)!r} holds {held}, not a list of prompts; give a JSON "
                              f"list of strings or token-id lists (or an object with such a list under 'prompts')")
        out = [_item(x, loaded, f"prompt file {str(path)!r}, prompt {i}") for i, x in enumerate(items)]
        if not out:
            raise ConfigError(f"prompt file {str(path)!r} holds no prompts")
        return out
    if args.prompt is not None or args.prompt_ids is not None:
        return [prompt(args, loaded)]
    return default_prompts(loaded)


def _item(x, loaded: Loaded, where: str) -> list[int]:
    if isinstance(x, dict):
        x = x.get("ids", x.get("text", x.get("prompt")))
    if isinstance(x, str):
        return _text(x, loaded, where)
    if isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x):
        return in_vocab(x, loaded, where)
    raise ConfigError(f"{where}: {str(x)[:60]!r} is neither a string nor a non-empty list of token ids")


def default_prompts(loaded: Loaded) -> list[list[int]]:
    """Text prompts shipped with the trained pair; else four seeded token-id prompts."""
    if loaded.builtin_trained and loaded.tokenizer is not None:
        texts = default_model.default_prompts()
        got = [encode(loaded.tokenizer, t if isinstance(t, str) else t.get("text", "")) for t in texts]
        got = [g for g in got if g]
        if got:
            return got[:4]
    vocab = loaded.target.config.vocab_size
    rng = np.random.default_rng(7)
    return [DEFAULT_IDS] + [rng.integers(0, vocab, size=8).tolist() for _ in range(3)]


def render(tokens: list[int], loaded: Loaded) -> str:
    if loaded.tokenizer is not None:
        return decode(loaded.tokenizer, tokens)
    return " ".join(map(str, tokens))
