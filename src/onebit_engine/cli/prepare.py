"""Getting a decoding command ready, said on stderr as it happens: load the pair (the first run on a
machine builds the host-int kernel here), read the prompt, check the length against this model, and run
each compiled path once (numba compiles a function on its first call: up to a minute on a fresh
install) - so that no figure the command prints counts compilation, a prefill's least of all."""
from __future__ import annotations

from typing import Sequence

from . import models
from .status import COMPILING, Status


def warm(target, draft=None, prompt: Sequence[int] = (1,)) -> None:
    """A prefill of (at most) two prompt tokens, a plain step, and with a draft: a context append, a
    one-token proposal, a two-row verify and its commit - all on scratch states, so nothing of the run
    changes. Compiled code is typed by dtype and rank, not size: two rows compile what a long prompt runs."""
    head = [int(t) for t in prompt[:2]] or [1]
    st = target.new_state()
    out = target.forward(head, st)
    target.forward([head[-1]], st)
    if draft is not None:
        ds = draft.new_state()
        draft.append_context(ds, out.hidden)
        prop = draft.propose(ds, head[-1], 1)
        target.verify([head[-1], int(prop.tokens[0])], st)
        target.commit(st, 1)


def describe_source(args) -> str:
    return f"--model {args.model}" if getattr(args, "model", None) else "the built-in pair"


def prepare(args, status: Status, *, need_draft: bool) -> tuple[models.Loaded, list[int]]:
    """(loaded pair, prompt ids), with the lengths checked and the compiled paths warm."""
    what = describe_source(args) + (" and its draft" if need_draft and getattr(args, "model", None) else "")
    with status.stage(f"loading {what}", slow_hint=COMPILING):
        loaded = models.load(args, need_draft=need_draft)
        prompt = models.prompt(args, loaded)
        models.check_length(args.max_new_tokens, [prompt], loaded.target.config.max_position_embeddings)
        status.detail(f"{loaded.source}: {loaded.target.backend.name} ({loaded.target.backend.describe().get('kernel_set')}), "
                      f"row set {loaded.target.row_set}; prompt of {len(prompt)} tokens")
        warm(loaded.target, loaded.draft, prompt)
    return loaded, prompt
