"""Reference agreement: the port computes the model it claims to.

Every other check compares the port with itself (verify against its own steps, decode against its own
prefill), so a port that computes a *different* model - a rotary layout, a norm or a gate off by a little
- passes them all. This check loads the checkpoint on ``onebit_engine``'s ``reference`` backend (float32
numpy, written from the published model code) and, over the battery's prompts, compares the port's logits
with it: every prefill row, then ``max_new_tokens`` greedy steps (both sides fed the reference's token).
The logits must agree within the port's profile (``Tolerance.for_reference``: its ``reference`` bound
when it declares one, else the kind ``"reference"``, else its own bound); a greedy token may differ only at
a near-tie of the reference (the port's pick within twice the bound at that row of the reference's top, or
within the profile's ``tie_margin``). In a mixture-of-experts model a row whose router chose its experts at a
near-tie (the gap between the last chosen and the first unchosen router logit within twice the bound) may
route to another expert in a port that rounds otherwise - a different output for that row, and for the
rows after it that read it - so the comparison stops before such a row and notes it (a bitwise port must
route it the same).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from .compare import logit_margin
from .failure import SpecVerifyFailure, bound_text
from .measure import record
from .owned import owned_outputs
from .report import CheckReport
from .tolerance import Tolerance

KIND = "reference"


def _forward(ref, tokens, state):
    """``ref.forward`` and its sparse layers' routing margins per row (float64 [T, 2]: the router-logit gap at
    the top-k boundary and the boundary logit's magnitude, the smallest-gap layer's), or None without MoE."""
    import numpy as np

    from onebit_engine.hybrid.moe_mlp import sparse_blocks

    blocks = sparse_blocks(ref)
    for b in blocks:
        b.margins = []
    try:
        out = ref.forward(tokens, state)
        per = [np.concatenate(b.margins) for b in blocks]  # each [T, 2]: one call per row chunk, rows in order
    finally:
        for b in blocks:
            b.margins = None
    if not per:
        return out, None
    stack = np.stack(per)  # [layers, T, 2]
    worst = np.argmin(stack[:, :, 0], axis=0)
    return out, stack[worst, np.arange(stack.shape[1])]


def _first_routing_tie(margins, atol: float, rtol: float, exact: bool):
    """(row, gap, bound) of the first row routed at a near-tie, or None."""
    import numpy as np

    if margins is None or exact:
        return None
    bound = 2 * (atol + rtol * margins[:, 1])
    tied = np.flatnonzero(margins[:, 0] <= bound)
    return None if tied.size == 0 else (int(tied[0]), float(margins[tied[0], 0]), float(bound[tied[0]]))


@lru_cache(maxsize=4)
def load_reference(path: str):
    """The checkpoint at ``path`` on the engine's float32 reference backend (loaded once per path)."""
    from onebit_engine import load_target

    return load_target(path, backend="reference")


def reference_agreement(port, prompts: Sequence[Sequence[int]], *, reference: str, tol: Tolerance,
                        max_new_tokens: int = 8) -> CheckReport:
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    ref = load_reference(str(reference))
    rtol_ = tol.for_reference()
    if int(ref.config.vocab_size) != int(port.vocab_size):
        raise SpecVerifyFailure(f"the reference at {reference} has a vocabulary of {ref.config.vocab_size}, the port "
                                f"{port.vocab_size}: they are not the same model")
    report = CheckReport("reference_agreement", metrics={"reference": str(reference), "prompts": len(prompts)})
    worst = (0.0, 0.0)  # (share of the bound, max |diff|)
    for n, prompt in enumerate(prompts):
        prompt = [int(t) for t in prompt]
        st, rst = port.new_state(), ref.new_state()
        atol, rtol = rtol_.bounds(KIND)
        got = np.asarray(port.prefill(st, prompt).logits, np.float64)
        out, margins = _forward(ref, prompt, rst)
        want = np.asarray(out.logits, np.float64)
        text = []  # the tokens so far after the prompt
        for step in range(max_new_tokens + 1):
            where = (f"prompt {n} ({len(prompt)} tokens{', then greedy ' + str(text) if text else ''}), "
                     f"{'prefill' if step == 0 else f'greedy step {step}'}")
            if got.shape != want.shape:
                raise SpecVerifyFailure(f"{where}: the port's logits have shape {got.shape}, the reference's {want.shape}")
            routed = _first_routing_tie(margins, atol, rtol, rtol_.exact)
            if routed is not None:
                row, gap, bound = routed
                report.notes.append(f"{where}: the reference routes position {len(prompt) - len(want) + row + len(text)} "
                                    f"at a near-tie of its router (gap {gap:.3e} <= {bound:.3e}); rows from there on "
                                    f"and the rest of this prompt skipped")
                report.counts["routing_ties"] += 1
                got, want = got[:row], want[:row]
            j = rtol_.judge(got, want, KIND) if len(want) else None
            if j is None:
                break
            if not j.within:
                row, tok = np.unravel_index(int(np.argmax(np.abs(got - want))), got.shape)
                pos = len(prompt) - len(got) + int(row) + len(text)
                raise SpecVerifyFailure(
                    f"{where}: the port's logits differ from the float32 reference model ({reference}) at position "
                    f"{pos}, token {int(tok)}: port {got[row, tok]:.6g} vs reference {want[row, tok]:.6g}; "
                    + bound_text(j.max_diff, j.bound, "max |diff|", rtol_.name, rtol_.exact)
                    + "\n  the port computes another model: look at the rotary layout and its positions, the norms "
                      "(eps, the 1 + w convention), the gates, the weight layout the port loaded")
            record(KIND, j)
            worst = max(worst, (j.share, j.max_diff))
            if step == max_new_tokens or routed is not None:
                break
            mine, theirs = int(np.argmax(got[-1])), int(np.argmax(want[-1]))
            if mine != theirs:
                top, second, gap = logit_margin(want[-1])
                tie = max(rtol_.tie_margin, 0.0 if rtol_.exact else 2 * (atol + rtol * abs(float(want[-1, top]))))
                behind = float(want[-1, top] - want[-1, mine])  # how far the port's pick is behind the reference's
                if behind <= tie:
                    report.notes.append(f"{where}: greedy token {mine} vs the reference's {theirs} at a near-tie (the "
                                        f"reference has it {behind:.3e} behind its top, <= {tie:.3e}); the rest of this "
                                        f"prompt skipped")
                    break
                raise SpecVerifyFailure(
                    f"{where}: the port's greedy token is {mine}, the reference's {theirs}; the reference puts {mine} "
                    f"{behind:.3e} behind its top (top-2 gap {gap:.3e}: top {top}, runner-up {second}), more than the "
                    f"near-tie bound {tie:.3e} of profile {rtol_.name!r}: the port computes another model")
            text.append(theirs)
            got = np.asarray(port.step(st, theirs).logits, np.float64)[-1:]
            out, margins = _forward(ref, [theirs], rst)
            want = np.asarray(out.logits, np.float64)[-1:]
        report.counts["prompts"] += 1
        report.counts["rows"] += len(prompt) + len(text)
    report.metrics.update(max_abs_logit_diff=worst[1], share_of_bound=worst[0])
    return report
