"""The ``onebit`` command line. The only place the environment and the user's flags are read
(``cli/models.py`` reads ``ONEBIT_CACHE_DIR``); everything below it takes explicit arguments.

Bad input (missing files, a mismatched pair, a corrupt stage file, k out of range, ...) ends with one
line ``onebit: error: ...`` on stderr and exit code 2, never a traceback. See ``docs/cli.md``.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import OnebitError

COMMIT_PATHS = ("keep", "replay", "checkpoint")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own code), with the way out
        print(f"onebit: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{v} must be >= 0")
    return v


def _model_args(p, *, draft: bool = True) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", metavar="PATH", help="target checkpoint folder (HF layout). Default: the built-in pair")
    if draft:
        g.add_argument("--draft", metavar="PATH", help="DFlash / DFlash 2 draft folder trained for --model")
    g.add_argument("--backend", default="auto", metavar="NAME", help="GEMM backend of target and draft: reference, host-int, "
                   "or auto (host-int when its native kernel builds and runs here, else reference). Default: %(default)r")
    g.add_argument("--target-backend", metavar="NAME", help="the target's backend, overriding --backend")
    if draft:
        g.add_argument("--draft-backend", metavar="NAME", help="the draft's backend, overriding --backend")
    g.add_argument("--row-set", type=_positive, metavar="N", help="rows per GEMM call. Default: 16 on a backend whose rows "
                   "never depend on the row count (host-int: no padding), else 8")
    g.add_argument("--threads", type=_positive, metavar="N", help="threads for the host-int kernel and for BLAS (numpy). "
                   "Default: loop - the faster of 1 and 2, measured; the other commands - 1")
    if not draft:
        p.set_defaults(draft=None, draft_backend=None)


def _prompt_args(p, *, many: bool = False) -> None:
    g = p.add_argument_group("prompt")
    g.add_argument("--prompt", metavar="TEXT", help="prompt text (needs the model's tokenizer)")
    g.add_argument("--prompt-ids", metavar="IDS", help="prompt token ids, e.g. '1 2 3'")
    if many:
        g.add_argument("--prompts", metavar="FILE", help="JSON list of prompts (strings or token-id lists). Default: the built-in set")


def _spec_args(p) -> None:
    g = p.add_argument_group("speculative loop")
    g.add_argument("--k", type=_positive, metavar="K", help="drafts per round, 1..block-1. Default: loop - the fastest k "
                   "predicted from measured round costs and the draft's acceptance profile; bench - block - 1 "
                   "(the built-in pair: 7)")
    g.add_argument("--commit-path", choices=COMMIT_PATHS, default="keep", help="how a verify is committed. Default: %(default)r")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="onebit", description="Hybrid-LLM speculative decoding engine (numpy): decode, probe, benchmark, inspect.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    g = sub.add_parser("generate", help="plain greedy or sampled decoding")
    _model_args(g, draft=False)
    _prompt_args(g)
    g.add_argument("--max-new-tokens", type=_positive, default=32, metavar="N", help="Default: %(default)r")
    g.add_argument("--temperature", type=_nonneg_float, default=0.0, metavar="T", help="0 = greedy. Default: %(default)r")
    g.add_argument("--seed", type=int, default=0, help="sampling seed. Default: %(default)r")
    g.add_argument("--json", action="store_true", help="one JSON object on stdout")
    g.set_defaults(func="decode:cmd_generate")

    lp = sub.add_parser("loop", help="the speculative loop: draft, verify, commit; per-round summary and totals")
    _model_args(lp)
    _prompt_args(lp)
    _spec_args(lp)
    lp.add_argument("--max-new-tokens", type=_positive, default=128, metavar="N", help="Default: %(default)r")
    lp.add_argument("--temperature", type=_nonneg_float, default=0.0, metavar="T", help="0 = greedy. Default: %(default)r")
    lp.add_argument("--seed", type=int, default=0, help="sampling seed. Default: %(default)r")
    lp.add_argument("--fallback", choices=("none", "break-even"), default="none",
                    help="finish with plain steps once 3 rounds in a row lost to plain decoding. Default: %(default)r")
    lp.add_argument("--replay-check", action="store_true", help="check every commit against the replayed state")
    lp.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                    help="also decode plainly (same build, backend and row set), state whether the outputs are "
                         "identical and the measured speedup. Default: on at temperature 0")
    lp.add_argument("--json", action="store_true", help="one JSON object on stdout")
    lp.set_defaults(func="decode:cmd_loop")

    pr = sub.add_parser("probe", help="staged acceptance measurement: capture, draft, score")
    psub = pr.add_subparsers(dest="stage", required=True, parser_class=_Parser, metavar="STAGE")
    c = psub.add_parser("capture", help="run the target greedily; save its tokens and the draft's context taps")
    _model_args(c)
    _prompt_args(c, many=True)
    c.add_argument("--max-new-tokens", type=_positive, default=32, metavar="N", help="Default: %(default)r")
    c.add_argument("--out", required=True, metavar="FILE", help="capture stage file to write")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func="probe:cmd_capture")
    d = psub.add_parser("draft", help="run the draft offline over a capture; save its proposals")
    _model_args(d)
    d.add_argument("--capture", required=True, metavar="FILE", help="capture stage file")
    d.add_argument("--out", required=True, metavar="FILE", help="draft stage file to write")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func="probe:cmd_draft")
    s = psub.add_parser("score", help="acceptance by position, tokens/round, ceiling and break-even")
    s.add_argument("--capture", required=True, metavar="FILE")
    s.add_argument("--drafts", required=True, metavar="FILE", help="draft stage file")
    s.add_argument("--k", type=_positive, nargs="+", metavar="K", help="k values to score. Default: 1..block-1")
    s.add_argument("--round-cost", type=_nonneg_float, metavar="STEPS",
                   help="a round's cost in plain steps, for the predicted speedup and break-even acceptance")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func="probe:cmd_score")

    b = sub.add_parser("bench", help="plain vs speculative tokens/s in one process; --compare two results")
    _model_args(b)
    _prompt_args(b, many=True)
    _spec_args(b)
    b.add_argument("--max-new-tokens", type=_positive, default=32, metavar="N", help="Default: %(default)r")
    b.add_argument("--repeats", type=_positive, default=3, metavar="N", help="Default: %(default)r")
    b.add_argument("--out", metavar="FILE", help="also write the JSON result here (atomically)")
    b.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="compare two results instead of measuring")
    b.add_argument("--allow-mismatch", action="store_true", help="with --compare: print runs of different provenance, labelled")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func="bench:cmd_bench")

    i = sub.add_parser("inspect", help="a checkpoint's config, tensors, sizes, dtypes, quantization")
    i.add_argument("path", metavar="PATH", help="target or draft folder, quantized .safetensors file or stage file")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func="inspect:cmd_inspect")

    q = sub.add_parser("quantize", help="quantize a float checkpoint's projections and save them")
    q.add_argument("--model", metavar="PATH", help="float checkpoint folder. Default: the built-in target")
    q.add_argument("--format", choices=("int8", "int4", "ternary"), default="int8", help="Default: %(default)r")
    q.add_argument("--out", required=True, metavar="PATH", help="a .safetensors path: the quantized projections only (for inspect); any other path: a servable checkpoint folder that load_target and --model run")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func="inspect:cmd_quantize")
    return p


def _run(func: str, args) -> int:
    import contextlib
    import importlib

    module, name = func.split(":")
    fn = getattr(importlib.import_module(f".{module}", __name__), name)
    # BLAS / OpenMP threads follow --threads (default 1): on a small shared machine a second BLAS thread
    # that competes with anything else made numpy decoding 10-20x slower (docs/cli.md).
    limit = contextlib.nullcontext()
    if hasattr(args, "threads"):
        try:
            from threadpoolctl import threadpool_limits

            limit = threadpool_limits(limits=args.threads or 1)
        except ImportError:
            pass
    with limit:
        return fn(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, already printed as one line)
        return int(e.code or 0)
    args.argv = argv
    try:
        return _run(args.func, args)
    except (OnebitError, ValueError, OSError) as e:
        msg = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        print(f"onebit: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("onebit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
