"""Long context: the same claims past the lengths the other checks reach.

The other checks decode a few dozen tokens after a short prompt, so a bug that waits for position 128
or 256 passes them all: a KV cache with a fixed capacity, window or ring, a RoPE / position table of
fixed size, a position counter in a small integer type, a chunked prefill with a large chunk. This
check fills the context to ``length`` tokens (the prompt, then seeded random ids) and asks two
questions there:

1. *Decode vs prefill, position by position.* One ``step`` per token after ``prefill(prompt)``
   against one ``prefill`` of the whole sequence: for every position, the log-probability of the token
   that follows (``r = logp_prefill - logp_decode``) must stay within the profile's ``logprob_max``,
   and the k3 KL of every window of ``WINDOW`` positions within ``kl_max`` (per window, so a fault
   that starts late is not averaged away by the good positions before it).
2. *Speculation at the end of the context.* On every commit path, from ``prefill(sequence)``: one
   verify of ``[last, d1..dk]`` and a partial commit, against the same prefill plus single steps of
   the kept rows: the kept rows' logits, the state after the commit and after one more step, and that
   step's logits (the commit-equivalence claim, at the far end of the context).
"""
from __future__ import annotations

from typing import Sequence

from .checks import argmax, commit_round, require_independent_states
from .failure import SpecVerifyFailure, bound_text
from .owned import owned_outputs
from .protocol import NotSupported, context_length
from .report import CheckReport
from .stats import log_softmax
from .tolerance import Tolerance

WINDOW = 32
HINT = ("look at what changes with the length of the context: a KV cache capacity, window or ring buffer, a "
        "RoPE / position table of fixed size, a position counter in a small integer type, a chunked prefill")


def long_context(port, prompt: Sequence[int], *, length: int, k: int, tol: Tolerance, seed: int = 0,
                 paths: Sequence[str] | None = None) -> CheckReport:
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    prompt = list(prompt)
    asked, length = length, context_length(port, length)
    need = len(prompt) + 2 * (k + 2)
    if prompt and length < need <= asked:
        raise NotSupported(f"port {getattr(port, 'name', port)!r} holds at most max_context = {length} tokens; the "
                           f"long-context check needs {need} for a {len(prompt)}-token prompt and k = {k}")
    if not prompt or length < need:
        raise ValueError(f"long_context needs a non-empty prompt and length >= len(prompt) + 2 * (k + 2) = {need}, got "
                         f"length {length} for a {len(prompt)}-token prompt and k = {k}; raise --specverify-context")
    rng = np.random.default_rng(seed)
    # the sequence the context is filled with; the spec round's rows follow it, so it stops k + 2 short
    fill = length - (k + 2)
    seq = prompt + [int(t) for t in rng.integers(0, port.vocab_size, size=fill - len(prompt))]
    report = CheckReport("long_context", metrics={"length": length, "prompt": len(prompt)})
    require_independent_states(port, prompt, tol)
    _decode_vs_prefill(port, seq, len(prompt), tol, report)
    _spec_round_at(port, seq, k, tol, rng, list(paths or port.commit_paths), report)
    return report


def _decode_vs_prefill(port, seq, n_prompt, tol, report) -> None:
    """Row by row, so memory stays one [T, V] prefill output plus O(V) (a 150k vocabulary at 320 tokens
    would otherwise hold gigabytes of float64 rows)."""
    __tracebackhide__ = True
    import numpy as np

    full = np.asarray(port.prefill(port.new_state(), seq).logits)
    if full.shape[0] != len(seq):
        raise SpecVerifyFailure(f"prefill of {len(seq)} tokens returned {full.shape[0]} logit rows")
    st = port.new_state()
    row = np.asarray(port.prefill(st, seq[:n_prompt]).logits)[-1]
    n = len(seq) - n_prompt  # decode row j: position n_prompt - 1 + j, predicts seq[n_prompt + j]
    r = np.empty(n)
    max_logit, bitwise = 0.0, True
    for j in range(n):
        if j:
            row = np.asarray(port.step(st, seq[n_prompt + j - 1]).logits)[-1]
        pre = full[n_prompt - 1 + j]
        bitwise = bitwise and np.array_equal(pre, row.astype(pre.dtype))
        dec64, pre64 = row.astype(np.float64), pre.astype(np.float64)
        max_logit = max(max_logit, float(np.abs(pre64 - dec64).max()))
        t = seq[n_prompt + j]
        r[j] = float(log_softmax(pre64)[t] - log_softmax(dec64)[t])
    k3 = np.expm1(r) - r
    windows = [(s, float(k3[s : s + WINDOW].mean())) for s in range(0, len(r), WINDOW)]
    w_start, w_kl = max(windows, key=lambda w: w[1])
    report.metrics.update({"max_abs_logprob_diff": float(np.abs(r).max()), "max_window_k3_kl": w_kl,
                           "max_abs_logit_diff": max_logit, "bitwise": bool(bitwise)})
    bad = np.abs(r) > tol.logprob_max
    if not bad.any() and w_kl <= tol.kl_max:
        return
    lo, hi = n_prompt - 1 + w_start, n_prompt - 1 + min(w_start + WINDOW, len(r)) - 1
    head = (f"at long context, one-pass prefill and step-by-step decode disagree ({len(seq)} tokens: {n_prompt} prompt, "
            f"then seeded random ids; profile {tol.name!r})")
    if bad.any():
        first = int(np.argmax(bad))
        detail = (f"from position {n_prompt - 1 + first} on: |dlogprob| {abs(r[first]):.3e} there vs logprob_max "
                  f"{tol.logprob_max:g}, and the {first} positions before it agree within it (worst window: k3 KL "
                  f"{w_kl:.3e} at positions {lo}..{hi} vs kl_max {tol.kl_max:g})")
    else:
        worst = w_start + int(np.argmax(np.abs(r[w_start : w_start + WINDOW])))
        detail = (f"in positions {lo}..{hi}: k3 KL {w_kl:.3e} vs kl_max {tol.kl_max:g}, although every |dlogprob| is "
                  f"within logprob_max {tol.logprob_max:g} (the largest there {abs(r[worst]):.3e} at position "
                  f"{n_prompt - 1 + worst})")
    measured = (bound_text(float(np.abs(r).max()), f"logprob_max={tol.logprob_max:g}", "max |dlogprob|", tol.name, False)
                if bad.any() else bound_text(w_kl, f"kl_max={tol.kl_max:g}", "window k3 KL", tol.name, False))
    raise SpecVerifyFailure(f"{head} {detail}\n  {HINT}\n  {measured}")


def _spec_round_at(port, seq, k, tol, rng, paths, report) -> None:
    __tracebackhide__ = True

    last = argmax(port.prefill(port.new_state(), seq).logits[-1])
    rows = [last] + [int(t) for t in rng.integers(0, port.vocab_size, size=k)]
    for path in paths:
        kept = int(rng.integers(1, k + 1)) if k else 1  # a partial accept (kept - 1 of k drafts) when k > 0
        nxt = rows[kept] if kept <= k else rows[0]  # the token of the step after the commit (any token will do)
        where = (f"at long context (position {len(seq)}), commit path {path!r}: verify of {rows}, kept {kept} rows "
                 f"({kept - 1} of {k} drafts accepted)")
        commit_round(port, seq, rows, kept, path, nxt, tol, where, hint=f"\n  {HINT}")
        report.counts[(path, k, kept)] += 1
