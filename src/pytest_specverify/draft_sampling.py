"""The port's own draft at T > 0: every token is drawn from the ``q`` it reports.

The loop's acceptance test ``min(1, p/q)`` and its residual ``max(0, p - q)`` preserve the target's
distribution only if ``q`` is the distribution the draft token was really drawn from. The sampling
check (``sampling_check.py``) runs the loop with a draft of the plugin's own, so a port whose draft reports
the wrong ``q`` (softmax at T = 1 while sampling at T, a different softcap, q of another row) passes
it and every greedy check, yet biases every sampled output.

From one fixed draft state (the prompt's taps appended, the prefill's greedy token as the anchor),
``propose(n = k)`` is called ``samples`` times with seeds ``seed, seed + 1, ...``:

* every ``q`` row is a distribution (non-negative, sums to 1) and gives its token a probability > 0;
* ``q[0]`` is the same on every call (the state and anchor are; the draw cannot change what it was
  drawn from) - bitwise for exact profiles, within the profile otherwise;
* the first tokens follow ``q[0]``: chi-square at false-alarm rate ``alpha``, zero-probability tokens
  never drawn.
"""
from __future__ import annotations

from typing import Sequence

from .failure import SpecVerifyFailure
from .owned import owned, owned_outputs
from .report import CheckReport
from .stats import conditional_fit
from .tolerance import Tolerance

SUM_TOL = 1e-4  # float32 softmax rows over a large vocabulary sum to 1 within ~1e-6; this is far looser


def draft_sampling(port, prompt: Sequence[int], *, samples: int, k: int, tol: Tolerance, seed: int = 0,
                   temperature: float = 1.0, alpha: float = 1e-6) -> CheckReport:
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    if temperature <= 0 or samples < 1 or k < 1:
        raise ValueError(f"draft_sampling needs temperature > 0, samples >= 1 and k >= 1, got {temperature}, {samples}, {k}")
    rows = port.prefill(port.new_state(), list(prompt))
    anchor = int(np.argmax(np.asarray(rows.logits)[-1]))
    draft = port.make_draft()
    dstate = draft.new_state()
    draft.append_context(dstate, rows.taps)
    where = f"(draft of {getattr(port, 'name', 'the port')}, T={temperature}, n={k}, anchor {anchor})"
    q0, counts = None, np.zeros(port.vocab_size)
    for s in range(samples):
        out = draft.propose(dstate, anchor, k, temperature=temperature, rng=np.random.default_rng(seed + s))
        toks, q = [int(t) for t in out.tokens], owned(out.q).astype(np.float64)  # a copy: drafts may reuse buffers
        if q.shape != (k, port.vocab_size) or len(toks) != k:
            raise SpecVerifyFailure(f"propose returned {len(toks)} tokens and q of shape {q.shape}; expected {k} and "
                                    f"({k}, {port.vocab_size}) {where}")
        sums = q.sum(axis=1)
        if (q < 0).any() or np.abs(sums - 1).max() > SUM_TOL:
            i = int(np.argmax(np.abs(sums - 1)))
            raise SpecVerifyFailure(f"q row {i} is not a distribution (min {q.min():.3g}, sum {sums[i]:.6f}) {where}")
        zero = [i for i, t in enumerate(toks) if q[i, t] <= 0]
        if zero:
            i = zero[0]
            raise SpecVerifyFailure(f"draft token {i} = {toks[i]} has probability {q[i, toks[i]]:.3g} under the q the "
                                    f"draft reports for it (seed {seed + s}) {where}: q is not what it was drawn from")
        if q0 is None:
            q0 = q[0]
        elif not tol.close(q[0], q0):  # bitwise for an exact profile
            raise SpecVerifyFailure(
                f"q[0] differs between two proposals from the same draft state and anchor (seeds {seed} and {seed + s}; "
                f"max |diff| {np.abs(q[0] - q0).max():.3g}, profile {tol.describe()}) {where}: the draw cannot "
                f"change the distribution it was drawn from (does propose() change the state, or use the rng "
                f"for more than sampling?)")
        counts[toks[0]] += 1
    fit = conditional_fit("draft token 1 ~ the q[0] the draft reports", {None: (counts, q0)}, alpha)
    report = CheckReport("draft_sampling", counts={"proposals": samples},
                         metrics={"chi2": f"{fit.stat:.1f}/{fit.critical:.1f} df {fit.df}", "tv": fit.tv})
    if not fit.passed:
        raise SpecVerifyFailure(
            f"the draft's tokens do not follow the q it reports ({samples} seeded proposals from seed {seed}, "
            f"false-alarm rate {alpha:g}) {where}; the loop's min(1, p/q) then biases every sampled output:\n"
            + fit.describe())
    if fit.df < 1:
        raise SpecVerifyFailure(f"q[0] puts (nearly) all its mass on one token at T={temperature} {where}; the check "
                                f"cannot tell a wrong q from a right one here (use a prompt or temperature with spread)")
    return report
