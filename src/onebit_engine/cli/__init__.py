"""The ``onebit`` command line. The only place the environment and the user's flags are read
(``cli/models.py`` reads ``ONEBIT_CACHE_DIR``); everything below it takes explicit arguments.

Bad input (missing files, a mismatched pair, a corrupt stage file, k out of range, ...) ends with one
line ``onebit: error: ...`` on stderr and exit code 2, never a traceback. See ``docs/cli.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import warnings

from ..errors import OnebitError
from ..hybrid.commit import COMMIT_PATHS
from . import ui


class _Parser(argparse.ArgumentParser):
    def __init__(self, *a, **kw):
        # No prefix abbreviations (--max-new-token for --max-new-tokens): a new flag would change what an
        # old abbreviation means, and a typo would pass as a flag.
        super().__init__(*a, allow_abbrev=False, **kw)

    def parse_args(self, args=None, namespace=None):
        # argparse reports an option no subcommand knows from the top parser ("see `onebit --help`"); the
        # help that lists the options the user can give is the subcommand's: name it
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            self._innermost(ns).error(f"unrecognized arguments: {' '.join(extra)}")
        return ns

    def _innermost(self, ns) -> "argparse.ArgumentParser":
        """The parser of the deepest subcommand ``ns`` chose (onebit -> loop, onebit -> probe -> score)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(ns, action.dest, None) or "")
                if isinstance(chosen, _Parser):
                    return chosen._innermost(ns)
        return self

    def error(self, message: str):  # one line, exit 2 (argparse's own code), with the way out
        line = f"{message} (see `{self.prog} --help`)"
        ui.error(line)
        e = SystemExit(2)
        e.message = line  # for the --json error object
        raise e


def _int_in(lo: int, hi: int, why: str = ""):
    """argparse type: an integer in lo..hi (a bound on every count, so no option can ask for unbounded work)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range: it must be {lo}..{hi}{why}")
        return v

    parse.__name__ = "integer"
    return parse


_positive = _int_in(1, 1 << 20)
# Counts whose range depends on the model or draft loaded (--k: 1..block-1 of this draft; --max-new-tokens:
# at most this model's context less the prompt): any integer parses, the check that knows the range refuses.
def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


_count.__name__ = "integer"
# A GEMM call of more rows than the largest verify (block size <= 64) only pads; 64 is host-int's pool cap.
MAX_ROW_SET, MAX_THREADS = 64, 64
_row_set = _int_in(1, MAX_ROW_SET, " (rows per GEMM call; a verify has at most the draft's block size of rows)")
_threads = _int_in(1, MAX_THREADS, " (the host-int kernel's thread cap)")
_repeats = _int_in(1, 1000)
_seed = _int_in(0, 2**63 - 1, " (numpy seeds are non-negative)")


def _float_in(lo: float, *, strict: bool, hint: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(v) or v < lo or (strict and v == lo):
            raise argparse.ArgumentTypeError(f"{v} must be a finite number {'>' if strict else '>='} {lo:g}; {hint}")
        return v

    parse.__name__ = "number"
    return parse


_any_temperature = _float_in(0.0, strict=False, hint="give e.g. 0 (greedy) or 0.8")


def _temperature(text: str) -> float:
    from ..ops.sampling import temperature_floor_problem

    v = _any_temperature(text)
    if (why := temperature_floor_problem(v)) is not None:
        raise argparse.ArgumentTypeError(why)
    return v


_temperature.__name__ = "number"
_round_cost = _float_in(0.0, strict=True, hint="a round's cost in plain steps: give e.g. --round-cost 2.5")


# GEMM backends by name (gemm.registry's, plus auto); tests/cli pins this list to the registry's.
BACKENDS = ("auto", "reference", "host-int", "xrt")
_BACKEND_HELP = ("auto: host-int when its native kernel builds and runs here, else reference; reference: float32 numpy; "
                 "host-int: exact integer GEMMs on the CPU; xrt: an AMD XDNA NPU (docs/device.md)")


def _output_args(p, json_help: str = "one JSON object on stdout, for machines (an error is one too, besides its line "
                                    "on stderr); no status lines unless --verbose") -> None:
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help=json_help)
    v = g.add_mutually_exclusive_group()
    v.add_argument("-q", "--quiet", action="store_true", help="no progress or status lines on stderr (errors only)")
    v.add_argument("-v", "--verbose", action="store_true", help="status lines on stderr even when it is not a terminal, "
                   "with each stage's time and details")


def _model_args(p, *, draft: bool = True) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", metavar="PATH", help="target checkpoint folder (HF layout). Default: the built-in pair")
    if draft:
        g.add_argument("--draft", metavar="PATH", help="DFlash / DFlash 2 draft folder trained for --model")
    g.add_argument("--backend", default="auto", choices=BACKENDS, metavar="NAME",
                   help=f"GEMM backend of target and draft, one of {', '.join(BACKENDS)} ({_BACKEND_HELP}). Default: %(default)s")
    g.add_argument("--target-backend", choices=BACKENDS, metavar="NAME", help="the target's backend, overriding --backend")
    if draft:
        g.add_argument("--draft-backend", choices=BACKENDS, metavar="NAME", help="the draft's backend, overriding --backend")
    g.add_argument("--row-set", type=_row_set, metavar="N", help="rows per GEMM call. Default: 16 on a backend whose rows "
                   "never depend on the row count (host-int: no padding), else 8")
    g.add_argument("--threads", type=_threads, metavar="N", help="threads for the host-int kernel and for BLAS (numpy), "
                   "1..64. Default: loop - the faster of 1 and 2, measured with k (and kept); the other commands - 1")
    if not draft:
        p.set_defaults(draft=None, draft_backend=None)


def _prompt_args(p, *, many: bool = False) -> None:
    # one prompt source: given two, the run would silently use one of them
    g = p.add_argument_group("prompt").add_mutually_exclusive_group()
    g.add_argument("--prompt", metavar="TEXT", help="prompt text (needs the model's tokenizer). Default: the built-in "
                   "pair's first prompt, else the ids 1 2 3 4")
    g.add_argument("--prompt-ids", metavar="IDS", help="prompt token ids, e.g. '1 2 3' (each in the model's vocabulary)")
    if many:
        g.add_argument("--prompts", metavar="FILE", help="JSON list of prompts (strings or token-id lists). Default: the built-in set")


def _max_new_tokens(p, default: int) -> None:
    p.add_argument("--max-new-tokens", type=_count, default=default, metavar="N", help="tokens to generate, 1 up to the "
                   "model's max_position_embeddings less the prompt (checked before any decoding). Default: %(default)s")


def _spec_args(p) -> None:
    g = p.add_argument_group("speculative loop")
    g.add_argument("--k", type=_count, metavar="K", help="drafts per round, 1..block-1 of the draft given (the built-in "
                   "pair's block is 16: 1..15). Default: loop - the fastest k predicted from round costs measured here "
                   "and the draft's acceptance profile (kept per machine and build); bench - 7 for the built-in pair "
                   "(its measured best), block-1 for another draft")
    g.add_argument("--commit-path", choices=COMMIT_PATHS, default="keep", help="how a verify is committed. Default: %(default)s")
    g.add_argument("--verify-stages", type=_stages, default="auto", metavar="S", help="a round's verify in passes (the "
                   "same output): 'auto' (each pass's rows chosen from the pass times and acceptance measured as the loop "
                   "runs), 'one' (always one pass of k+1 rows) or a first-pass row count. Default: %(default)s")


def _stages(text: str) -> "str | int":
    if text in ("auto", "one"):
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not 'auto', 'one' or a row count >= 1")
    if n > MAX_ROW_SET:  # a count like any other: bounded (99999999999999999999999 ran as one pass, unsaid)
        raise argparse.ArgumentTypeError(f"{n} is more rows than any verify has (a draft's block is at most "
                                         f"{MAX_ROW_SET}): give 'auto', 'one' or a first-pass row count 1..{MAX_ROW_SET}")
    return n


_stages.__name__ = "verify stages"


def _shape_names() -> str:
    from ..synth.shapes import SHAPES

    return ", ".join(SHAPES)


def _sampling_seed(p) -> None:
    # default None, not 0: a seed given at temperature 0 is said to do nothing (models.sampling_seed)
    p.add_argument("--seed", type=_seed, default=None, help="sampling seed (used only at --temperature > 0). Default: 0")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="onebit", description="Hybrid-LLM speculative decoding engine (numpy): decode, probe, benchmark, inspect.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    g = sub.add_parser("generate", help="plain greedy or sampled decoding")
    _model_args(g, draft=False)
    _prompt_args(g)
    _max_new_tokens(g, 32)
    g.add_argument("--temperature", type=_temperature, default=0.0, metavar="T", help="0 = greedy. Default: %(default)s")
    _sampling_seed(g)
    _output_args(g)
    g.set_defaults(func="decode:cmd_generate")

    lp = sub.add_parser("loop", help="the speculative loop: picks k and threads here (kept per machine and build), checks "
                        "the output against plain decoding and says whether speculation paid here, and why")
    _model_args(lp)
    _prompt_args(lp)
    _spec_args(lp)
    lp.add_argument("--retune", action="store_true", help="measure the k and threads again instead of reusing the "
                    "choice kept for this machine, build, model and draft (and keep the new one)")
    _max_new_tokens(lp, 128)
    lp.add_argument("--temperature", type=_temperature, default=0.0, metavar="T", help="0 = greedy. Default: %(default)s")
    _sampling_seed(lp)
    lp.add_argument("--fallback", choices=("none", "break-even"), default="none",
                    help="finish with plain steps once 3 rounds in a row lost to plain decoding. Default: %(default)s")
    lp.add_argument("--replay-check", action="store_true", help="check every commit against the replayed state")
    lp.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                    help="also decode plainly (same build, backend and row set), state whether the outputs are "
                         "identical and the measured speedup. Default: on at temperature 0")
    lp.add_argument("--rounds", action="store_true", help="print the per-round table (proposed, accepted, emitted, "
                    "ms by part); --json always has it")
    _output_args(lp)
    lp.set_defaults(func="loop:cmd_loop")

    pr = sub.add_parser("probe", help="staged acceptance measurement: capture, draft, score")
    psub = pr.add_subparsers(dest="stage", required=True, parser_class=_Parser, metavar="STAGE")
    c = psub.add_parser("capture", help="run the target greedily; save its tokens and the draft's context taps")
    _model_args(c)
    _prompt_args(c, many=True)
    _max_new_tokens(c, 32)
    c.add_argument("--out", required=True, metavar="FILE", help="capture stage file to write")
    _output_args(c)
    c.set_defaults(func="probe:cmd_capture")
    d = psub.add_parser("draft", help="run the draft offline over a capture; save its proposals")
    _model_args(d)
    d.add_argument("--capture", required=True, metavar="FILE", help="capture stage file (onebit probe capture --out)")
    d.add_argument("--out", required=True, metavar="FILE", help="draft stage file to write")
    _output_args(d)
    d.set_defaults(func="probe:cmd_draft")
    s = psub.add_parser("score", help="acceptance by position, tokens/round, ceiling and break-even")
    s.add_argument("--capture", required=True, metavar="FILE", help="capture stage file (onebit probe capture --out)")
    s.add_argument("--drafts", required=True, metavar="FILE", help="draft stage file (onebit probe draft --out) made from --capture")
    # extend: `--k 1 --k 2` scores both (with nargs alone the last list won and the first was dropped unsaid)
    s.add_argument("--k", type=_count, nargs="+", action="extend", metavar="K", help="k values to score, each "
                   "1..block-1 of the draft stage (each once, in the order given). Default: all of them")
    s.add_argument("--round-cost", type=_round_cost, metavar="STEPS",
                   help="a round's cost in plain steps, for the predicted speedup and break-even acceptance")
    _output_args(s)
    s.set_defaults(func="probe:cmd_score")

    b = sub.add_parser("bench", help="plain vs speculative tokens/s in one process; --compare two results")
    _model_args(b)
    _prompt_args(b, many=True)
    _spec_args(b)
    _max_new_tokens(b, 32)
    b.add_argument("--repeats", type=_repeats, default=3, metavar="N", help="timed runs of each mode, 1..1000. Default: %(default)s")
    b.add_argument("--out", metavar="FILE", help="also write the JSON result here (atomically)")
    b.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="compare two results instead of measuring")
    b.add_argument("--allow-mismatch", action="store_true", help="with --compare: print runs of different provenance, labelled")
    _output_args(b)
    sc = b.add_argument_group("scale benchmark (a synthesized pair of a real model's shape, instead of --model)")
    sc.add_argument("--shape", metavar="NAME", help="a published shape (onebit synth --help lists them): synthesize or "
                    "reuse its int8/int4/ternary pair and measure plain decoding against the loop with an oracle draft")
    sc.add_argument("--format", choices=("int8", "int4", "ternary"), help="weight format of the synthesized pair. Default: int4")
    sc.add_argument("--acceptance", default="0.8", metavar="A", help="the oracle draft's acceptance: a number in [0, 1] "
                    "(each draft kept with that chance until the first miss), seed (every draft kept), pair (the built-in "
                    "pair's measured profile) or published (the shape's draft's published tau). Default: %(default)r")
    sc.add_argument("--seed", type=_seed, default=0, help="seed of the synthesized weights and the prompt. Default: %(default)r")
    sc.add_argument("--cache", metavar="DIR", help="where synthesized pairs are kept. Default: the onebit cache folder's synth/")
    b.set_defaults(func="bench:cmd_bench")

    sy = sub.add_parser("synth", help="write a servable pair of a real model's shape with seeded random weights")
    sy.add_argument("--shape", required=True, metavar="NAME", help=f"one of {_shape_names()} (NAME-shrunk: its tiny copy)")
    sy.add_argument("--format", choices=("int8", "int4", "ternary", "bf16"), default="int4",
                    help="int8/int4/ternary: a quantized servable pair; bf16: a float checkpoint (onebit quantize's input). "
                         "Default: %(default)r")
    sy.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder: target/ and draft/ are written in it")
    sy.add_argument("--seed", type=_seed, default=0, help="Default: %(default)r")
    sy.add_argument("--allow-unservable", action="store_true", help="write it even when this machine lacks the memory to serve it")
    _output_args(sy)
    sy.set_defaults(func="scale:cmd_synth")

    i = sub.add_parser("inspect", help="a checkpoint's config, tensors, sizes, dtypes, quantization")
    i.add_argument("path", metavar="PATH", help="target or draft folder, quantized .safetensors file or stage file")
    _output_args(i)
    i.set_defaults(func="inspect:cmd_inspect")

    q = sub.add_parser("quantize", help="quantize a float checkpoint's projections and save them")
    q.add_argument("--model", metavar="PATH", help="float checkpoint folder. Default: the built-in target")
    q.add_argument("--format", choices=("int8", "int4", "ternary"), default="int8", help="Default: %(default)r")
    q.add_argument("--out", required=True, metavar="PATH", help="a .safetensors path: the quantized projections only (for inspect); any other path: a servable checkpoint folder that load_target and --model run")
    _output_args(q)
    q.set_defaults(func="inspect:cmd_quantize")
    for group in (sub, psub):  # `onebit loop --help` opens with the line `onebit --help` lists it by
        for choice in group._choices_actions:
            group.choices[choice.dest].description = choice.help
    return p


def _run(func: str, args) -> int:
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
    import numpy as np

    # numpy's float warnings off: the engine checks what they warn of itself (non-finite logits stop a run naming
    # the step, non-finite activations are refused before int8), and their two-line reports break stderr's one line
    with limit, np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.showwarning = _warn_one_line
        return fn(args)


def _warn_one_line(message, category, filename, lineno, file=None, line=None):
    """A warning as one stderr line, ``onebit: warning: ...`` (not Python's two lines with a source line)."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    ui.warning(text, file)


# The packages the CLI imports lazily, with the extra that brings each: a last net under the code that
# knows (``MissingExtra`` from the tokenizer loader; rich, numba and ziglang have fallbacks).
OPTIONAL_EXTRAS = {"tokenizers": "cli", "rich": "cli", "threadpoolctl": "cli", "numba": "fast", "ziglang": "fast",
                   "llvmlite": "fast"}


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done, 1 a loop --check found a difference, 2 bad input (one line on stderr; with
    --json also one JSON object on stdout), 130 interrupted, 141 stdout closed early (``| head``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:  # --help (0) or a usage error (2, already printed as one line)
            if e.code and as_json:
                _json_error(argv, getattr(e, "message", "usage error"))
            return int(e.code or 0)
        args.argv = argv
        try:
            from .outputs import check_output, check_paths

            check_paths(args)
            check_output(args, builtin_inputs=_builtin_inputs(args))
            return _run(args.func, args)
        except OnebitError as e:  # every refusal: raised by the check that knows the rule
            return _refuse(argv, " ".join(line.strip() for line in str(e).splitlines() if line.strip()), as_json)
        except ModuleNotFoundError as e:
            extra = OPTIONAL_EXTRAS.get((e.name or "").split(".")[0])
            if extra is None:
                raise
            return _refuse(argv, f"this command needs the optional package {e.name!r}, which is not installed; "
                                 f"pip install 'onebit-specverify[{extra}]'", as_json)
        except KeyboardInterrupt:
            print("onebit: interrupted", file=sys.stderr)
            return 130
    except BrokenPipeError:  # the reader went away (`onebit inspect ... | head`): stop quietly, like cat
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush cannot fail again
        return 141


def _builtin_inputs(args) -> list:
    """The built-in pair's folders, when a command that writes --out reads them (no --model)."""
    if not getattr(args, "out", None) or getattr(args, "model", None) or args.command not in ("probe", "quantize", "bench"):
        return []
    from .models import builtin_paths

    return list(builtin_paths()[:2])


def _refuse(argv: list[str], msg: str, as_json: bool) -> int:
    ui.error(msg)
    if as_json:
        _json_error(argv, msg)
    return 2


def _json_error(argv: list[str], msg: str) -> None:
    import json

    cmd = next((a for a in argv if not a.startswith("-")), None)
    print(json.dumps({"command": cmd, "error": msg, "exit_code": 2}, allow_nan=False))


if __name__ == "__main__":
    sys.exit(main())
