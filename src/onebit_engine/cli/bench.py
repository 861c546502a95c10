"""``onebit bench``: plain vs speculative in one process; ``onebit bench --compare A.json B.json``."""
from __future__ import annotations

import sys
from pathlib import Path

from ..atomic import atomic_write_text
from ..checkpoint.jsonfile import read_json
from ..errors import ConfigError, OutputError
from ..measure import bench_runner, scale_bench
from . import models, outputs, prepare, ui
from .status import COMPILING, Status

# the flags each kind of bench reads: any other flag given would pass unread
_COMPARE_FLAGS = ("--compare", "--allow-mismatch", "--json", "--quiet", "--verbose")
_SCALE_FLAGS = ("--shape", "--format", "--acceptance", "--seed", "--cache")


def _given(args) -> list[str]:
    """The long flags on the command line, in order (by name: a flag given at its default value counts too)."""
    flags = [a.split("=", 1)[0] for a in getattr(args, "argv", None) or () if a.startswith("--")]
    return list(dict.fromkeys(flags))


def _refuse_unread(args) -> None:
    given = _given(args)
    if args.compare:
        unread = [f for f in given if f not in _COMPARE_FLAGS]
        if unread:
            raise ConfigError(f"--compare only reads two result files; {', '.join(unread)} "
                              f"{'is' if len(unread) == 1 else 'are'} not used with it (drop it, or drop --compare to measure)")
    elif "--allow-mismatch" in given:
        raise ConfigError("--allow-mismatch only applies to --compare A.json B.json; drop it to measure")
    elif args.shape is None:
        scale = [f for f in given if f in _SCALE_FLAGS]
        if scale:
            raise ConfigError(f"{', '.join(scale)} {'belongs' if len(scale) == 1 else 'belong'} to the scale benchmark "
                              f"and would be ignored here: add --shape NAME, or drop {'it' if len(scale) == 1 else 'them'}")


def cmd_bench(args) -> int:
    _refuse_unread(args)
    if args.compare:
        return _compare(args)
    if args.shape is not None:  # '' too: get_shape refuses it by name, not a plain bench instead
        for flag in ("model", "draft", "prompt", "prompt_ids", "prompts"):
            if getattr(args, flag, None):
                raise ConfigError(f"--shape synthesizes its own pair and prompt; --{flag.replace('_', '-')} is not used with it "
                                  f"(drop it, or drop --shape to benchmark that model)")
        # what the scale benchmark fixes itself: a flag that would change it must not pass unread (and be recorded)
        fixed = [f"--{f.replace('_', '-')} {getattr(args, f)}" for f in ("backend", "target_backend", "draft_backend")
                 if getattr(args, f, None) not in (None, "auto", "host-int")]
        fixed += [f"--row-set {args.row_set}"] if getattr(args, "row_set", None) is not None else []
        fixed += [f"--commit-path {args.commit_path}"] if getattr(args, "commit_path", "keep") != "keep" else []
        if fixed:
            raise ConfigError(f"--shape runs on host-int with row set 16 and the keep commit path; {', '.join(fixed)} "
                              f"{'is' if len(fixed) == 1 else 'are'} not used with it (drop it, or benchmark a model folder with --model to choose it)")
        from .scale import cmd_scale_bench

        return cmd_scale_bench(args)
    if args.k is not None:  # refused with this draft's range before anything loads
        models.check_k(args.k, models.draft_block(args))
    status = Status(args)
    with status.stage(f"loading {prepare.describe_source(args)}", slow_hint=COMPILING):
        loaded = models.load(args, need_draft=True)
        one_row = models.load(args, need_draft=False, row_set=1, backend=args.target_backend or args.backend).target
        k = models.check_k(args.k, loaded.draft, loaded.default_k)
        models.check_stages(args.verify_stages, k)
        bench_runner.check_room(args.max_new_tokens, k)
        prompts = models.prompt_set(args, loaded)
        models.check_length(args.max_new_tokens, prompts, loaded.target.config.max_position_embeddings, least=3,
                            why=" (the prefill's token, then room for a round of 1 draft and its bonus token)")
        prepare.warm(loaded.target, loaded.draft, prompts[0])
    status.say(f"measuring plain decoding and the loop (k={k}): {ui.count(len(prompts), 'prompt')} x {ui.count(args.repeats, 'repeat')}")
    prov = loaded.provenance(mode="bench")
    prov["plain_1row_row_set"] = one_row.row_set
    prov["threads"] = args.threads or 1  # BLAS and host-int threads (cli/__init__.py: default 1)
    from ..measure.provenance import machine

    prov["host"] = machine()
    with ui.Bar(args.repeats * len(prompts) * 3, "bench", ui.progress_enabled(args)) as bar:
        doc = bench_runner.run_bench(loaded.target, one_row, loaded.draft, prompts, k=k, commit_path=args.commit_path,
                                     max_new_tokens=args.max_new_tokens, repeats=args.repeats, provenance=prov, progress=bar,
                                     stages=args.verify_stages)
    doc["command"] = "onebit " + " ".join(args.argv)
    if args.out:
        try:
            atomic_write_text(args.out, ui.dumps(doc))
        except OutputError as e:  # the measurement is not lost: it goes to stdout, the error to stderr
            return outputs.unwritten(doc, e, args)
    if args.json:
        ui.print_json(doc)
        return 0
    r = doc["results"]
    t = r["tokens_per_s"]
    f = ui.fmt
    one_row_ratio = t["plain_1row"] / t["plain"] if t["plain"] and t["plain_1row"] is not None else None
    print(ui.table(["mode", "tok/s (median)", "vs plain"], [
        (f"plain, row set {loaded.target.row_set}", t["plain"], 1.0),
        ("plain, row set 1", t["plain_1row"], one_row_ratio),
        (f"speculative, k={k}, {args.commit_path}", t["speculative"], r["ratio_vs_plain"]),
    ]))
    print(f"\nratio speculative / plain (same row set): {f(r['ratio_vs_plain'], 3)}   "
          f"speculative / plain at 1 row: {f(r['ratio_vs_plain_1row'], 3)}")
    print(f"acceptance {f(r['acceptance'], 3)}, {f(r['tokens_per_round'])} tokens/round over {r['speculative_rounds']} "
          f"rounds; a round costs {f(r['round_cost_steps'])} plain steps (draft {f(r['draft_ms'])} + verify "
          f"{f(r['verify_ms'])} + commit {f(r['commit_ms'])} ms); predicted speedup from acceptance and costs "
          f"{f(r['predicted_speedup'], 3)}")
    for key, why in r.get("null_reasons", {}).items():
        print(f"not measured: {key} ({why})")
    same = "identical to plain greedy" if r["identical_to_plain"] else f"DIFFERS from plain greedy at {r['first_difference']}"
    print(f"output: {same}; {ui.count(len(prompts), 'prompt')} x {ui.count(args.repeats, 'repeat')} x {ui.count(args.max_new_tokens, 'token')}  "
          f"[{loaded.source}; {prov['backend']} ({prov['kernel_set']}), git {prov['git_revision']}]")
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _read(path: str) -> dict:
    """The parsed file; NaN / Infinity are parsed here so that ``bench_runner.check_result`` can name their key."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"benchmark result {path!r} is not a file but a folder; give the file `onebit bench --out FILE` wrote")
    if not p.is_file():
        raise ConfigError(f"benchmark result {path!r} does not exist or is not a file; write one with `onebit bench --out {path}`")
    doc = read_json(p, "benchmark result", error=ConfigError, redo=f"write it again with `onebit bench --out {path}`")
    if isinstance(doc, dict) and doc.get("schema") == scale_bench.SCHEMA:  # not a bench result to write again: another kind
        raise ConfigError(f"{path} is a scale benchmark result (`onebit bench --shape`), which --compare does not read; "
                          f"compare two `onebit bench --out` results of a model, or read the scale results side by side")
    return doc


def _compare(args) -> int:
    a_path, b_path = args.compare
    res = bench_runner.compare(_read(a_path), _read(b_path), allow_mismatch=args.allow_mismatch, names=(a_path, b_path))
    if args.json:
        ui.print_json(res)
        return 0
    label = "" if res["comparable"] else " (NOT COMPARABLE)"
    rows = [(row["metric"] + label, row["a"], row["b"], row["b_over_a"]) for row in res["rows"]]
    print(ui.table(["metric", a_path, b_path, "B/A"], rows, digits=3))
    if not res["comparable"]:
        print("\nNOT COMPARABLE - different provenance: " + "; ".join(res["differences"]), file=sys.stdout)
    return 0
