"""Prompt sets: the shipped texts (``data/prompts.json``) mapped through the port's ``encode``, plus
seeded random id sequences. Order is fixed, so every xdist worker collects the same matrix."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

PROMPT_SETS = ("default", "code", "prose", "random", "all")


@dataclass(frozen=True)
class Prompt:
    id: str
    kind: str  # "code" | "prose" | "random"
    text: str | None = None
    seed: int | None = None

    def tokens(self, port, *, length: int = 12) -> list[int]:
        """Ids for ``port``: ``encode(text)`` (or ``byte % vocab`` if the port has no encode), or
        ``length`` seeded random ids."""
        if self.text is not None:
            enc = getattr(port, "encode", None)
            ids = list(enc(self.text)) if enc else [b % port.vocab_size for b in self.text.encode()]
            if not ids:
                raise ValueError(f"prompt {self.id!r} encodes to no tokens")
            return ids
        import numpy as np

        return [int(t) for t in np.random.default_rng(self.seed).integers(0, port.vocab_size, size=length)]


@lru_cache(maxsize=1)
def shipped() -> tuple[Prompt, ...]:
    raw = json.loads(resources.files("pytest_specverify").joinpath("data/prompts.json").read_text("utf-8"))
    return tuple(Prompt(p["id"], p["kind"], p["text"]) for p in raw["default"])


def select(prompt_set: str, n: int, seed: int = 0) -> list[Prompt]:
    """``n`` prompts of ``prompt_set``: "default"/"all" = the shipped texts then random ones, "code" /
    "prose" = shipped texts of that kind, "random" = seeded random ids only."""
    if prompt_set not in PROMPT_SETS:
        raise ValueError(f"prompt set {prompt_set!r} is not one of {PROMPT_SETS}")
    texts = [p for p in shipped() if prompt_set in ("default", "all", p.kind)]
    randoms = [Prompt(f"random-{i}", "random", seed=seed * 1000 + i) for i in range(max(n, 1))]
    if prompt_set in ("code", "prose"):
        pool = texts
    elif prompt_set == "random":
        pool = randoms
    else:
        pool = texts + randoms
    return pool[:n]
