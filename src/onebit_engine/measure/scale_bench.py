"""The scale benchmark: plain decoding against the loop with an oracle draft, at a real model's size.

``run_scale_bench`` measures in one process, interleaved in a freshly shuffled order every repeat:

* plain greedy decoding at each thread count asked (its fastest is the reference);
* the loop at each thread count, its draft an :class:`~.oracle.OracleDraft` (the real draft's whole cost,
  the target's own tokens at the declared acceptance profile), output checked against plain decoding;
* a read stream at each thread count (``membw.ReadStream``): the machine's memory bandwidth now, the
  bound of a decode step that must read every weight;
* the backend's multiply-add rate at k + 1 rows (``roofline.MacRate``): the bound of a verify's compute.

* plain steps at the most threads, each right after a stream read (``paired_bound``): the bound of the
  moment each step ran in.

Figures: ``speedup_vs_plain`` (the fastest loop over the fastest plain decoding), ``plain_bound_share``
(the median over those steps of the step's read rate over the stream read just before it: a shared VM's
memory moves between ~30 and ~57 GB/s from one minute to the next, and a stream read in another minute
let plain decoding show 1.2x its "bound"), ``plain_bound_share_fastest_read`` (plain tokens/s over
``the run's fastest stream read / bytes one plain step reads``: the older, conservative figure), per-phase milliseconds,
tokens per round, the verify's passes (their rows by round, and ``verify_pass_ms``: the planner's last prices
by rows), ``identical_to_plain``, ``peak_rss_bytes``, ``huge_page_bytes``, and ``roofline``: the floors
of a verify and a draft round on this machine and the loop's ceiling over the plain decoding measured
(``roofline.ceilings``). A figure that could not be measured is None
with its reason, never NaN.
"""
from __future__ import annotations

import random
import resource
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ConfigError
from .membw import PROBE_BYTES, ReadStream, host_library, rate_probe, stream_gb_s
from .procfs import huge_page_bytes
from .oracle import OracleDraft, Profile
from .paired_bound import paired_share, paired_steps
from .roofline import MacRate, active_sum, ceilings, draft_round, linear_macs, verify_extra_bytes
from .walk import packed_bytes

STREAM_BYTES = 1 << 30  # well past any last-level cache
SCHEMA = "onebit.scale_bench/1"  # a scale benchmark result (cli.scale writes it, bench --compare refuses it)
STREAM_READS = 5  # timed reads of the stream per repeat; the fastest counts


def step_bytes(target) -> dict[str, int]:
    """Bytes one plain step reads: every projection's packed weights (``roofline.active_sum``: of a sparse
    block the router, the shared expert and top-k of its experts), the embedding row, and the delta-net
    states and KV caches it reads (``state`` at an empty context: the recurrent and conv states)."""
    weights = active_sum(target, packed_bytes)
    state = sum(int(getattr(s, "recurrent", np.zeros(0)).nbytes + getattr(s, "conv", np.zeros(0)).nbytes)
                for s in target.new_state().layers)
    row = target.config.hidden_size * 4
    return {"weights": weights, "state": state, "embedding_row": row, "total": weights + state + row}


def run_scale_bench(target, draft, prompt: Sequence[int], prof: Profile, *, k: int, max_new_tokens: int, repeats: int,
                    threads: Sequence[int], set_threads: Callable[[int], None], seed: int = 0,
                    progress: Callable[[int], None] | None = None, stream_bytes: int = STREAM_BYTES,
                    lazy_logits: bool = True, stages: "str | int" = "auto") -> dict[str, Any]:
    """Measure (see the module docstring); returns the ``results`` part of the JSON document.
    ``lazy_logits``: the loop's choice (``speculative_generate``): False where the lm_head streams from memory.
    ``stages``: the loop's verify passes (``loop/stages.py``); the loop in one pass of k + 1 rows is measured
    beside it (``loop_one``), interleaved the same way: what the passes buy, and the verify(k+1) figures."""
    from ..loop.generate import generate
    from ..loop.speculative import speculative_generate
    from ..loop.stages import StagePlanner

    if repeats < 1 or not threads:
        raise ConfigError(f"repeats={repeats} and threads={list(threads)}: need at least one repeat and one thread count")
    if max_new_tokens < k + 2:
        raise ConfigError(f"--max-new-tokens {max_new_tokens} leaves no room for a full round of k={k} drafts; give {k + 2} or more")
    set_threads(max(threads))
    truth = generate(target, prompt, max_new_tokens=max_new_tokens, stop_tokens=()).tokens  # warm-up and the oracle's truth
    oracle = OracleDraft(draft, truth, len(prompt), prof, target.config.vocab_size, seed=seed)
    plans = {t: StagePlanner(stages) for t in threads}  # a pass's time depends on the threads: one planner each
    loop = lambda t, one=False: speculative_generate(  # noqa: E731
        target, oracle, prompt, max_new_tokens=max_new_tokens, k=k, stop_tokens=(), lazy_logits=lazy_logits,
        stages="one" if one else plans[t])
    for t in sorted(threads, reverse=True):  # warm-up: the draft's compiled ops, first-touch memory, the planners
        set_threads(t)
        loop(t)
    set_threads(max(threads))
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # load + decode, before the stream's buffer
    huge = huge_page_bytes()  # the weights' share of huge pages (resources.huge_page_bytes says why it matters)
    buf = np.ones(stream_bytes, np.uint8)  # written once, so every page is backed
    lib = host_library(target.backend)  # the host-int library: its own read loop, on its own pool
    streams = {t: ReadStream(threads=t, buf=buf, native=lib) for t in threads}
    # the planners' probe of the memory's minute (loop/stages.py): a short read of the same buffer
    probes = {t: ReadStream(threads=t, buf=buf[:min(PROBE_BYTES, stream_bytes)], native=lib) for t in threads}
    for t in threads:
        plans[t].probe = rate_probe(probes[t])
    macs = MacRate(target.backend, k + 1, seed=seed)
    variants = [(kind, t) for t in threads for kind in ("plain", "loop", "loop_one", "stream", "compute")]
    variants.append(("paired", max(threads)))  # plain steps, each after a stream read: the bound of the same moment
    rates: dict = {v: [] for v in variants}
    rounds: dict = {(kind, t): [] for t in threads for kind in ("loop", "loop_one")}
    mismatches: list[dict] = []
    order_rng = random.Random(seed)
    for rep in range(repeats):
        order_rng.shuffle(variants)
        for kind, t in variants:
            set_threads(t)
            if kind == "compute":
                rates[(kind, t)].append(macs.gmac_s())
            elif kind == "paired":
                rates[(kind, t)].extend(paired_steps(target, prompt, truth[:-1], streams[t]))
            elif kind == "stream":
                s = streams[t]
                s.seconds()  # one untimed pass: the pool's threads awake, the buffer's pages hot in the TLB
                # a bound is the best the machine does: the fastest of a few reads (one 1 GiB read takes ~25 ms
                # and a shared VM's single reads scatter by 20%)
                rates[(kind, t)].append(stream_gb_s(s, STREAM_READS))
            elif kind == "plain":
                res = generate(target, prompt, max_new_tokens=max_new_tokens, stop_tokens=())
                rates[(kind, t)].append(res.tokens_per_s)
                if res.tokens != truth:
                    mismatches.append({"variant": f"plain, {t} threads", "repeat": rep})
            else:
                res = loop(t, one=kind == "loop_one")
                rates[(kind, t)].append(res.tokens_per_s)
                rounds[(kind, t)].extend(res.rounds)
                if res.tokens != truth:
                    first = next((i for i, (a, b) in enumerate(zip(res.tokens, truth)) if a != b), min(len(res.tokens), len(truth)))
                    mismatches.append({"variant": f"{kind}, {t} threads", "repeat": rep, "first_difference": first})
            if progress:
                progress(1)
    for s in list(streams.values()) + list(probes.values()):
        s.close()
    extra = verify_extra_bytes(target, prompt, truth[: k + 1])  # a sparse verify's experts, from real rows' routing
    out = _summarize(target, prof, k, threads, rates, rounds, mismatches, truth, draft, extra)
    out["verify_pass_ms"] = pass_prices(plans[out["loop_threads"]])
    out["peak_rss_bytes"], out["stream_buffer_bytes"], out["huge_page_bytes"] = peak_rss, stream_bytes, huge
    return out


def _median(xs) -> "float | None":
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    return float(np.median(xs)) if xs else None


def _summarize(target, prof, k, threads, rates, rounds, mismatches, truth, draft=None, verify_extra=0) -> dict[str, Any]:
    med = {f"{kind}_t{t}": _median(rates[(kind, t)]) for (kind, t) in rates if kind not in ("compute", "paired")}
    reasons: dict[str, str] = {}
    plain_t = max(threads, key=lambda t: med[f"plain_t{t}"] or 0.0)
    loop_t = max(threads, key=lambda t: med[f"loop_t{t}"] or 0.0)
    plain, spec = med[f"plain_t{plain_t}"], med[f"loop_t{loop_t}"]
    best = {t: max([x for x in rates[("stream", t)] if x is not None and np.isfinite(x)], default=None) for t in threads}
    stream = max((best[t] or 0.0) for t in threads) or None  # the fastest read of the run: a bound, not a typical rate
    sb = step_bytes(target)

    def ratio(num, den, key, why):
        if num is None or den is None or not den > 0:
            reasons[key] = why
            return None
        return float(num / den)

    step_ms = ratio(1e3, plain, "plain_step_ms", "plain decoding ran at 0 tokens/s")
    same_t_step = ratio(1e3, med[f"plain_t{loop_t}"], "plain_step_ms_at_loop_threads", "plain decoding ran at 0 tokens/s")
    rs, rs_one = rounds[("loop", loop_t)], rounds[("loop_one", loop_t)]
    mean = lambda xs: float(np.mean(xs)) if xs else None  # noqa: E731
    phase_means = lambda rr: {"draft": mean([r.draft_ms for r in rr]), "verify": mean([r.verify_ms for r in rr]),  # noqa: E731
                              "commit": mean([r.commit_ms for r in rr]), "round": mean([r.total_ms for r in rr])}
    phases = phase_means(rs)
    full = [r.verify_ms for r in rs_one if r.proposed == k]  # verify(k+1): the one-pass loop's full-width rounds
    bound = ratio(stream * 1e9 if stream else None, sb["total"], "bound_tokens_per_s", "no read stream measured")
    paired_t = max(threads)
    paired = paired_share(rates.get(("paired", paired_t), []), sb["total"])
    if paired is not None:
        paired["threads"] = paired_t
    else:
        reasons["plain_bound_share"] = "no plain step was paired with a stream read"
    gmac = {t: max(rates.get(("compute", t), []), default=None) for t in threads}  # the fastest, like the stream
    per_thread = max((gmac[t] / t for t in threads if gmac[t]), default=None)
    tokens_per_round = mean([r.emitted for r in rs])
    roof = None
    if draft is not None:
        roof = ceilings(k=k, step_macs=active_sum(target, linear_macs), step_bytes=sb["total"],
                        draft_macs=draft_round(draft, linear_macs), draft_bytes=draft_round(draft, packed_bytes),
                        gmac_s=per_thread * loop_t if per_thread else None, stream_gb_s=stream, tokens_per_round=tokens_per_round,
                        plain_tokens_per_s=plain, plain_step_ms=same_t_step, verify_bytes=sb["total"] + verify_extra,
                        keep=prof.keep)
        if spec and roof.get("loop_ceiling_vs_plain"):
            roof["speedup_share_of_ceiling"] = spec / plain / roof["loop_ceiling_vs_plain"]
    return {
        "speedup_vs_plain": ratio(spec, plain, "speedup_vs_plain", "plain decoding ran at 0 tokens/s"),
        "plain_tokens_per_s": plain, "loop_tokens_per_s": spec,
        "plain_threads": plain_t, "loop_threads": loop_t,
        "tokens_per_s": med,
        "read_stream_gb_s": {t: med[f"stream_t{t}"] for t in threads},  # medians over the repeats
        "read_stream_gb_s_max": best,  # the bound's stream
        "plain_step_bytes": sb,
        "bound_tokens_per_s": bound,
        "plain_bound_share": paired["share"] if paired else None,  # each step over the stream read just before it
        "plain_bound_paired": paired,
        "plain_bound_share_fastest_read": ratio(plain, bound, "plain_bound_share_fastest_read", "no bound"),
        "plain_stream_gb_s": plain * sb["total"] / 1e9 if plain else None,
        "plain_step_ms": step_ms,
        "phase_ms": {**phases, "plain_step": same_t_step},
        "speedup_one_pass_vs_plain": ratio(med[f"loop_one_t{loop_t}"], plain, "speedup_one_pass_vs_plain",
                                           "plain decoding ran at 0 tokens/s"),
        "phase_ms_one_pass": phase_means(rs_one),
        "verify_passes": _pass_counts(rs),
        "verify_over_plain_step": ratio(mean(full), same_t_step, "verify_over_plain_step",
                                        "no full-width round or no plain step"),
        "verify_full_ms": {"mean": mean(full), "median": _median(full), "rounds": len(full)},  # the ratio is the mean's
        "draft_over_plain_step": ratio(phases["draft"], same_t_step, "draft_over_plain_step", "no round or no plain step"),
        "tokens_per_round": tokens_per_round,
        "multiply_add_gmac_s": gmac,  # the backend's GEMM at k + 1 rows, cache-resident weight: fastest of the run
        "roofline": roof,
        "expected_tokens_per_round": prof.expected_tokens(),
        "acceptance_by_position": _by_position(rs, k),
        "rounds": len(rs),
        "identical_to_plain": not mismatches, "mismatches": mismatches,
        "generated_tokens": len(truth), "distinct_generated_tokens": len(set(truth)),
        **({"null_reasons": reasons} if reasons else {}),
    }


def pass_prices(plan) -> dict[str, dict]:
    """The loop's planner's last price of a verify pass, by its rows (the price it chose with: the median of its
    fresh passes, else its newest one, ``loop/stages.py``) and how many passes it keeps. Rows never run are absent."""
    return {str(r): {"median_ms": plan.cost_ms(r), "passes": len(v)} for r, v in sorted(plan.costs.items())}


def _pass_counts(rounds) -> dict[str, int]:
    """How the loop's rounds split their verify: "4+4" -> rounds that ran a pass of 4 rows, then one of 4."""
    out: dict[str, int] = {}
    for r in rounds:
        key = "+".join(map(str, r.passes)) or str(r.proposed + 1)
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _by_position(rounds, k: int) -> list:
    out = []
    for i in range(k):
        asked = [r for r in rounds if r.proposed > i]
        out.append(sum(r.accepted > i for r in asked) / len(asked) if asked else None)
    return out


def timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
