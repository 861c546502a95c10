"""Figures for docs/host-int.md: kernel timings, model quality per weight format, decode speed vs HF,
and a cProfile of the engine's decode step.

    python tools/host_int_report.py kernel  [--threads 1,2] [--reps 60]
    python tools/host_int_report.py quality [--tokens 300] [--scale 1.0]
    python tools/host_int_report.py quality-trained [--tokens 300]   (the built-in trained target)
    python tools/host_int_report.py decode  [--tokens 64] [--threads 1]
    python tools/host_int_report.py model-verify [--threads 1,2] [--reps 60]   (verify of 8 rows / 1-row step)
    python tools/host_int_report.py profile [--tokens 32] [--format int8]
    python tools/host_int_report.py floor   [--reps 60]    (compute floor of the int8 mix, 1 and 2 threads)
    python tools/host_int_report.py layers  [--rows 1,8] [--reps 200]  (one step's GEMMs of the built-in pair)
    python tools/host_int_report.py medium  [--threads 1,2] [--reps 20] [--format int8]  (one step's GEMMs, medium config)
    python tools/host_int_report.py overhead [--reps 2000]   (per-call cost of an 8 x 8 layer)
    python tools/host_int_report.py pool-busy [--reps 200]   (2-thread median with a busy competitor / without)
    python tools/host_int_report.py ab --old-src DIR --run layers [--rounds 8]   (old tree vs this one)

Thread counts are arguments (this script is an edge; the library reads no environment). Timings are
minimums over repeats because the machine is shared.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.loop.generate import generate
from onebit_engine.measure.membw import ReadStream, copy_seconds
from onebit_engine.quant import FORMATS
from onebit_engine.hybrid.synthetic import hf_config_dict, random_weights, tiny_config
from onebit_engine.hybrid import Target


def medium_config():
    """hidden 768, 12 layers (3 delta-net : 1 attention), vocab 32000, intermediate 2048."""
    return tiny_config(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12, full_attention_interval=4,
        num_attention_heads=12, num_key_value_heads=4, head_dim=64, linear_num_key_heads=6,
        linear_num_value_heads=12, linear_key_head_dim=64, linear_value_head_dim=64,
    )


def _tmin(f, reps):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _cold_calls(b, p, small, xs, best):
    """Time one call per row count into best (minimum so far): each follows an untimed call on the small
    layer, so the kernel's workers are awake while p's weights stay as cold as the caller left them."""
    for m, x in xs.items():
        b.matmul(x, small)
        best[m] = min(best[m], _tmin(lambda: b.matmul(x, p), 1))


def _paths(args):
    """The native paths to report: --kernel, or each one that runs here (never the emulation: it is slow)."""
    if args.kernel:
        return args.kernel.split(",")
    try:
        from onebit_engine.gemm.host_int.backend import DISPATCH
    except ImportError:  # a tree from before the runtime dispatch (`ab`): its default
        return [None]
    from onebit_engine.gemm.host_int import native

    return [p for p in DISPATCH if native.available(p)] or [None]


def kernel(args):
    """1 / 8 / 16-row calls on a 4096 x 4096 layer, each repeat interleaved with a read stream at the same
    thread count (the roofline of a kernel that only reads its weights) and a 1-thread numpy copy.
    As in a decode loop, the layer's weights are cold (the stream and the copy evict them) while the
    kernel's pooled workers are awake: every timed call follows an untimed one on a small layer."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4096, 4096)).astype(np.float32)
    src = np.ones(256 * 2**20, np.uint8)  # the copy yardstick of earlier runs; it reads ~2x slower at 64-128 MiB here
    dst = np.empty_like(src)
    print("| path | format | threads | 1 row ms | 8 rows ms | 16 rows ms | 8-row / 1-row | 16-row / 1-row | 1-row GB/s "
          "| read stream GB/s | % of read stream | copy GB/s (r+w, 1 thread) | % of copy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    figures = {}
    for path, fmt, th in [(p, f, int(t)) for p in _paths(args) for f in FORMATS for t in args.threads.split(",")]:
        b = HostIntBackend(weight_format=fmt, threads=th, kernel=path)
        p, small = b.pack(w), b.pack(w[:1024])  # small: >= 256 KiB per thread in every format
        xs = {m: rng.standard_normal((m, 4096)).astype(np.float32) for m in (1, 8, 16)}
        best = {m: float("inf") for m in xs}
        stream = ReadStream(threads=th)
        t_read = t_copy = float("inf")
        for _ in range(args.reps):  # interleaved, so a busy spell hits every figure alike
            t_read = min(t_read, stream.seconds())
            t_copy = min(t_copy, copy_seconds(src, dst))
            _cold_calls(b, p, small, xs, best)
        stream.close()
        gbs, read, copy = _weight_bytes(p) / best[1] / 1e9, stream.nbytes / t_read / 1e9, 2 * src.nbytes / t_copy / 1e9
        print(f"| {b.kernel} | {fmt} | {th} | {best[1]*1e3:.2f} | {best[8]*1e3:.2f} | {best[16]*1e3:.2f} | "
              f"{best[8]/best[1]:.2f} | {best[16]/best[1]:.2f} | {gbs:.1f} | {read:.1f} | {gbs / read:.0%} | {copy:.1f} | "
              f"{gbs / copy:.0%} |", flush=True)
        mine = {f"{fmt}_t{th}_r{m}_ms": best[m] * 1e3 for m in best}
        mine.update({f"{fmt}_t{th}_r8_over_r1": best[8] / best[1], f"{fmt}_t{th}_r1_share_of_read": gbs / read})
        figures.update({f"{b.kernel}:{key}": v for key, v in mine.items()})
        for key, v in mine.items():  # unprefixed: the first path's, the one the dispatcher runs (fastest first)
            figures.setdefault(key, v)
    import json

    print(json.dumps(figures))


def _weight_bytes(p) -> int:
    """Bytes of codes a call reads (the tiles of a native path, the file format's data otherwise)."""
    return int(p.tiles.nbytes if hasattr(p, "tiles") else p.data.nbytes)


# One step's GEMMs (N x K) of the built-in pair (docs/trained-pair.md): the target's 3 delta-net layers
# (fused in_proj, out_proj), its attention layer (fused qkv, o_proj), 4 MLPs (fused gate_up, down), lm_head;
# the draft's projections as listed in the issue.
TARGET_LAYERS = [(584, 192)] * 3 + [(192, 192)] * 3 + [(576, 192), (192, 192)] + [(1024, 192)] * 4 + [(192, 512)] * 4 + [(4096, 192)]
DRAFT_LAYERS = [(192, 192), (96, 192), (512, 192), (192, 512), (48, 192), (192, 576), (32, 192), (4096, 192)]


def layers(args):
    """Sum of one step's GEMMs on the built-in pair's shapes (random weights), int8, each row count: the
    minimum over --reps repeats of the whole list in order, the row counts interleaved in every repeat.
    Prints one JSON line (for `ab`) after the table."""
    import json

    rng = np.random.default_rng(0)
    rows = [int(r) for r in args.rows.split(",")]
    out = {}
    b = HostIntBackend(weight_format=args.format, threads=int(args.threads.split(",")[0]), kernel=args.kernel or None)
    for label, shapes in (("target", TARGET_LAYERS), ("draft", DRAFT_LAYERS)):
        packed = [b.pack(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        xs = {m: {k: rng.standard_normal((m, k)).astype(np.float32) for k in {k for _, k in shapes}} for m in rows}
        best = {m: float("inf") for m in rows}
        for _ in range(args.reps):
            for m in rows:
                x = xs[m]
                t = time.perf_counter()
                for p in packed:
                    b.matmul(x[p.shape[1]], p)
                best[m] = min(best[m], time.perf_counter() - t)
        macs = sum(n * k for n, k in shapes)
        for m in rows:
            out[f"{label}_r{m}_ms"] = best[m] * 1e3
            print(f"| {b.kernel} | {label} ({len(shapes)} GEMMs, {macs / 1e6:.2f} M weights) | {m} | {best[m] * 1e3:.3f} ms | "
                  f"{m * macs / best[m] / 1e9:.1f} GMAC/s |", flush=True)
    print(json.dumps(out))


def medium_gemms(fmt, threads=1):
    """The backend and one step's GEMMs of the medium config (random weights, 110 MB in int8: more than L3),
    in the order a step runs them: lm_head, then per layer the mixer's in / qkv and out / o projection and
    the MLP's gate_up and down."""
    cfg = medium_config()
    b = HostIntBackend(weight_format=fmt, threads=threads)
    t = Target(cfg, random_weights(cfg, 0, 1.0), backend=b, row_set=8)
    lins = [t.lm_head]
    for layer in t.layers:
        m = layer.mixer
        lins += [getattr(m, "in_proj", None) or m.qkv_proj, getattr(m, "out_proj", None) or m.o_proj,
                 layer.mlp.gate_up, layer.mlp.down]
    return b, [lin.packed for lin in lins]


def medium(args):
    """The medium config's GEMMs of one step, whole list in order, at each row count and thread count: min and
    median over --reps repeats, the (threads, rows) cases in a shuffled order every repeat, each case after an
    untimed pass (pool and core awake, weights as cold as the list leaves them). Ends with a JSON line (`ab`)."""
    import json
    import random

    b, packed = medium_gemms(args.format)
    rng = np.random.default_rng(0)
    rows, ths = [int(r) for r in args.rows.split(",")], [int(t) for t in args.threads.split(",")]
    xs = {m: [rng.standard_normal((m, p.shape[1])).astype(np.float32) for p in packed] for m in rows}
    ts = {(th, m): [] for th in ths for m in rows}
    for _ in range(args.reps):
        for th, m in random.sample(sorted(ts), len(ts)):
            b.threads = th
            for x, p in zip(xs[m], packed):
                b.matmul(x, p)
            t = time.perf_counter()
            for x, p in zip(xs[m], packed):
                b.matmul(x, p)
            ts[(th, m)].append(time.perf_counter() - t)
    weights, nbytes = sum(p.shape[0] * p.shape[1] for p in packed), sum(_weight_bytes(p) for p in packed)
    out = {}
    print(f"{len(packed)} GEMMs, {weights / 1e6:.1f} M weights, {nbytes / 1e6:.1f} MB of {args.format} tiles")
    print("| format | threads | rows | min ms | median ms | GB/s (min) | GMAC/s (min) | rows / 1 row (min, median) |")
    print("|---|---|---|---|---|---|---|---|")
    for th in ths:
        for m in rows:
            v = ts[(th, m)]
            lo, med = min(v), float(np.median(v))
            r1 = ts.get((th, 1))
            ratio = f"{lo / min(r1):.2f}, {med / float(np.median(r1)):.2f}" if r1 else "-"
            print(f"| {args.format} | {th} | {m} | {lo * 1e3:.2f} | {med * 1e3:.2f} | {nbytes / lo / 1e9:.1f} | "
                  f"{m * weights / lo / 1e9:.1f} | {ratio} |", flush=True)
            out.update({f"t{th}_r{m}_min_ms": lo * 1e3, f"t{th}_r{m}_median_ms": med * 1e3})
    print(json.dumps(out))


def overhead(args):
    """Per-call cost of the smallest layer (8 x 8, 1 row): min over --reps calls, and the median."""
    import json

    b = HostIntBackend(threads=1, kernel=args.kernel or None)
    p = b.pack(np.ones((8, 8), np.float32))
    x = np.ones((1, 8), np.float32)
    ts = []
    for _ in range(args.reps):
        t = time.perf_counter()
        b.matmul(x, p)
        ts.append(time.perf_counter() - t)
    print(f"| {b.kernel} | 8 x 8, 1 row | min {min(ts) * 1e6:.2f} us | median {np.median(ts) * 1e6:.2f} us |")
    print(json.dumps({"overhead_min_us": min(ts) * 1e6, "overhead_median_us": float(np.median(ts)) * 1e6}))


def pool_busy(args):
    """int8 4096 x 4096 1-row calls, for each of --threads (default here 1 and 2) on its own: the median
    with no competitor, with a competitor spinning on both cores (2 separate processes), and without
    again; ratio = busy / the quieter of the two. The 1-thread ratio is the yardstick: what a fair share
    of a busy core costs any call."""
    import json
    import subprocess
    import sys

    w = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    x = np.ones((1, 4096), np.float32)
    out = {}
    for th in [int(t) for t in (args.threads if args.threads != "1" else "1,2").split(",")]:
        b = HostIntBackend(weight_format="int8", threads=th, kernel=args.kernel or None)
        p, small = b.pack(w), b.pack(w[:1024])

        def median_ms():
            ts = []
            for _ in range(args.reps):
                b.matmul(x, small)
                t = time.perf_counter()
                b.matmul(x, p)
                ts.append(time.perf_counter() - t)
            return float(np.median(ts)) * 1e3

        quiet = median_ms()
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            time.sleep(0.5)
            busy = median_ms()
        finally:
            for s in spinners:
                s.kill()
                s.wait()
        quiet2 = median_ms()
        q = min(quiet, quiet2)
        out[f"t{th}_ratio"], out[f"t{th}_busy_ms"], out[f"t{th}_quiet_ms"] = busy / q, busy, q
        print(f"| {b.kernel} | {th} thread(s), int8 4096 x 4096, 1 row | quiet {quiet:.3f} / {quiet2:.3f} ms | "
              f"busy {busy:.3f} ms | busy / quiet {busy / q:.2f} |", flush=True)
    print(json.dumps(out))


def ab(args):
    """Run `--run` (a subcommand that ends with a JSON line) alternately on --old-src and on this tree's
    src, in processes started in a shuffled order each round; minimums over --rounds rounds per figure."""
    import json
    import os
    import random
    import subprocess
    import sys
    from pathlib import Path

    trees = {"old": str(Path(args.old_src).resolve()), "new": str(Path(__file__).resolve().parents[1] / "src")}
    cmd = [sys.executable, __file__, args.run, "--reps", str(args.reps), "--rows", args.rows, "--threads", args.threads,
           "--format", args.format]
    best: dict = {"old": {}, "new": {}}
    for _ in range(args.rounds):
        for name in random.sample(list(trees), 2):
            env = dict(os.environ, PYTHONPATH=trees[name])
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            for key, v in json.loads(res.stdout.strip().splitlines()[-1]).items():
                best[name][key] = min(best[name].get(key, float("inf")), v)
    print(f"| figure | old ({args.old_src}) | new | new / old |")
    print("|---|---|---|---|")
    for key in best["old"]:
        print(f"| {key} | {best['old'][key]:.3f} | {best['new'][key]:.3f} | {best['new'][key] / best['old'][key]:.2f} |")


def floor(args):
    """The int8 8-row/1-row ratio this CPU allows: tools/kernel_floor.c times the kernel's instruction mix
    with activations held in L1 and cold weights (a floor for 8 rows) on 1 and 2 threads, next to the real
    kernel's 1-row and 8-row times at the same thread counts (measured right after, in this process)."""
    import json
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    src = Path(__file__).with_name("kernel_floor.c")
    with tempfile.TemporaryDirectory() as d:
        exe = Path(d) / "kernel_floor"
        subprocess.run([sys.executable, "-m", "ziglang", "cc", "-O2", "-mavx2", "-o", str(exe), str(src)], check=True)
        probe = json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4096, 4096)).astype(np.float32)
    real = {}
    for th in (1, 2):
        b = HostIntBackend(weight_format="int8", threads=th)
        p, small = b.pack(w), b.pack(w[:1024])
        xs = {m: rng.standard_normal((m, 4096)).astype(np.float32) for m in (1, 8)}
        best = {m: float("inf") for m in xs}
        stream = ReadStream(threads=th)
        for _ in range(args.reps):  # cold weights, as in the kernel table (the read stream evicts them)
            stream.seconds()
            _cold_calls(b, p, small, xs, best)
        stream.close()
        real[th] = (best[1] * 1e3, best[8] * 1e3)
    print(f"multiply uops: vpmaddwd {probe['vpmaddwd_per_ns']:.2f}/ns, vpmaddubsw {probe['vpmaddubsw_per_ns']:.2f}/ns; "
          f"vpmaddwd + vpsignb on independent chains {probe['vpmaddwd_with_vpsignb_per_ns']:.2f} uops/ns in all "
          f"(no more than vpmaddwd alone: vpsignb runs on the multiply pipes), "
          f"vpmaddwd + vpxor {probe['vpmaddwd_with_vpxor_per_ns']:.2f}/ns; "
          f"vpmaddwd on 2 threads {probe['vpmaddwd_per_ns_2t']:.2f}/ns in all "
          f"({probe['vpmaddwd_per_ns_2t'] / probe['vpmaddwd_per_ns']:.2f}x one thread)")
    print()
    one, eight = real[1]
    print("| int8, 4096 x 4096, 1 thread | ms | / real 1-row |")
    print("|---|---|---|")
    print(f"| real kernel, 1 row | {one:.2f} | 1.00 |")
    print(f"| real kernel, 8 rows | {eight:.2f} | {eight / one:.2f} |")
    # the xor mix issues 4 vector uops per row and 32 MACs (maddubs, madd, xor, add): at the measured rate of
    # vector uops when multiplies and non-multiplies mix, that is its floor, whatever the memory does
    probe["uop_bound_8rows_ms"] = 8 * 4096 * 4096 / 32 * 4 / probe["vpmaddwd_with_vpxor_per_ns"] / 1e6
    for key, what in (("sign_mix_8rows_ms", "sign-trick mix (the kernel's, 1-2 rows), 8 rows, activations in L1"),
                      ("xor_mix_8rows_ms", "xor mix (the kernel's, 3+ rows), 8 rows, activations in L1"),
                      ("i16_mix_8rows_ms", "int16 vpmaddwd mix, 8 rows, activations in L1"),
                      ("uop_bound_8rows_ms", "8 rows at the measured mixed vector-uop rate (4 uops per 32 MACs)"),
                      ("multiply_bound_8rows_ms", "8 rows at the multiply-uop peak (2 per 32 MACs, nothing else)")):
        print(f"| {what} | {probe[key]:.2f} | {probe[key] / one:.2f} |")
    one, eight = real[2]
    print()
    print("| int8, 4096 x 4096, 2 threads | ms | / real 1-row |")
    print("|---|---|---|")
    print(f"| real kernel, 1 row | {one:.2f} | 1.00 |")
    print(f"| real kernel, 8 rows | {eight:.2f} | {eight / one:.2f} |")
    print(f"| xor mix, 8 rows, activations in L1 | {probe['xor_mix_8rows_2t_ms']:.2f} | {probe['xor_mix_8rows_2t_ms'] / one:.2f} |")


def _target(cfg, backend, scale, seed=0):
    return Target(cfg, random_weights(cfg, seed, scale), backend=backend, row_set=1)


class _Greedy:
    """The reference's greedy continuation of one prompt and its teacher-forced logits."""

    def __init__(self, ref, prompt, tokens):
        self.prompt, self.tokens = list(prompt), generate(ref, prompt, max_new_tokens=tokens, stop_tokens=[]).tokens
        self.logits = self._logits(ref)

    def _logits(self, t):
        seq = self.prompt + self.tokens
        return t.forward(seq, t.new_state()).logits[len(self.prompt) - 1:]

    def compare(self, t) -> tuple:
        """(sum sq logit error, sum sq reference logit, max abs error, top-1 agreement, greedy tokens before the
        first divergence, greedy agreement) of target t against the reference."""
        lq = self._logits(t)
        g = generate(t, self.prompt, max_new_tokens=len(self.tokens), stop_tokens=[]).tokens
        same = np.asarray(g) == np.asarray(self.tokens)
        return (float(np.sum((lq - self.logits) ** 2)), float(np.sum(self.logits**2)),
                float(np.abs(lq - self.logits).max()), float(np.mean(lq.argmax(1) == self.logits.argmax(1))),
                int(np.argmin(same)) if not same.all() else len(g), float(same.mean()))


def _quality_row(label, fmt, results) -> str:
    """One table row from the compare() tuples of one or more prompts (errors pooled, agreements averaged)."""
    a = np.asarray(results, dtype=np.float64)
    rel = np.sqrt(a[:, 0].sum() / a[:, 1].sum())
    return (f"| {label} | {fmt} | {rel:.4f} | {a[:, 2].max():.3f} | {a[:, 3].mean():.3f} | {a[:, 4].mean():.1f} | "
            f"{a[:, 5].mean():.3f} |")


def quality(args):
    configs = {"tiny": tiny_config(), "medium": medium_config()}
    print(f"| config | format | rel. RMS logit error | max abs logit error | top-1 agreement (teacher-forced) | "
          f"greedy tokens identical before first divergence (of {args.tokens}) | greedy agreement |")
    for cname, cfg in configs.items():
        ref = _target(cfg, "reference", args.scale)
        case = _Greedy(ref, np.random.default_rng(1).integers(0, cfg.vocab_size, 8).tolist(), args.tokens)
        for fmt in FORMATS:
            print(_quality_row(cname, fmt, [case.compare(_target(cfg, HostIntBackend(weight_format=fmt), args.scale))]),
                  flush=True)


def quality_trained(args):
    """The same columns on the built-in *trained* target (docs/trained-pair.md): float16 weights in float32
    as the reference, each format quantized from them, on the pair's held-out default prompts."""
    from onebit_engine.default_model import builtin_paths, default_prompts, load_tokenizer
    from onebit_engine.hybrid import load_target

    folder, tok = builtin_paths()[0], load_tokenizer()
    ref = load_target(folder, row_set=1)
    quant = {fmt: load_target(folder, backend=HostIntBackend(weight_format=fmt), row_set=1) for fmt in FORMATS}
    print(f"| prompt set | format | rel. RMS logit error | max abs logit error | top-1 agreement (teacher-forced) | "
          f"greedy tokens identical before first divergence (mean over prompts, of {args.tokens}) | greedy agreement |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("code", "prose"):
        cases = [_Greedy(ref, tok.encode(p["text"]), args.tokens) for p in default_prompts(kind)]
        for fmt, t in quant.items():
            print(_quality_row(f"{kind} ({len(cases)} default prompts)", fmt, [c.compare(t) for c in cases]), flush=True)


def _hf_model(cfg, threads):
    import torch
    from transformers import AutoConfig, Qwen3_5ForCausalLM

    torch.set_num_threads(threads)
    d = hf_config_dict(cfg)
    hcfg = AutoConfig.for_model(d.pop("model_type"), **{k: v for k, v in d.items() if k != "architectures"})
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(hcfg).eval()


def hf_decoder(cfg, tokens, threads, prompt_len=8):
    """A function that runs one HF greedy decode and returns its decode rate (prefill excluded)."""
    import torch

    model = _hf_model(cfg, threads)
    ids = torch.tensor([list(range(1, prompt_len + 1))])

    def run():
        with torch.inference_mode():
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False, use_cache=True)
            t_prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, use_cache=True)
            total = time.perf_counter() - t0
        return (out.shape[1] - prompt_len - 1) / (total - t_prefill)

    run()  # warm-up
    return run


def engine_decoder(cfg, fmt, tokens, threads, prompt_len=8):
    t = _target(cfg, HostIntBackend(weight_format=fmt, threads=threads), 1.0)
    prompt = list(range(1, prompt_len + 1))
    generate(t, prompt, max_new_tokens=4)  # warm-up
    return lambda: generate(t, prompt, max_new_tokens=tokens, stop_tokens=[]).tokens_per_s


def decode(args):
    """Best of --reps interleaved repeats per system (a busy spell on the shared VM hits all alike)."""
    cfg = medium_config()
    runs = {"hf": hf_decoder(cfg, args.tokens, args.threads)}
    runs.update({fmt: engine_decoder(cfg, fmt, args.tokens, args.threads) for fmt in FORMATS})
    best = {name: 0.0 for name in runs}
    for _ in range(args.reps):
        for name, run in runs.items():
            best[name] = max(best[name], run())
    hf = best["hf"]
    print(f"best of {args.reps} interleaved repeats of {args.tokens} tokens each")
    print()
    print(f"HF transformers fp32 (torch threads={args.threads}): {hf:.1f} tokens/s")
    for fmt in FORMATS:
        print(f"host-int {fmt} (row_set=1, threads={args.threads}): {best[fmt]:.1f} tokens/s = {best[fmt] / hf:.2f}x HF")
    import json

    print(json.dumps({"hf_tokens_per_s": hf, **{f"{fmt}_over_hf": best[fmt] / hf for fmt in FORMATS}}))


def model_verify(args):
    """The issue's question at model level: a verify of 8 rows (row set 8, one GEMM row set) against the
    fastest plain step (1 row, row set 1) of the medium config, same weights and backend. Each repeat
    times both on copies of one prefilled state (the copy is not timed); minimums of --reps."""
    cfg = medium_config()
    weights = random_weights(cfg, 0, 1.0)
    prompt, rows = list(range(1, 9)), list(range(9, 17))
    print("| backend | threads | plain step, 1 row, ms | verify, 8 rows, ms | verify / step |")
    print("|---|---|---|---|---|")
    figures = {}
    systems = [("reference (float32 numpy)", "reference", 1)]
    systems += [(f"host-int {fmt}", fmt, int(th)) for fmt in FORMATS for th in args.threads.split(",")]
    for label, fmt, th in systems:
        backend = "reference" if fmt == "reference" else HostIntBackend(weight_format=fmt, threads=th)
        one, eight = (Target(cfg, weights, backend=backend, row_set=rs) for rs in (1, 8))
        s1, s8 = one.new_state(), eight.new_state()
        one.forward(prompt, s1)
        eight.forward(prompt, s8)
        t_step = t_verify = float("inf")
        for _ in range(args.reps):
            a, b = s1.copy(), s8.copy()
            t = time.perf_counter()
            one.forward(rows[:1], a)
            t_step = min(t_step, time.perf_counter() - t)
            t = time.perf_counter()
            eight.verify(rows, b)
            t_verify = min(t_verify, time.perf_counter() - t)
        print(f"| {label} | {th} | {t_step * 1e3:.2f} | {t_verify * 1e3:.2f} | {t_verify / t_step:.2f} |", flush=True)
        figures[f"{fmt}_t{th}"] = {"step_ms": t_step * 1e3, "verify_ms": t_verify * 1e3}
    # The figure: a verify against plain decoding at its fastest (its best thread count), per format.
    for fmt in {k.rsplit("_t", 1)[0] for k in figures}:
        runs = {k: v for k, v in figures.items() if k.rsplit("_t", 1)[0] == fmt}
        fastest = min(v["step_ms"] for v in runs.values())
        figures[f"{fmt}_best_verify_over_fastest_step"] = min(v["verify_ms"] for v in runs.values()) / fastest
    import json

    print(json.dumps(figures))


def profile(args):
    cfg = medium_config()
    t = _target(cfg, HostIntBackend(weight_format=args.format, threads=1), 1.0)
    generate(t, [1, 2, 3], max_new_tokens=2)
    pr = cProfile.Profile()
    pr.enable()
    r = generate(t, [1, 2, 3], max_new_tokens=args.tokens, stop_tokens=[])
    pr.disable()
    print(f"{r.tokens_per_s:.1f} tokens/s under the profiler")
    pstats.Stats(pr).sort_stats("tottime").print_stats(18)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["kernel", "model-verify", "quality", "quality-trained", "decode", "profile", "floor",
                                     "layers", "medium", "overhead", "pool-busy", "ab"])
    ap.add_argument("--kernel", default="", help="host-int path(s), comma separated (default: each native one here)")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--old-src", default="")
    ap.add_argument("--run", default="layers", help="the subcommand `ab` runs on both trees")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--format", default="int8", choices=FORMATS)
    args = ap.parse_args()
    if args.what in ("decode", "profile"):
        args.threads = int(args.threads)
    args.tokens = args.tokens or {"quality": 300, "quality-trained": 300, "decode": 64, "profile": 32}.get(args.what, 0)
    {"kernel": kernel, "model-verify": model_verify, "quality": quality, "quality-trained": quality_trained, "decode": decode,
     "profile": profile, "floor": floor, "layers": layers, "medium": medium, "overhead": overhead, "pool-busy": pool_busy, "ab": ab}[args.what](args)


if __name__ == "__main__":
    main()
