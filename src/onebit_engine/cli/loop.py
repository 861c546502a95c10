"""``onebit loop``: the speculative loop on a pair, its configuration chosen (or reused) for this machine,
checked against plain greedy decoding, and a verdict on whether speculation paid here and why."""
from __future__ import annotations

from ..errors import ConfigError
from ..measure import regime as regime_mod
from ..measure import tune
from ..measure.regime import lazy_logits
from . import loop_report, models, prepare, tuning, ui
from .decode import Counted, no_rate, text
from .status import Status

SPEED_REPEATS = 3


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def cmd_loop(args) -> int:
    from ..loop.generate import generate
    from ..loop.speculative import speculative_generate
    from ..measure.provenance import loop_provenance

    if args.check is None:  # default: check (and show the speedup) whenever identity is the claim
        args.check = args.temperature == 0
    if args.check and args.temperature > 0:
        raise ConfigError(f"--check needs --temperature 0 (got {args.temperature}): only greedy speculative decoding is "
                          f"token-for-token plain decoding; sampled runs agree in distribution, not in tokens")
    if args.retune and args.k is not None and args.threads is not None:  # else the flag would do nothing, silently
        raise ConfigError(f"--retune has nothing to measure: --k {args.k} and --threads {args.threads} fix the loop's "
                          f"configuration; drop --retune, or leave --k or --threads open for the loop to measure")
    if args.k is not None or isinstance(args.verify_stages, int):  # refused with this draft's range before anything loads
        block = models.draft_block(args)
        if args.k is not None:
            models.check_k(args.k, block)
        models.check_stages(args.verify_stages, args.k, block)
    seed = models.sampling_seed(args)
    status = Status(args)
    loaded, prompt = prepare.prepare(args, status, need_draft=True)
    # Plain decoding at its fastest: one row, no padding. A backend that pads needs a row set 1 target.
    plain_target = loaded.target if loaded.target.row_invariant else models.load(args, need_draft=False, row_set=1).target
    threads = tune.Threads(loaded.target, loaded.draft, plain_target)
    plan = tuning.plan(args, loaded, plain_target, prompt, threads, store=models.cache_dir() / "tuned",
                       retune=args.retune, status=status)
    threads.set(plan.spec_threads)
    fallback = None if args.fallback == "none" else args.fallback
    # one planner for the run and the check's timed runs (its measurements carry over); it probes the memory's
    # minute where the weights stream
    here = regime_mod.regime(loaded.target, loaded.draft)
    stages = regime_mod.planner_for(args.verify_stages, here, loaded.target.backend, plan.spec_threads)
    status.say(f"decoding {args.max_new_tokens} tokens with the loop (k={plan.k}, {plan.spec_threads} "
               f"thread{'s' * (plan.spec_threads > 1)})")
    with ui.Bar(args.max_new_tokens, "loop", ui.progress_enabled(args)) as bar:
        draft = Counted(loaded.draft, "propose", bar) if bar.enabled else loaded.draft
        res = speculative_generate(
            loaded.target, draft, prompt, max_new_tokens=args.max_new_tokens, k=plan.k, temperature=args.temperature,
            fallback=fallback, commit_path=args.commit_path, replay_check=args.replay_check, seed=seed,
            lazy_logits=lazy_logits(loaded.target), stages=stages,
        )
    # the run's provenance, read right after it (the backends' event counts are the loop's, not the check's)
    run = loop_provenance(loaded.target, loaded.draft, k=plan.k, commit_path=args.commit_path, temperature=args.temperature,
                          fallback=fallback, verify_stages=args.verify_stages)
    check = None
    if args.check:
        with status.stage(f"checking against plain greedy decoding, then timing both ({SPEED_REPEATS} interleaved runs each)"):
            speed, plain_tokens = _speeds(args, loaded, plain_target, prompt, plan, threads, stages)
            if plain_target is not loaded.target:  # the identity claim is against the loop's own row set
                threads.set(plan.plain_threads)
                plain_tokens = generate(loaded.target, prompt, max_new_tokens=args.max_new_tokens).tokens
        at = _first_difference(res.tokens, plain_tokens)
        check = {"identical": at is None, "first_difference": at, "tokens": len(res.tokens),
                 "plain_rows_per_call": 1, "plain_threads": plan.plain_threads, "identity_row_set": loaded.target.row_set,
                 "speculative_token": res.tokens[at] if at is not None and at < len(res.tokens) else None,
                 "plain_token": plain_tokens[at] if at is not None and at < len(plain_tokens) else None, **speed}
    prov = loaded.provenance(**{k2: v for k2, v in run.items() if k2 not in ("backend", "kernel_set", "row_set")})
    prov["threads"] = plan.spec_threads
    verdict = loop_report.verdict(check, plan, here, res.summary()["tokens_per_round"])
    if args.json:
        ui.print_json({"command": "loop", "prompt": prompt, "prompt_text": text(prompt, loaded), "tokens": res.tokens,
                       "text": text(res.tokens, loaded), "summary": res.summary(), "rounds": [vars(r) for r in res.rounds],
                       "check": check, "configuration": plan.describe(), "verdict": verdict, "regime": here.describe(),
                       "provenance": prov})
    else:
        loop_report.print_loop(res, check, prov, loaded, args, plan, verdict, prompt)
    return 1 if check is not None and not check["identical"] else 0


def _speeds(args, loaded, plain_target, prompt, plan, threads, stages) -> tuple[dict, list[int]]:
    """The check's speed figures: the loop and plain decoding at its fastest, SPEED_REPEATS runs each,
    interleaved in a shuffled order (one run after the other in a fixed order shows 10-20% that is only
    the order on a shared machine); medians of tokens/s. Also plain decoding's tokens."""
    from ..loop.generate import generate
    from ..loop.speculative import speculative_generate
    from ..measure import bench_runner

    variants = {
        "loop": lambda p: speculative_generate(loaded.target, loaded.draft, p, max_new_tokens=args.max_new_tokens, k=plan.k,
                                               commit_path=args.commit_path, lazy_logits=lazy_logits(loaded.target),
                                               stages=stages),
        "plain": lambda p: generate(plain_target, p, max_new_tokens=args.max_new_tokens),
    }
    doc = bench_runner.sweep(variants, [prompt], repeats=SPEED_REPEATS,
                             before=lambda n: threads.set(plan.spec_threads if n == "loop" else plan.plain_threads))
    rate = doc["tokens_per_s"]
    speeds = {"speed_runs": SPEED_REPEATS, "loop_tokens_per_s": rate["loop"], "plain_tokens_per_s": rate["plain"],
              "speedup": rate["loop"] / rate["plain"] if rate["plain"] > 0 else None}
    if speeds["speedup"] is None:  # strict JSON: null with its reason (docs/cli.md)
        speeds["null_reasons"] = {"speedup": f"plain decoding ran at 0 tokens/s: {no_rate(args.max_new_tokens)}"}
    return speeds, doc["tokens"]["plain"][0]
