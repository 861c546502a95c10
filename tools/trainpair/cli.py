"""Train the built-in target + DFlash 2 draft pair that ships in ``src/onebit_engine/data/builtin/``.

One command, CPU torch, seeded (see docs/trained-pair.md)::

    python tools/train_pair.py            # everything: data, tokenizer, target, draft, eval
    python tools/train_pair.py --quick    # a smoke run into a scratch folder (minutes)

Stages (in order; each lives in its own module of tools/trainpair/):

1. data       (data.py) Python standard library source of *this* interpreter (rule + per-file sha256 in
              TRAINING.json) and prose (the ``pydoc_data.topics`` reference texts of the same stdlib,
              and Debian's /usr/share/common-licenses). A fixed hash rule holds files out (never trained on).
2. tokenizer  (tokenizer.py) byte-level BPE (``tokenizers``), 4096 ids, specials <|endoftext|>=0 <|pad|>=1
              <|mask|>=2. By default the shipped data/builtin/tokenizer.json is reused (prompts and tests
              depend on its ids); --retrain-tokenizer trains it again from the training documents.
3. target     (target_train.py) HF transformers ``Qwen3_5ForCausalLM`` (Gated DeltaNet x3 + gated
              attention x1), trained on random 256-token windows, then rounded to float16 (what ships).
4. draft data (draft_train.py) the float16-rounded target greedily continues prompts cut from the training
              text; its residual taps (after layers ``target_layer_ids``) are recorded (DFlash training data).
5. draft      (draft_model.py, draft_train.py) DFlash 2 (z-lab layout): block CE on [anchor, MASK x (B-1)]
              against the target's greedy continuation + selector CE over the top-k candidates given the
              true predecessor.
6. eval       (evaluate.py) held-out loss / perplexity; greedy continuations of held-out prompts (distinct
              4-grams); teacher-forced acceptance at k = 3, 7, 15 (torch); all written to TRAINING.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .common import BUILTIN, EOT_ID, MASK_ID, PAD_ID, PROMPTS_JSON, SEED, SPECIALS, VOCAB, every25, round_to_f16_
from .data import code_prompts, collect_data, prose_prompts
from .draft_train import draft_hparams, make_draft_data, save_draft, target_taps, train_draft
from .evaluate import distinct4, teacher_forced_acceptance
from .target_train import greedy_one, heldout_loss, load_target_torch, save_target, train_target, unlikelihood_finetune
from .tokenizer import encode_docs, train_tokenizer


# ---- arguments -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=BUILTIN, help="output folder (default: the package's data/builtin)")
    ap.add_argument("--prompts-out", type=Path, default=PROMPTS_JSON)
    ap.add_argument("--quick", action="store_true", help="smoke run: few steps, into /tmp/onebit-train-quick")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads; the shipped pair used 2 (bits depend on it). On a busy 2-core machine "
                         "2 OpenMP threads can run 3x slower than 1")
    add_target_args(ap)
    add_draft_args(ap)
    ap.add_argument("--eval-code", type=int, default=24)
    ap.add_argument("--eval-prose", type=int, default=12)
    ap.add_argument("--reuse-target", action="store_true", help="skip stages 2-3 when --out already holds them")
    return ap


def add_target_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--target-steps", type=int, default=1200)
    ap.add_argument("--target-batch", type=int, default=8)
    ap.add_argument("--target-lr", type=float, default=4e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--prose-share", type=float, default=0.12,
                    help="probability that a target training window is drawn from the prose-only stream "
                         "(0: uniform windows of the mixed stream, where prose is ~7%%)")
    ap.add_argument("--tokenizer", type=Path, default=BUILTIN / "tokenizer.json",
                    help="reuse this tokenizer (default: the shipped one; the default prompts and tests depend "
                         "on its ids); retrained only with --retrain-tokenizer or when the file is missing")
    ap.add_argument("--retrain-tokenizer", action="store_true")
    ap.add_argument("--ul-steps", type=int, default=150,
                    help="sequence-level unlikelihood fine-tuning steps after the target's CE training (0: off)")
    ap.add_argument("--ul-lr", type=float, default=3e-4)
    ap.add_argument("--ul-batch", type=int, default=8)
    ap.add_argument("--ul-prompt-len", type=int, default=32)
    ap.add_argument("--ul-gen-len", type=int, default=64)
    ap.add_argument("--ul-weight", type=float, default=1.0)


def add_draft_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--draft-seqs", type=int, default=1536)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--draft-steps", type=int, default=2400)
    ap.add_argument("--draft-batch", type=int, default=16)
    ap.add_argument("--blocks-per-seq", type=int, default=8)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--loss-gamma", type=float, default=7.0, help="block CE weight of row j: exp(-(j-1)/gamma)")
    ap.add_argument("--selector-weight", type=float, default=1.0)


def parse_args(argv=None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.out = Path("/tmp/onebit-train-quick/builtin")
        args.prompts_out = Path("/tmp/onebit-train-quick/default.json")
        args.target_steps, args.draft_steps, args.draft_seqs = 20, 20, 64
        args.ul_steps = min(args.ul_steps, 5)
        args.eval_code, args.eval_prose = 4, 2
    return args


# ---- what the stages hand on -----------------------------------------------------------------------
class Log:
    """Prints each message with the seconds since the run started."""

    def __init__(self) -> None:
        self.t_start = time.time()

    def __call__(self, msg: str) -> None:
        print(f"[{time.time() - self.t_start:7.1f}s] {msg}", flush=True)


@dataclass(frozen=True)
class Streams:
    """Token streams: the shuffled training documents, the prose-only training stream, the held-out ones."""

    train: np.ndarray
    prose: np.ndarray
    held_code: np.ndarray
    held_prose: np.ndarray


@dataclass(frozen=True)
class TargetResult:
    model: object  # the float16-rounded target, loaded back in float32
    loss_curve: list
    seconds: float
    parameters: int
    heldout: dict
    folder: Path


@dataclass(frozen=True)
class DraftResult:
    model: object  # the float16-rounded draft
    hp: dict
    block_losses: list
    selector_losses: list
    seconds: float
    parameters: int
    train_distinct4: float
    folder: Path


# ---- stages ----------------------------------------------------------------------------------------
def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    log = Log()
    args.out.mkdir(parents=True, exist_ok=True)
    times: dict = {}
    data, train_docs = stage_data(log, times)
    tok, streams = stage_tokenizer(args, data, train_docs, log, times)
    prompts = stage_prompts(args, data)
    target = stage_target(args, streams, log, times)
    greedy, sample = stage_greedy(target.model, tok, prompts, log)
    draft = stage_draft(args, target.model, streams.train, log, times)
    acc = stage_eval(target.model, draft, greedy, log, times)
    times["total_s"] = time.time() - log.t_start
    write_report(args, data, tok, target, draft, acc, sample, times, log)
    return 0


def stage_data(log: Log, times: dict) -> tuple[dict, list[str]]:
    t = time.time()
    data = collect_data()
    log(f"data: {data['manifest']['counts']}")
    train_docs = [t_ for _, t_ in data["code_train"]] + [t_ for _, t_ in data["prose_train"]]
    times["data_s"] = time.time() - t
    return data, train_docs


def stage_tokenizer(args, data: dict, train_docs: list[str], log: Log, times: dict):
    t = time.time()
    tok = load_or_train_tokenizer(args, train_docs, log)
    rng = np.random.default_rng(SEED)
    stream = encode_docs(tok, [train_docs[i] for i in rng.permutation(len(train_docs))])
    prose_docs = [t_ for _, t_ in data["prose_train"]]
    prose_stream = encode_docs(tok, [prose_docs[i] for i in rng.permutation(len(prose_docs))])
    held_code = encode_docs(tok, [t_ for _, t_ in data["code_held"]])
    held_prose = encode_docs(tok, [t_ for _, t_ in data["prose_held"]])
    times["tokenizer_s"] = time.time() - t
    log(f"tokenizer: {tok.get_vocab_size()} ids; train stream {len(stream):,} tokens; held-out code "
        f"{len(held_code):,} / prose {len(held_prose):,} tokens ({times['tokenizer_s']:.0f}s)")
    return tok, Streams(stream, prose_stream, held_code, held_prose)


def load_or_train_tokenizer(args, train_docs: list[str], log: Log):
    from tokenizers import Tokenizer

    out = args.out
    if args.reuse_target and (out / "tokenizer.json").exists():
        tok = Tokenizer.from_file(str(out / "tokenizer.json"))
        log(f"tokenizer: reusing {out / 'tokenizer.json'} (--reuse-target)")
    elif not args.retrain_tokenizer and args.tokenizer.exists():
        tok = Tokenizer.from_file(str(args.tokenizer))
        if args.tokenizer.resolve() != (out / "tokenizer.json").resolve():
            shutil.copyfile(args.tokenizer, out / "tokenizer.json")
        log(f"tokenizer: reusing {args.tokenizer} (sha256 {hashlib.sha256(args.tokenizer.read_bytes()).hexdigest()[:16]})")
    else:
        tok = train_tokenizer(train_docs, VOCAB)
        tok.save(str(out / "tokenizer.json"))
    return tok


def stage_prompts(args, data: dict) -> dict[str, list[dict]]:
    """The held-out evaluation prompts by kind; writes the default prompts (a spread subset) to --prompts-out."""
    cp = code_prompts(data["code_held"], args.eval_code)
    pp = prose_prompts(data["prose_held"], args.eval_prose)
    n_code_default, n_prose_default = (10, 6) if not args.quick else (2, 1)
    default_prompts = ([cp[i] for i in np.linspace(0, len(cp) - 1, n_code_default).round().astype(int)]
                       + [pp[i] for i in np.linspace(0, len(pp) - 1, n_prose_default).round().astype(int)])
    args.prompts_out.parent.mkdir(parents=True, exist_ok=True)
    args.prompts_out.write_text(json.dumps({
        "description": "Default prompts of the built-in pair: held-out Python stdlib code (documented function / "
                       "class openings) and held-out prose (pydoc topics, licenses); none was trained on. "
                       "See docs/trained-pair.md.",
        "python_version": platform.python_version(),
        "prompts": default_prompts,
    }, indent=2) + "\n")
    return {"code": cp, "prose": pp}


def stage_target(args, streams: Streams, log: Log, times: dict) -> TargetResult:
    t = time.time()
    tdir = args.out / "target"
    stats_file = tdir / "train_stats.json"
    if args.reuse_target and (tdir / "model.safetensors").exists() and stats_file.exists():
        prev = json.loads(stats_file.read_text())
        t_losses, t_time, t_params = prev["loss_curve"], prev["seconds"], prev["parameters"]
        log("target: reusing the saved target (--reuse-target)")
    else:
        t_losses, t_time, t_params = train_and_save_target(args, streams, tdir, log)
    target = load_target_torch(tdir)
    times["target_s"] = time.time() - t
    ev = {"code": heldout_loss(target, streams.held_code, args.seq_len, 64 if not args.quick else 4),
          "prose": heldout_loss(target, streams.held_prose, args.seq_len, 32 if not args.quick else 4)}
    log(f"target held-out: {ev}")
    return TargetResult(target, t_losses, t_time, t_params, ev, tdir)


def train_and_save_target(args, streams: Streams, tdir: Path, log: Log) -> tuple[list, float, int]:
    """CE training, unlikelihood fine-tuning, float16 rounding; writes the folder and its train_stats.json."""
    model, t_losses, t_time, t_params = train_target(streams.train, args, log, streams.prose)
    ul_stats = unlikelihood_finetune(model, streams.train, args, log, streams.prose) if args.ul_steps > 0 else None
    round_to_f16_(model)
    save_target(model, tdir)
    t_losses = every25(t_losses)
    (tdir / "train_stats.json").write_text(json.dumps({
        "loss_curve": t_losses, "seconds": t_time, "parameters": t_params, "steps": args.target_steps,
        "unlikelihood": ul_stats}) + "\n")
    return t_losses, t_time, t_params


def stage_greedy(target, tok, prompts: dict[str, list[dict]], log: Log) -> tuple[dict, dict]:
    """(prompt ids, 128 greedy tokens) per held-out prompt by kind, and the first continuation's text."""
    def enc(p):
        return tok.encode(p["text"]).ids

    greedy = {}
    for kind, plist in prompts.items():
        greedy[kind] = [(enc(p), greedy_one(target, enc(p), 128)) for p in plist]
        d4 = [distinct4(g) for _, g in greedy[kind]]
        log(f"greedy {kind}: distinct-4-gram share mean {np.mean(d4):.3f} min {np.min(d4):.3f}")
    return greedy, {kind: tok.decode(greedy[kind][0][1]) for kind in greedy}


def stage_draft(args, target, stream: np.ndarray, log: Log, times: dict) -> DraftResult:
    hp = draft_hparams(target.config)
    t = time.time()
    seqs = make_draft_data(target, stream, args.draft_seqs, args.prompt_len, args.gen_len, log)
    taps = target_taps(target, seqs, hp["target_layer_ids"])
    times["draft_data_s"] = time.time() - t
    d4_train = float(np.mean([distinct4(s[args.prompt_len:].tolist()) for s in seqs]))
    log(f"draft data: {seqs.shape} tokens, taps {taps.shape} ({times['draft_data_s']:.0f}s); "
        f"distinct-4 of the continuations {d4_train:.3f}")
    t = time.time()
    draft, d_losses, s_losses, d_time, d_params = train_draft(target, seqs, taps, args.prompt_len, hp, args, log)
    round_to_f16_(draft)
    save_draft(draft, hp, target.config, args.out / "draft")
    times["draft_s"] = time.time() - t
    return DraftResult(draft, hp, d_losses, s_losses, d_time, d_params, d4_train, args.out / "draft")


def stage_eval(target, draft: DraftResult, greedy: dict, log: Log, times: dict) -> dict:
    t = time.time()
    acc = {}
    for kind in ("code", "prose"):
        ps = [g[0] for g in greedy[kind]]
        cs = [g[1] for g in greedy[kind]]
        acc[kind] = teacher_forced_acceptance(target, draft.model, draft.hp, ps, cs, (3, 7, 15))
        acc[kind]["distinct4_mean"] = float(np.mean([distinct4(c_) for c_ in cs]))
        acc[kind]["prompts"] = len(ps)
        log(f"acceptance {kind}: " + ", ".join(f"k={k}: tau {acc[kind][k]['tokens_per_round']:.2f}" for k in ("3", "7", "15"))
            + f" (distinct-4 {acc[kind]['distinct4_mean']:.3f})")
    times["eval_s"] = time.time() - t
    return acc


# ---- TRAINING.json ---------------------------------------------------------------------------------
def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir())


def write_report(args, data: dict, tok, target: TargetResult, draft: DraftResult, acc: dict, sample: dict,
                 times: dict, log: Log) -> None:
    report = {
        "recipe": recipe(args, tok, target.model, draft.hp),
        "data_manifest": data["manifest"],
        "target": {"parameters": target.parameters, "train_seconds": target.seconds,
                   "train_loss_curve": target.loss_curve, "final_train_loss": target.loss_curve[-1],
                   "heldout": target.heldout, "file_bytes": folder_bytes(target.folder)},
        "draft": {"parameters": draft.parameters, "train_seconds": draft.seconds,
                  "block_ce_curve": every25(draft.block_losses),
                  "selector_ce_curve": every25(draft.selector_losses),
                  "train_continuation_distinct4": draft.train_distinct4, "file_bytes": folder_bytes(draft.folder)},
        "eval": {"greedy_new_tokens": 128, "teacher_forced_acceptance": acc,
                 "sample_greedy_text": sample,
                 "note": "teacher-forced: every anchor of the target's greedy continuation of a held-out prompt; "
                         "tokens_per_round = 1 + mean accepted (capped at k)"},
        "times_s": times,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
    }
    (args.out / "TRAINING.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"done in {times['total_s']:.0f}s; target {folder_bytes(target.folder) / 1e6:.2f} MB, "
        f"draft {folder_bytes(draft.folder) / 1e6:.2f} MB")


def recipe(args, tok, target, hp: dict) -> dict:
    import tokenizers
    import torch
    import transformers

    return {
        "command": "python tools/train_pair.py" + (" --quick" if args.quick else ""),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "seed": SEED,
        "seeds": {"torch_target_init": SEED, "target_windows": SEED + 1, "draft_prompts": SEED + 2,
                  "torch_draft_init": SEED + 3, "draft_batches": SEED + 4, "doc_order": SEED},
        "tokenizer": {"type": "byte-level BPE (tokenizers)", "vocab_size": tok.get_vocab_size(),
                      "specials": dict(zip(SPECIALS, [EOT_ID, PAD_ID, MASK_ID])), "min_frequency": 2},
        "target": {"class": "transformers Qwen3_5ForCausalLM", "config": target.config.to_dict() if hasattr(target.config, "to_dict") else {},
                   "objective": "next-token CE on random windows of the training stream (a share "
                                "prose_share of them from the prose-only stream)", "optimizer":
                   "AdamW(0.9, 0.95), wd 0.1 on matrices, clip 1.0, warmup + cosine to 10%",
                   "stored": "float16 (trained in float32, rounded before the draft sees it)"},
        "draft": {"hparams": hp, "objective": "block CE rows 1..B-1 weighted exp(-(j-1)/gamma) against the "
                  "target's greedy continuation of the anchor (blocks of 4, 8 or 16 rows) + selector CE over the "
                  "top-k candidates given the true predecessor", "data":
                  f"{args.draft_seqs} prompts of {args.prompt_len} tokens from the training stream, "
                  f"{args.gen_len} greedy tokens each by the float16 target; taps after target layers "
                  f"{hp['target_layer_ids']}", "stored": "float16"},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "numpy": np.__version__},
        "threads": args.threads,
    }
