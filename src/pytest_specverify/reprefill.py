"""Decode vs re-prefill consistency (the KL check SGLang runs between its decode and a re-prefill).

Decode ``max_new_tokens`` tokens one ``step`` at a time from ``prefill(prompt)``, sampling at
``temperature`` (seeded) so the path leaves the greedy one; then prefill ``prompt + output`` in one pass
on a fresh state and compare, for every generated token, its log-probability under the two passes.
The other checks compare verify/commit against the port's *own* prefill + steps, so a prefill that is
wrong in itself (positions, the conv/recurrent state or KV it leaves, the causal mask, a chunked path)
passes them all; this check does not.

Pass rule: the k3 estimator ``mean(exp(r) - 1 - r)``, ``r = logp_prefill - logp_decode``, is at most the
profile's ``kl_max`` and every ``|r|`` at most its ``logprob_max``. An exact port is not required to
be bitwise here (its claim covers verify and commit); the report says whether it was.
"""
from __future__ import annotations

from typing import Sequence

from .failure import SpecVerifyFailure, bound_text
from .owned import owned_outputs
from .report import CheckReport
from .stats import log_softmax, softmax
from .tolerance import Tolerance


def decode_prefill_consistency(port, prompt: Sequence[int], *, max_new_tokens: int, tol: Tolerance, seed: int = 0,
                               temperature: float = 1.0) -> CheckReport:
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    if max_new_tokens < 1 or temperature <= 0:
        raise ValueError(f"decode_prefill_consistency needs max_new_tokens >= 1 and temperature > 0, got "
                         f"{max_new_tokens} and {temperature}")
    prompt = list(prompt)
    rng = np.random.default_rng(seed)
    st = port.new_state()
    row = np.asarray(port.prefill(st, prompt).logits)[-1]
    tokens, decode_rows = [], []
    for i in range(max_new_tokens):
        decode_rows.append(np.array(row, np.float64))
        p = softmax(decode_rows[-1], temperature)
        tokens.append(int(rng.choice(p.size, p=p / p.sum())))
        if i + 1 < max_new_tokens:
            row = np.asarray(port.step(st, tokens[-1]).logits)[-1]

    full = np.asarray(port.prefill(port.new_state(), prompt + tokens).logits)
    if full.shape[0] != len(prompt) + len(tokens):
        raise SpecVerifyFailure(f"prefill of {len(prompt) + len(tokens)} tokens returned {full.shape[0]} logit rows")
    prefill_rows = full[len(prompt) - 1 : -1].astype(np.float64)  # row j predicts tokens[j]
    at = (np.arange(len(tokens)), np.array(tokens))
    lp_dec, lp_pre = log_softmax(np.array(decode_rows))[at], log_softmax(prefill_rows)[at]
    r = lp_pre - lp_dec
    k3 = float(np.mean(np.expm1(r) - r))
    worst = int(np.argmax(np.abs(r)))
    report = CheckReport("decode_prefill_consistency", metrics={
        "k3_kl": k3, "max_abs_logprob_diff": float(np.abs(r).max()),
        "max_abs_logit_diff": float(np.abs(prefill_rows - np.array(decode_rows)).max()),
        "bitwise": bool(np.array_equal(full[len(prompt) - 1 : -1], np.array(decode_rows).astype(full.dtype))),
        "tokens": len(tokens)})
    if k3 <= tol.kl_max and abs(r[worst]) <= tol.logprob_max:
        return report
    first = int(np.argmax(np.abs(r) > tol.logprob_max)) if abs(r[worst]) > tol.logprob_max else worst
    raise SpecVerifyFailure(
        f"one-pass prefill of prompt + output disagrees with the step-by-step decode that produced it "
        f"(profile {tol.name!r}: k3 KL {k3:.3e} vs kl_max {tol.kl_max:g}, max |dlogprob| {abs(r[worst]):.3e} at "
        f"generated token {worst} vs logprob_max {tol.logprob_max:g})\n"
        f"  first bad: generated token {first} (id {tokens[first]}, position {len(prompt) + first}): log p "
        f"{lp_pre[first]:.6g} by prefill, {lp_dec[first]:.6g} by decode; prompt {len(prompt)} tokens, sampled at "
        f"T={temperature}, seed {seed}\n"
        f"  look at what prefill does differently from step: positions / RoPE offset, the causal mask, the "
        f"conv / recurrent state or KV rows it leaves for the next step, a chunked path\n  "
        + (bound_text(abs(r[worst]), f"logprob_max={tol.logprob_max:g}", "max |dlogprob|", tol.name, False)
           if abs(r[worst]) > tol.logprob_max else
           bound_text(k3, f"kl_max={tol.kl_max:g}", "k3 KL", tol.name, False)))
