"""``onebit generate``: plain decoding, with the prompt and the output labelled. ``onebit loop`` is loop.py."""
from __future__ import annotations

from typing import Any

from . import models, prepare, ui
from .status import Status


class Counted:
    """A proxy that calls ``tick`` on every call of one method (progress without touching the loop)."""

    def __init__(self, inner: Any, method: str, tick):
        self._inner, self._method, self._tick = inner, method, tick

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        def counted(*a, **kw):
            out = attr(*a, **kw)
            self._tick(1)
            return out

        return counted


def text(tokens, loaded) -> str | None:
    return models.decode(loaded.tokenizer, tokens) if loaded.tokenizer is not None else None


def labelled(label: str, tokens: list[int], loaded) -> str:
    """``prompt (4 tokens): 1 2 3 4``; text with a line break starts on the line after its label, as it is."""
    body = models.render(tokens, loaded)
    head = f"{label} ({len(tokens)} token{'s' * (len(tokens) != 1)}{'' if loaded.tokenizer is not None else ', ids'}):"
    return f"{head}\n{body}" if "\n" in body else f"{head} {body}"


def untimed(res, max_new_tokens: int) -> str | None:
    """Why a run has no decode rate (None: it has one): the rate counts the tokens after the first (the
    prefill's), and 0 of them is no measurement of 0 tok/s."""
    return None if len(res.tokens) > 1 else no_rate(max_new_tokens)


def no_rate(max_new_tokens: int) -> str:
    """Why a run left no token after the first to time, with the way out."""
    if max_new_tokens < 2:
        return f"--max-new-tokens {max_new_tokens} leaves no token after the first to time; give --max-new-tokens 2 or more"
    return "the run stopped at a stop token right after the first, leaving none to time; give a prompt the model continues"


def cmd_generate(args) -> int:
    from ..loop.generate import generate
    from ..measure.provenance import plain_provenance

    seed = models.sampling_seed(args)
    status = Status(args)
    loaded, prompt = prepare.prepare(args, status, need_draft=False)
    with ui.Bar(args.max_new_tokens, "generate", ui.progress_enabled(args)) as bar:
        target = Counted(loaded.target, "forward", bar) if bar.enabled else loaded.target
        res = generate(target, prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=seed)
    prov = dict(plain_provenance(loaded.target, temperature=args.temperature), model_hash=loaded.model_hash, model_path=str(loaded.target_path))
    why = untimed(res, args.max_new_tokens)
    rate = None if why is not None else res.tokens_per_s
    if args.json:
        doc = {"command": "generate", "prompt": prompt, "prompt_text": text(prompt, loaded), "tokens": res.tokens,
               "text": text(res.tokens, loaded), "stop_reason": res.stop_reason, "tokens_per_s": rate,
               "prefill_ms": 1e3 * res.prefill_s, "provenance": prov}
        if why is not None:  # strict JSON: null with its reason (docs/cli.md)
            doc["null_reasons"] = {"tokens_per_s": why}
        ui.print_json(doc)
        return 0
    print(labelled("prompt", prompt, loaded))
    print(labelled("output", res.tokens, loaded))
    print(f"\n{len(res.tokens)} tokens ({res.stop_reason}), {ui.fmt(rate, 1)} tok/s decode, prefill of "
          f"{len(prompt)} tokens {1e3 * res.prefill_s:.1f} ms  [{loaded.source}; {prov['backend']} ({prov['kernel_set']}), "
          f"row set {prov['row_set']}, T={args.temperature}]")
    return 0
