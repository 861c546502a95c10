"""The ``onebit`` command line. The only place the environment and the user's flags are read."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import OnebitError


def _load(args):
    from . import load_target
    from .builtin import default_target

    if args.model:
        return load_target(args.model, backend=args.backend, row_set=args.row_set)
    return default_target(backend=args.backend, row_set=args.row_set)


def _tokens(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise SystemExit(f"onebit: error: --prompt-ids must be integers separated by spaces or commas, got {text!r}")


def cmd_generate(args) -> int:
    from .generate import generate

    target = _load(args)
    prompt = _tokens(args.prompt_ids)
    res = generate(target, prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    if args.json:
        print(json.dumps({"tokens": res.tokens, "stop_reason": res.stop_reason, "tokens_per_s": res.tokens_per_s, "provenance": res.provenance}))
    else:
        print(" ".join(map(str, res.tokens)))
        print(f"{len(res.tokens)} tokens, {res.tokens_per_s:.1f} tok/s decode, prefill {res.prefill_s * 1e3:.1f} ms "
              f"({res.provenance['backend']}, row set {res.provenance['row_set']})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="onebit", description="Hybrid-LLM speculative decoding engine")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="plain greedy or sampled decoding")
    g.add_argument("--model", help="HF checkpoint folder (default: the built-in model)")
    g.add_argument("--backend", default="reference", help="GEMM backend (default: %(default)s)")
    g.add_argument("--row-set", type=int, default=8, help="rows per GEMM call (default: %(default)s)")
    g.add_argument("--prompt-ids", default="1 2 3 4", help="prompt token ids (default: %(default)r)")
    g.add_argument("--max-new-tokens", type=int, default=32, help="(default: %(default)s)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(func=cmd_generate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (OnebitError, ValueError, FileNotFoundError) as e:
        print(f"onebit: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
