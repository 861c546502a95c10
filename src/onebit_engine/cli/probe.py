"""``onebit probe capture | draft | score``: acceptance measured in stages (see ``onebit_engine.measure.acceptance_probe``)."""
from __future__ import annotations

from ..measure import acceptance_probe as probe
from . import models, prepare, ui
from .status import COMPILING, Status


def cmd_capture(args) -> int:
    probe.check_capture_length(args.max_new_tokens)
    with Status(args).stage(f"loading {prepare.describe_source(args)}", slow_hint=COMPILING):
        loaded = models.load(args, need_draft=True)
        prompts = models.prompt_set(args, loaded)
        models.check_length(args.max_new_tokens, prompts, loaded.target.config.max_position_embeddings, least=2,
                            why=" (a capture times one plain step after the prefill's token)")
        prepare.warm(loaded.target, None, prompts[0])  # the capture's step time must not count compilation
    prov = loaded.provenance(stage="capture")
    with ui.Bar(len(prompts) * args.max_new_tokens, "capture", ui.progress_enabled(args)) as bar:
        cap = probe.capture(loaded.target, prompts, args.max_new_tokens, tap_layers=loaded.draft.config.target_layer_ids,
                            provenance=prov, progress=bar)
    digest = probe.save_capture(args.out, cap)
    info = {"command": "probe capture", "out": str(args.out), "prompts": len(prompts),
            "tokens": sum(len(t) for t in cap.tokens), "step_ms": cap.step_ms, "sha256": digest, "provenance": prov}
    if args.json:
        ui.print_json(info)
    else:
        print(f"captured {info['tokens']} greedy tokens over {len(prompts)} prompts ({cap.step_ms:.2f} ms a plain step), "
              f"taps of target layers {cap.tap_layers} -> {args.out}")
    return 0


def cmd_draft(args) -> int:
    with Status(args).stage(f"loading {prepare.describe_source(args)}", slow_hint=COMPILING):
        loaded = models.load(args, need_draft=True)
        cap = probe.load_capture(args.capture)
        prepare.warm(loaded.target, loaded.draft)  # the proposal time must not count compilation
    prov = loaded.provenance(stage="draft")
    probe.check_provenance(args.capture, cap.provenance, prov, "the model and draft given here")
    probe.check_capture_fits(args.capture, cap, loaded.target)
    anchors = sum(len(t) - 1 for t in cap.tokens)
    with ui.Bar(anchors, "draft", ui.progress_enabled(args)) as bar:
        ds = probe.draft_offline(loaded.draft, cap, provenance=prov, progress=bar)
    digest = probe.save_draft_stage(args.out, ds)
    info = {"command": "probe draft", "out": str(args.out), "anchors": anchors, "block_size": ds.block_size,
            "draft_ms": ds.draft_ms, "sha256": digest, "provenance": prov}
    if args.json:
        ui.print_json(info)
    else:
        print(f"drafted {ds.block_size - 1} tokens at each of {anchors} anchors ({ds.draft_ms:.2f} ms a proposal) -> {args.out}")
    return 0


def cmd_score(args) -> int:
    probe.check_round_cost(args.round_cost)
    cap = probe.load_capture(args.capture)
    ds = probe.load_draft_stage(args.drafts)
    ks = list(dict.fromkeys(args.k)) if args.k else args.k  # each k once: `--k 2 2` is one row
    res = probe.score(cap, ds, ks, round_cost=args.round_cost)
    if args.json:
        ui.print_json(dict(res, command="probe score"))
        return 0
    pos = "  ".join(f"{i + 1}:{ui.fmt(a)}" for i, a in enumerate(res["acceptance_by_position"]))
    cond = "  ".join(f"{i + 1}:{ui.fmt(a)}" for i, a in enumerate(res["conditional_acceptance_by_position"]))
    print(f"{res['prompts']} prompts, {res['generated_tokens']} greedy tokens; plain step {res['step_ms']:.2f} ms, "
          f"draft {res['draft_ms']:.2f} ms a proposal ({res['draft_cost_steps']:.2f} plain steps)")
    print(f"acceptance by draft position (share of anchors):       {pos}")
    print(f"acceptance by draft position (given the ones before):  {cond}")
    headers = ["k", "anchors", "a/token", "tok/round", "tok/round (loop path)", "E(a,k)", "ceiling", "verify+commit budget (steps)"]
    rows = [(r["k"], r["anchors"], r["per_token_acceptance"], r["tokens_per_round"], r["tokens_per_round_loop"],
             r["expected_tokens_geometric"], r["ceiling"], r["verify_commit_budget_steps"]) for r in res["k"]]
    if args.round_cost is not None:
        headers += [f"speedup @ {args.round_cost:g} steps/round", "break-even a"]
        rows = [row + (r["predicted_speedup"], r["break_even_acceptance"]) for row, r in zip(rows, res["k"])]
    print(ui.table(headers, rows))
    print("ceiling: the speedup if a round cost one plain step. Break-even: a round pays only while it costs fewer plain "
          "steps than its tokens/round; the draft's own cost leaves the verify+commit budget shown.")
    return 0
