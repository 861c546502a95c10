"""The deterministic checks. Each takes a port (``protocol.SpecPort``) and raises
``SpecVerifyFailure`` with a readable message, or returns a ``CheckReport`` saying what ran.

No pytest here: the plugin's fixtures hand these out bound to the run's options.
"""
from __future__ import annotations

import weakref
from collections import Counter
from typing import Sequence

from .compare import first_logit_difference, first_state_difference, first_token_divergence, logit_margin
from .drafts import AuditedDraft, ForcingDraft, SelfDraft, cycle_script
from .failure import SpecVerifyFailure, margin_text, round_of, rows_label, token_window
from .owned import owned_outputs, unwrapped
from .protocol import NotSupported, require_loop_k
from .report import CheckReport
from .tolerance import Tolerance


_PLAIN = weakref.WeakKeyDictionary()  # port -> {(prompt, n): its plain greedy tokens}


def plain_greedy(port, prompt: Sequence[int], n: int) -> list[int]:
    """``port.generate(prompt, n)`` at T = 0, remembered per port for the same prompt and n (forced
    acceptance asks for the same text once per commit path)."""
    real = unwrapped(port)
    key = (tuple(int(t) for t in prompt), int(n))
    try:
        memo = _PLAIN.setdefault(real, {})
    except TypeError:  # a port that cannot be weakly referenced: no memo
        return list(port.generate(list(prompt), max_new_tokens=n))
    if key not in memo:
        memo[key] = list(port.generate(list(prompt), max_new_tokens=n))
    return list(memo[key])


def argmax(logits) -> int:
    """The token a row of logits picks greedily (a Python int)."""
    import numpy as np

    return int(np.argmax(np.asarray(logits)))



def require_independent_states(port, prompt: Sequence[int], tol: Tolerance) -> None:
    """The state comparisons must be able to fail. Two states from ``new_state()`` must not share storage:
    every check keeps a state and its sequential reference side by side, and with shared caches each
    comparison would read the same memory twice and pass whatever the port did. And ``state_arrays``
    must expose the live state: not nothing, and not arrays that stay the same when the state advances.
    Probe: prefill a state, prefill a second one with other tokens, step the first; it must step to what
    prefill + step on a fresh state gives, and its arrays must have changed with the step."""
    __tracebackhide__ = True
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    prompt = list(prompt)
    other = [(t + 1) % port.vocab_size for t in prompt]
    a, b = port.new_state(), port.new_state()
    port.prefill(a, prompt)
    before = port.state_arrays(a)
    if not before:
        raise SpecVerifyFailure("state_arrays() returned no arrays, so no state comparison could ever fail; return "
                                "every live array of the state by name (KV cut to its length, conv and recurrent state)")
    port.prefill(b, other)
    got = np.asarray(port.step(a, prompt[0]).logits)[-1]
    after = port.state_arrays(a)
    if set(after) == set(before) and all(np.shape(after[n]) == before[n].shape and np.array_equal(after[n], before[n])
                                         for n in before):
        raise SpecVerifyFailure(f"state_arrays() returned the same arrays ({sorted(before)[:4]}...) before and after a "
                                f"step: they do not show the live state, so no state comparison could fail")
    fresh = port.new_state()
    port.prefill(fresh, prompt)
    bad = first_logit_difference(got, np.asarray(port.step(fresh, prompt[0]).logits)[-1], tol)
    if bad:
        raise SpecVerifyFailure(
            f"new_state() does not give independent states: after a second state was prefilled with other tokens, "
            f"the first one's next step differs from prefill + step on a fresh state ({bad}). Every check keeps a "
            f"state and its sequential reference side by side, so with shared caches its comparisons would read the "
            f"same memory twice; give each state its own storage")


def commit_round(port, prompt: Sequence[int], rows: Sequence[int], kept: int, path: str, nxt: int, tol: Tolerance,
                 where: str, hint: str = ""):
    """One verify of ``rows`` after ``prefill(prompt)``, a commit of ``kept`` rows on ``path``, then one
    step with ``nxt``, against a fresh ``prefill(prompt)`` plus single steps of the kept rows: the kept
    rows' verify logits, the state after the commit and after the step, and that step's logits must
    agree. Returns the verify's logits (every row, for the caller's own row checks)."""
    __tracebackhide__ = True
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    st = port.new_state()
    port.prefill(st, prompt)
    ver = np.asarray(port.verify(st, rows, path=path).logits)
    port.commit(st, kept, path=path)
    ref = port.new_state()
    port.prefill(ref, prompt)
    for i, t in enumerate(rows[:kept]):
        bad = first_logit_difference(ver[i], np.asarray(port.step(ref, t).logits)[-1], tol)
        if bad:
            raise SpecVerifyFailure(f"{where}: verify row {i} (token {t}) logits differ from the single step's ({bad}) - "
                                    f"the batched pass is not row-for-row the plain step{hint}")
    bad = first_state_difference(port.state_arrays(st), port.state_arrays(ref), tol)
    if bad:
        raise SpecVerifyFailure(f"{where}: after the commit, {bad}{hint}")
    got = np.asarray(port.step(st, nxt).logits)[-1]
    want = np.asarray(port.step(ref, nxt).logits)[-1]
    bad = first_state_difference(port.state_arrays(st), port.state_arrays(ref), tol)
    if bad:
        raise SpecVerifyFailure(f"{where}: after one more step with token {nxt}, {bad}{hint}")
    bad = first_logit_difference(got, want, tol)
    if bad:
        raise SpecVerifyFailure(f"{where}: the next step's logits differ from the sequential reference ({bad}; argmax "
                                f"{argmax(got)} vs {argmax(want)}){hint}")
    return ver


# -- 1. commit equivalence ----------------------------------------------------------------------
def commit_equivalence(port, prompt: Sequence[int], k_values: Sequence[int], tol: Tolerance, *, seed: int = 0,
                       paths: Sequence[str] | None = None) -> CheckReport:
    """prefill, one verify of ``[last, d1..dk]``, commit of every row count 0..k+1 on every commit
    path, then one step; the state (after the commit and after the step) and the step's logits must
    equal prefill + the same rows as single steps. Also: every verify row's logits equal the single
    step's."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    rng = np.random.default_rng(seed)
    report = CheckReport("commit_equivalence")
    paths = list(paths or port.commit_paths)
    prompt = list(prompt)
    require_independent_states(port, prompt, tol)
    for k in k_values:
        probe = port.new_state()
        last = argmax(port.prefill(probe, prompt).logits[-1])
        rows = [last] + [int(t) for t in rng.integers(0, port.vocab_size, size=k)]
        # sequential reference: prefill + r single steps, for every r (fresh state each time, no clone needed)
        ref_logits = []
        st = port.new_state()
        port.prefill(st, prompt)
        for t in rows:
            ref_logits.append(np.asarray(port.step(st, t).logits)[-1])
        bonus = argmax(ref_logits[k])
        for path in paths:
            for r in range(k + 2):
                shape = f"[last, d1..d{k}]" if k else "[last]"
                where = f"commit path {path!r}, k={k}, rows {shape} = {rows}, kept {r} rows ({rows_label(r, k)})"
                ver = commit_round(port, prompt, rows, r, path, rows[r] if r <= k else bonus, tol, where)
                report.counts[(path, k, r)] += 1
            for i in range(k + 1):
                bad = first_logit_difference(ver[i], ref_logits[i], tol)
                if bad:
                    raise SpecVerifyFailure(f"commit path {path!r}, k={k}: verify row {i} (token {rows[i]}) logits differ "
                                            f"from the single step's ({bad}) - the batched pass is not row-for-row the plain step")
    expected = sum((k + 2) * len(paths) for k in k_values)
    if sum(report.counts.values()) != expected:
        raise SpecVerifyFailure(f"commit_equivalence ran {sum(report.counts.values())} commits, expected {expected}")
    return report


# -- 2. greedy identity ---------------------------------------------------------------------------

def check_bookkeeping(run, k: int, label: str = "") -> None:
    """What a SpecRun reports must be possible: 0 <= accepted <= proposed <= k each round, and the
    recorded rounds must fit in the tokens emitted (accepted + 1 per round; only the last round may be
    cut by max_new_tokens; the prefill's token and zero-draft rounds left out only add tokens, so the
    prefill's token is not counted, for loops whose first token comes from a round). Acceptance rate and
    tokens per round are computed from these counts, so a loop that over-reports them (the bonus counted
    as an accepted draft, say) reports speed it does not have."""
    __tracebackhide__ = True
    if len(run.accepted) != len(run.proposed):
        raise SpecVerifyFailure(f"{label}the loop reports {len(run.accepted)} accepted counts but {len(run.proposed)} proposed counts")
    for j, (a, n) in enumerate(zip(run.accepted, run.proposed)):
        if not 0 <= a <= n <= k:
            raise SpecVerifyFailure(f"{label}round {j}: the loop reports {a} of {n} drafts accepted at k={k}; each round "
                                    f"needs 0 <= accepted <= proposed <= k")
    if run.accepted:
        need = sum(a + 1 for a in run.accepted[:-1]) + 1
        if need > len(run.tokens):
            raise SpecVerifyFailure(
                f"{label}the loop's round counts do not fit its output: {len(run.accepted)} rounds with accepted counts "
                f"{list(run.accepted)[:12]} emit at least {need} tokens (accepted + 1 per round, the last round at "
                f"least 1), but it returned {len(run.tokens)}; acceptance rate and tokens per round are over-reported "
                f"(is the bonus token counted as an accepted draft?)")


def greedy_identity(port, prompt: Sequence[int], draft, *, max_new_tokens: int, k: int, tol: Tolerance,
                    commit_path: str | None = None, plain: Sequence[int] | None = None, label: str = "") -> CheckReport:
    """Speculative greedy output == plain greedy output of the same port. A divergence fails unless
    the profile is not exact and the plain logits' top-2 margin there is a near-tie."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    require_loop_k(port, k)
    report = CheckReport("greedy_identity")
    plain = list(plain) if plain is not None else list(port.generate(prompt, max_new_tokens=max_new_tokens))
    run = port.speculative_generate(prompt, draft, max_new_tokens=max_new_tokens, k=k, commit_path=commit_path)
    got = list(run.tokens)
    check_bookkeeping(run, k, label)
    report.metrics.update(acceptance_rate=run.acceptance_rate, tokens_per_round=run.tokens_per_round,
                          rounds=len(run.accepted), tokens=len(got))
    report.counts.update(Counter(run.accepted))
    i = first_token_divergence(got, plain)
    if i is None:
        return report
    if i < min(len(got), len(plain)):
        st = port.new_state()
        logits = np.asarray(port.prefill(st, list(prompt) + plain[:i]).logits)[-1]
        top, second, gap = logit_margin(logits)
        margin = margin_text(logits, top, second, gap)
        if not tol.exact and gap <= tol.tie_margin and got[i] in (top, second):
            report.notes.append(f"{label}near-tie divergence at token {i} accepted under profile {tol.name!r}: {margin}")
            return report
    else:
        margin = f"lengths differ: speculative {len(got)} tokens, plain {len(plain)}"
    raise SpecVerifyFailure(
        f"{label}speculative output differs from plain greedy decoding at token {i} of {len(plain)}, in "
        f"{round_of(run, i)}\n{token_window(got, plain, i)}\n  {margin}\n"
        f"  k={k}, commit path {commit_path!r}, acceptance {run.acceptance_rate:.2f}, rounds (accepted/proposed): "
        f"{list(zip(run.accepted, run.proposed))[:12]}")


def greedy_acceptance(port, prompts: Sequence[Sequence[int]], draft, *, k: int, max_new_tokens: int,
                      commit_path: str | None = None) -> CheckReport:
    """Greedy identity's power: over the prompts, the draft must get at least one draft accepted. A draft
    that never matches only exercises rejections (every round keeps [last] and the bonus), so identity
    with plain decoding says nothing about accepted rows. A port whose draft may legitimately never match
    opts out with ``draft_may_never_match = True`` (a visible skip)."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    require_loop_k(port, k)
    if getattr(port, "draft_may_never_match", False):
        raise NotSupported(f"port {getattr(port, 'name', port)!r} declares draft_may_never_match = True: greedy identity "
                           f"is not required to see accepted drafts (forced_acceptance still checks accepted rows)")
    report = CheckReport("greedy_acceptance")
    per_prompt = []
    for prompt in prompts:  # until one draft is accepted: that is all this check asks
        run = port.speculative_generate(list(prompt), draft, max_new_tokens=max_new_tokens, k=k, commit_path=commit_path)
        check_bookkeeping(run, k)
        per_prompt.append((sum(run.accepted), sum(run.proposed)))
        report.counts.update(Counter(run.accepted))
        if per_prompt[-1][0]:
            break
    accepted, proposed = sum(a for a, _ in per_prompt), sum(n for _, n in per_prompt)
    report.metrics.update(accepted=accepted, proposed=proposed, acceptance_rate=accepted / proposed if proposed else 0.0,
                          prompts=len(per_prompt), prompts_given=len(prompts))
    if accepted == 0:
        name = getattr(draft, "name", None) or type(draft).__name__
        raise SpecVerifyFailure(
            f"the draft {name} of port {getattr(port, 'name', port)!r} got no draft accepted over {len(per_prompt)} "
            f"prompts (acceptance 0 of {proposed} proposed, k={k}, {max_new_tokens} tokens a prompt; per prompt "
            f"accepted/proposed {per_prompt[:10]}): greedy identity then only saw rejections and says nothing about "
            f"accepted rows. Give the port a draft that matches sometimes (a trained draft, an n-gram draft over the "
            f"prompt), or declare draft_may_never_match = True on the port to opt out")
    return report


# -- forcing draft and self-draft -----------------------------------------------------------------
def default_pattern(k: int) -> list[int]:
    """Full, zero, full, full (a repeated full accept), then every partial count 1..k-1."""
    return [k, 0, k, k] + list(range(1, k))


def forced_acceptance(port, prompt: Sequence[int], *, k: int, tol: Tolerance, pattern: Sequence[int] | None = None,
                      commit_path: str | None = None, cycles: int = 2) -> CheckReport:
    """Runs the port's loop with a :class:`ForcingDraft`: each round must accept exactly the scripted
    count, the output must be plain greedy, the draft must get the right anchor and context rows, and
    every accept count in the pattern (incl. 0 and the full k) must actually have happened."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    require_loop_k(port, k)
    if k == 0:
        return _zero_draft_loop(port, prompt, tol=tol, commit_path=commit_path)
    pattern = list(pattern if pattern is not None else default_pattern(k))
    max_new = 1 + cycles * sum(min(p, k) + 1 for p in pattern)
    plain = plain_greedy(port, prompt, max_new + k + 1)
    seq = list(prompt) + plain
    taps = port.prefill(port.new_state(), seq).taps
    same = (lambda a, b: tol.close(np.asarray(a), np.asarray(b), "taps")) if taps is not None else None
    draft = ForcingDraft(seq, port.vocab_size, cycle_script(pattern), reference_taps=taps, same_taps=same, nearest=not tol.exact,
                         prompt_length=len(prompt))
    run = port.speculative_generate(prompt, draft, max_new_tokens=max_new, k=k, commit_path=commit_path)
    report = CheckReport("forced_acceptance", metrics={"acceptance_rate": run.acceptance_rate, "tokens_per_round": run.tokens_per_round})
    # a port without taps has no context rows to check: said in the report, not warned (nothing is missing)
    report.metrics["context_rows_checked"] = taps is not None
    i = first_token_divergence(list(run.tokens), plain[:max_new])
    if i is not None:
        seen = ("\n  then the draft saw (a consequence):\n    " + "\n    ".join(draft.problems[:2])) if draft.problems else ""
        raise SpecVerifyFailure(
            f"with a forcing draft (pattern {pattern}, k={k}) the output differs from plain greedy at token {i}, in "
            f"{round_of(run, i)}\n{token_window(list(run.tokens), plain[:max_new], i)}{seen}")
    if draft.problems:
        raise SpecVerifyFailure("the output is right but the loop fed the forcing draft wrong inputs:\n  " + "\n  ".join(draft.problems))
    if len(run.accepted) != len(draft.expected):
        raise SpecVerifyFailure(f"the loop reported {len(run.accepted)} rounds but asked the draft {len(draft.expected)} times")
    pos = 1  # the round's first token's index in the output (tokens[0] comes from the prefill)
    for j, (a, n, want, asked) in enumerate(zip(run.accepted, run.proposed, draft.expected, draft.asked)):
        # a loop may use fewer drafts than it asked for where the round would pass max_new_tokens, not elsewhere
        cut = pos + asked + 1 > max_new
        if n > asked or (n != asked and not cut):
            raise SpecVerifyFailure(f"round {j}: the loop reports {n} proposed drafts but asked the draft for {asked} "
                                    f"(pattern {pattern}, k={k}, round starting at output token {pos} of {max_new}); its "
                                    f"acceptance rate and tokens per round are misreported")
        if a != min(want, n):
            raise SpecVerifyFailure(f"round {j}: the loop reports {a} accepted drafts but the forcing draft made exactly "
                                    f"{min(want, n)} of the {n} it used acceptable (pattern {pattern}, k={k}); the output is "
                                    f"right, so its acceptance rule or its count of accepted drafts is wrong")
        pos += a + 1
    report.counts.update(Counter(run.accepted))
    full = sum(1 for a, n in zip(run.accepted, run.proposed) if a == n == k)
    missing = [a for a in sorted(set(min(p, k) for p in pattern)) if report.counts[a] == 0]
    if missing or full == 0:
        raise SpecVerifyFailure(f"the paths this check claims to test never ran: accept counts {missing} never happened"
                                f" (full accepts at k={k}: {full}); counts seen {dict(report.counts)}")
    report.metrics["full_accepts"] = full
    return report


def _zero_draft_loop(port, prompt, *, tol: Tolerance, commit_path: str | None, max_new: int = 12) -> CheckReport:
    """The loop at k = 0: every round proposes nothing, verifies ``[last]`` and keeps it, so the output is
    plain greedy decoding, every recorded round reports 0 of 0, and the draft (if asked at all) gets the
    right anchor and context rows. A loop that steps the anchor on a fast path and then also verifies
    and commits it advances its state twice per round: its output leaves plain greedy at once."""
    __tracebackhide__ = True
    import numpy as np

    plain = plain_greedy(port, prompt, max_new + 2)
    seq = list(prompt) + plain
    taps = port.prefill(port.new_state(), seq).taps
    same = (lambda a, b: tol.close(np.asarray(a), np.asarray(b), "taps")) if taps is not None else None
    draft = ForcingDraft(seq, port.vocab_size, cycle_script([0]), reference_taps=taps, same_taps=same, nearest=not tol.exact,
                         prompt_length=len(prompt))
    try:
        run = port.speculative_generate(prompt, draft, max_new_tokens=max_new, k=0, commit_path=commit_path)
    except ValueError as exc:  # a loop that refuses k = 0 outright (e.g. a ConfigError): say so, as min_k would
        raise NotSupported(f"port {getattr(port, 'name', port)!r}: its loop refuses k = 0 ({type(exc).__name__}: {exc}), "
                           f"so the loop is not checked at k = 0 (declare min_k = 1 to say so up front)") from exc
    i = first_token_divergence(list(run.tokens), plain[:max_new])
    if i is not None:
        raise SpecVerifyFailure(
            f"at k = 0 (no drafts: each round verifies [last] and keeps it) the loop's output differs from plain greedy "
            f"at token {i}, in {round_of(run, i)}, commit path {commit_path!r}\n{token_window(list(run.tokens), plain[:max_new], i)}"
            f"\n  (does a zero-draft round advance the state twice, e.g. a fast-path step of the anchor and then a "
            f"verify + commit of it too?)")
    check_bookkeeping(run, 0, "k=0: ")
    if draft.problems:
        raise SpecVerifyFailure("at k = 0 the output is right but the loop fed the draft wrong inputs:\n  " + "\n  ".join(draft.problems))
    report = CheckReport("forced_acceptance", metrics={"rounds": len(run.accepted), "tokens": len(run.tokens)})
    report.counts.update(Counter(run.accepted))
    return report


def self_draft_accepts_all(port, prompt: Sequence[int], *, k: int, max_new_tokens: int, tol: Tolerance,
                           commit_path: str | None = None) -> CheckReport:
    """Draft == target: at T = 0 every draft is accepted (exact ports) and the output is plain greedy."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    draft = SelfDraft(port, prompt)
    report = greedy_identity(port, prompt, draft, max_new_tokens=max_new_tokens, k=k, tol=tol,
                             commit_path=commit_path, label="self-draft: ")
    rate = report.metrics["acceptance_rate"]
    floor = 1.0 if tol.exact else 0.9
    if rate < floor:
        raise SpecVerifyFailure(f"self-draft (draft == target) acceptance {rate:.3f} is below {floor} (profile {tol.name!r}); "
                                f"the verify rows or the acceptance rule disagree with the draft's own steps")
    if report.counts.get(k, 0) == 0:
        raise SpecVerifyFailure(f"self-draft never produced a full accept of k={k} (counts {dict(report.counts)})")
    report.name = "self_draft"
    return report


def draft_consistency(port, prompt: Sequence[int], *, k: int, max_new_tokens: int, tol: Tolerance,
                      commit_path: str | None = None) -> CheckReport:
    """The port's own draft, driven by the port's own greedy loop, proposes at every round what a fresh
    draft state given the same context (the same ``append_context`` calls, no ``propose``) proposes:
    propose must not leave anything behind (its block's K/V, a moved position) that later rounds see.
    Such a bug keeps the output right and only costs acceptance, so no output check can see it."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    same = None if tol.exact else (lambda a, b: tol.close(np.asarray(a), np.asarray(b), "q"))
    audit = AuditedDraft(port.make_draft(), same_q=same)
    run = port.speculative_generate(prompt, audit, max_new_tokens=max_new_tokens, k=k, commit_path=commit_path)
    if audit.problems:
        raise SpecVerifyFailure(
            f"the draft's proposals depend on its earlier proposals ({len(audit.problems)} of {audit.checked} rounds; "
            f"k={k}, commit path {commit_path!r}); propose() must leave the draft state as it found it:\n  "
            + "\n  ".join(audit.problems[:3]))
    if audit.checked < 2:
        raise SpecVerifyFailure(f"the loop asked the draft {audit.checked} times in {max_new_tokens} tokens at k={k}; "
                                f"the check needs at least 2 greedy proposals")
    return CheckReport("draft_consistency", counts=Counter(run.accepted),
                       metrics={"proposals_checked": audit.checked, "acceptance_rate": run.acceptance_rate})
