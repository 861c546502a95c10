"""A prefill onto a state that already holds tokens: the prompt in chunks, and a prefill after a commit.

Every other check prefills a fresh state, so a port whose prefill assumes position 0 (RoPE from 0, a causal
mask that ignores the cached rows, a conv window or recurrent state reset, a KV write at row 0) passes them
all, yet a chat turn, a chunked long prompt or a system prompt cached ahead of the user's fails. Against one
prefill of the whole text on a fresh state:

* *chunks*: the prompt cut into 2 and 3 seeded pieces, prefilled one after another on one state;
* *after a commit*: prefill, one verify of ``[last, d1..dk]`` and a commit of ``r`` rows on every commit path,
  then a prefill of more tokens.

The rows of the later prefill and of one step after it must give the same log-probabilities as the whole
prefill's rows, within the profile's ``logprob_max`` (two prefills of different lengths sum in different
orders, so no profile asks for bitwise here; ``kl_max`` bounds the mean KL per row).
"""
from __future__ import annotations

from typing import Sequence

from .checks import argmax
from .failure import SpecVerifyFailure, bound_text
from .owned import owned_outputs
from .report import CheckReport
from .stats import log_softmax
from .tolerance import Tolerance

HINT = ("a prefill onto a non-empty state must start at the state's offset: RoPE positions, the causal mask over the "
        "cached rows, the KV rows it writes, the conv window and recurrent state it continues")


def prefill_onto_state(port, prompt: Sequence[int], *, tol: Tolerance, seed: int = 0, k: int = 3,
                       paths: Sequence[str] | None = None) -> CheckReport:
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    rng = np.random.default_rng(seed)
    prompt = [int(t) for t in prompt]
    if len(prompt) < 3:
        raise ValueError(f"prefill_onto_state needs a prompt of at least 3 tokens to cut, got {len(prompt)}")
    more = [int(t) for t in rng.integers(0, port.vocab_size, size=5)]
    report = CheckReport("prefill_onto_state")
    worst = 0.0
    for pieces in (2, 3):
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, len(prompt)), size=pieces - 1, replace=False))
        chunks = [prompt[a:b] for a, b in zip([0] + cuts, cuts + [len(prompt)])]
        st = port.new_state()
        for c in chunks[:-1]:
            port.prefill(st, c)
        where = f"the prompt ({len(prompt)} tokens) prefilled in {pieces} chunks of {[len(c) for c in chunks]}"
        worst = max(worst, _same_as_one_prefill(port, st, prompt[: len(prompt) - len(chunks[-1])], chunks[-1] + more,
                                                tol, where))
        report.counts["chunks"] += 1
    for path in list(paths or port.commit_paths):
        for kept in sorted({0, 1, k + 1, int(rng.integers(0, k + 2))}):
            st = port.new_state()
            last = argmax(port.prefill(st, prompt).logits[-1])
            rows = [last] + [int(t) for t in rng.integers(0, port.vocab_size, size=k)]
            port.verify(st, rows, path=path)
            port.commit(st, kept, path=path)
            where = (f"a prefill of {len(more)} tokens after prefill({len(prompt)} tokens), a verify of {rows} and a "
                     f"commit of {kept} rows on path {path!r}")
            worst = max(worst, _same_as_one_prefill(port, st, prompt + rows[:kept], more, tol, where))
            report.counts[(path, kept)] += 1
    report.metrics["max_abs_logprob_diff"] = worst
    return report


def _same_as_one_prefill(port, st, before: list, tokens: list, tol: Tolerance, where: str) -> float:
    """Prefill ``tokens`` onto ``st`` (which holds ``before``) and step once; against one prefill of
    ``before + tokens`` and the same step on a fresh state: every row's log-probabilities."""
    __tracebackhide__ = True
    import numpy as np

    got = np.asarray(port.prefill(st, tokens).logits, np.float64)
    nxt = argmax(got[-1])
    got = np.concatenate([got, np.asarray(port.step(st, nxt).logits, np.float64)[-1:]])
    ref_state = port.new_state()
    whole = np.asarray(port.prefill(ref_state, before + tokens).logits, np.float64)
    if whole.shape[0] != len(before) + len(tokens) or got.shape[0] != len(tokens) + 1:
        raise SpecVerifyFailure(f"{where}: the prefills returned {got.shape[0] - 1} and {whole.shape[0]} logit rows for "
                                f"{len(tokens)} and {len(before) + len(tokens)} tokens")
    want = np.concatenate([whole[len(before):], np.asarray(port.step(ref_state, nxt).logits, np.float64)[-1:]])
    r = np.abs(log_softmax(got) - log_softmax(want))
    per_row = r.max(axis=1)
    p = np.exp(log_softmax(want))
    kl = float(np.mean((p * (log_softmax(want) - log_softmax(got))).sum(axis=1)))  # mean KL(whole || onto) per row
    if per_row.max() <= tol.logprob_max and kl <= tol.kl_max:
        return float(per_row.max())
    i = int(np.argmax(per_row > tol.logprob_max)) if per_row.max() > tol.logprob_max else int(np.argmax(per_row))
    what = "the step after it" if i == len(tokens) else f"its row {i} (token {tokens[i]})"
    raise SpecVerifyFailure(
        f"{where}: {what} gives other log-probabilities than one prefill of the whole text on a fresh state "
        f"(position {len(before) + i}): max |dlogprob| {per_row[i]:.3e} vs logprob_max {tol.logprob_max:g}, mean KL "
        f"{kl:.3e} vs kl_max {tol.kl_max:g} (profile {tol.name!r}); rows before it: {[f'{x:.1e}' for x in per_row[:i]]}"
        f"\n  {HINT}\n  "
        + bound_text(float(per_row[i]), f"logprob_max={tol.logprob_max:g}", "max |dlogprob|", tol.name, False))
