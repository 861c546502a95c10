"""``onebit generate`` (plain decoding) and ``onebit loop`` (the speculative loop)."""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..measure import tune
from . import models, tuning, ui


class _Counted:
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


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def cmd_generate(args) -> int:
    from ..loop.generate import generate

    loaded = models.load(args, need_draft=False)
    prompt = models.prompt(args, loaded)
    with ui.Bar(args.max_new_tokens, "generate", ui.progress_enabled(args)) as bar:
        target = _Counted(loaded.target, "forward", bar) if bar.enabled else loaded.target
        res = generate(target, prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    from ..measure.provenance import plain_provenance

    prov = dict(plain_provenance(loaded.target, temperature=args.temperature), model_hash=loaded.model_hash, model_path=str(loaded.target_path))
    if args.json:
        ui.print_json({"command": "generate", "prompt": prompt, "tokens": res.tokens, "text": _text(res.tokens, loaded),
                       "stop_reason": res.stop_reason, "tokens_per_s": res.tokens_per_s, "prefill_ms": 1e3 * res.prefill_s,
                       "provenance": prov})
        return 0
    print(models.render(res.tokens, loaded))
    print(f"\n{len(res.tokens)} tokens ({res.stop_reason}), {ui.fmt(res.tokens_per_s, 1)} tok/s decode, prefill "
          f"{1e3 * res.prefill_s:.1f} ms  [{loaded.source}; {prov['backend']} ({prov['kernel_set']}), row set "
          f"{prov['row_set']}, T={args.temperature}]")
    return 0


def _text(tokens, loaded) -> str | None:
    return models.decode(loaded.tokenizer, tokens) if loaded.tokenizer is not None else None


def cmd_loop(args) -> int:
    from ..loop.generate import generate
    from ..loop.speculative import speculative_generate
    from ..measure.provenance import loop_provenance

    if args.check is None:  # default: check (and show the speedup) whenever identity is the claim
        args.check = args.temperature == 0
    if args.check and args.temperature > 0:
        raise ConfigError(f"--check needs --temperature 0 (got {args.temperature}): only greedy speculative decoding is "
                          f"token-for-token plain decoding; sampled runs agree in distribution, not in tokens")
    loaded = models.load(args, need_draft=True)
    prompt = models.prompt(args, loaded)
    # Plain decoding at its fastest: one row, no padding. A backend that pads needs a row set 1 target.
    plain_target = loaded.target if loaded.target.row_invariant else models.load(args, need_draft=False, row_set=1).target
    threads = tune.Threads(loaded.target, loaded.draft, plain_target)
    plan = tuning.plan(args, loaded, plain_target, prompt, threads)
    threads.set(plan.spec_threads)
    with ui.Bar(args.max_new_tokens, "loop", ui.progress_enabled(args)) as bar:
        draft = _Counted(loaded.draft, "propose", bar) if bar.enabled else loaded.draft
        res = speculative_generate(
            loaded.target, draft, prompt, max_new_tokens=args.max_new_tokens, k=plan.k, temperature=args.temperature,
            fallback=None if args.fallback == "none" else args.fallback, commit_path=args.commit_path,
            replay_check=args.replay_check, seed=args.seed,
        )
    # the run's provenance, read right after it (the backends' event counts are the loop's, not the check's)
    run = loop_provenance(loaded.target, loaded.draft, k=plan.k, commit_path=args.commit_path, temperature=args.temperature,
                          fallback=None if args.fallback == "none" else args.fallback)
    summary = res.summary()
    check = None
    if args.check:
        speed, plain_tokens = _speeds(args, loaded, plain_target, prompt, plan, threads)
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
    if args.json:
        ui.print_json({"command": "loop", "prompt": prompt, "tokens": res.tokens, "text": _text(res.tokens, loaded),
                       "summary": summary, "rounds": [vars(r) for r in res.rounds], "check": check,
                       "configuration": plan.describe(), "provenance": prov})
    else:
        _print_loop(res, summary, check, prov, loaded, args, plan)
    return 1 if check is not None and not check["identical"] else 0


SPEED_REPEATS = 3


def _speeds(args, loaded, plain_target, prompt, plan, threads) -> tuple[dict, list[int]]:
    """The check's speed figures: the loop and plain decoding at its fastest, SPEED_REPEATS runs each,
    interleaved in a shuffled order (one run after the other in a fixed order shows 10-20% that is only
    the order on a shared machine); medians of tokens/s. Also plain decoding's tokens."""
    from ..loop.generate import generate
    from ..loop.speculative import speculative_generate
    from ..measure import bench_runner

    variants = {
        "loop": lambda p: speculative_generate(loaded.target, loaded.draft, p, max_new_tokens=args.max_new_tokens, k=plan.k,
                                               commit_path=args.commit_path),
        "plain": lambda p: generate(plain_target, p, max_new_tokens=args.max_new_tokens),
    }
    doc = bench_runner.sweep(variants, [prompt], repeats=SPEED_REPEATS,
                      before=lambda n: threads.set(plan.spec_threads if n == "loop" else plan.plain_threads))
    rate = doc["tokens_per_s"]
    speeds = {"speed_runs": SPEED_REPEATS, "loop_tokens_per_s": rate["loop"], "plain_tokens_per_s": rate["plain"],
              "speedup": rate["loop"] / rate["plain"] if rate["plain"] > 0 else None}
    if speeds["speedup"] is None:  # strict JSON: null with its reason (docs/cli.md)
        speeds["null_reasons"] = {"speedup": "plain decoding ran at 0 tokens/s (no token after the first to time)"}
    return speeds, doc["tokens"]["plain"][0]


def _print_loop(res, s, check, prov, loaded, args, plan) -> None:
    print(models.render(res.tokens, loaded))
    print()
    rows = [(i + 1, r.proposed, r.accepted, r.emitted, r.draft_ms, r.verify_ms, r.commit_ms) for i, r in enumerate(res.rounds)]
    if rows:
        print(ui.table(["round", "proposed", "accepted", "emitted", "draft ms", "verify ms", "commit ms"], rows))
        print()
    by_pos = "  ".join(f"{i + 1}:{a:.2f}" for i, a in enumerate(s["acceptance_by_position"])) or "-"
    fb = "none" if res.fallback_at is None else f"at token {res.fallback_at} ({res.plain_steps} plain steps after it)"
    if args.fallback == "none":
        fb = "off"
    print(f"totals: {s['tokens']} tokens in {s['rounds']} rounds, {ui.fmt(s['tokens_per_s'], 1)} tok/s, "
          f"{s['tokens_per_round']:.2f} tokens/round, acceptance {s['acceptance_rate']:.2f} ({res.full_accepts} full accepts)")
    print(f"acceptance by draft position: {by_pos}")
    print(f"per round: draft {s['draft_ms_per_round']:.2f} ms, verify {s['verify_ms_per_round']:.2f} ms, "
          f"commit {s['commit_ms_per_round']:.2f} ms")
    print(f"fallback: {fb}")
    print(f"configuration: {plan.summary()}")
    print(f"[{loaded.source}; k={prov['k']}, commit path {prov['commit_path']}, target {prov['backend']} "
          f"({prov['kernel_set']}), draft {prov.get('draft_backend')}, row set {prov['row_set']}, threads {prov['threads']}, "
          f"T={args.temperature}, git {prov['git_revision']}]")
    if check is not None:
        plain_at = f"1 row per step, {check['plain_threads']} thread{'s' if check['plain_threads'] > 1 else ''}"
        if check["identical"]:
            print(f"check: identical to plain greedy decoding of the same build ({check['tokens']} of {check['tokens']} "
                  f"tokens); speed, medians of {check['speed_runs']} interleaved runs each: loop "
                  f"{ui.fmt(check['loop_tokens_per_s'], 1)} tok/s, plain decoding at its fastest ({prov['backend']}, "
                  f"{plain_at}) {ui.fmt(check['plain_tokens_per_s'], 1)} tok/s: speedup {ui.fmt(check['speedup'])}x")
        else:
            print(f"check: DIFFERS from plain greedy decoding of the same build: first at token {check['first_difference']} "
                  f"(speculative {check['speculative_token']} vs plain {check['plain_token']})")
