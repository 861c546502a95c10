#!/usr/bin/env python
"""Where a speculative round's time goes, against one plain step, on the built-in trained pair.

    python tools/round_report.py [--backend host-int] [--threads 1] [--reps 200] [--kind code]

For every k: the draft (propose k), the verify of k + 1 rows (with its lm_head), the commit of the
expected accepted rows and the context append, each the median over --reps calls on copies of one
prefilled state, all interleaved in a shuffled order; one plain step (1 row) the same way. E(k) comes
from the shipped pair's held-out acceptance (``default_model.acceptance_profile``, or --kind for one prompt
kind); the predicted speedup is E(k) x step / round. Also: the same step and verify with every GEMM
replaced by a no-op, to split each into GEMM time and the rest (per-call Python, norms, recurrences).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from onebit_engine import default_model
from onebit_engine.gemm import get_backend  # noqa: E402
from onebit_engine.measure import bench_runner, tune
from onebit_engine.hybrid import load_target  # noqa: E402


class NoGemm:
    """A backend whose products cost nothing (zeros): what is left of a call is everything but the GEMMs."""

    name, exact, row_invariant = "no-gemm", True, True

    def pack(self, w, name=""):
        return np.asarray(w.dequantize() if hasattr(w, "dequantize") else w).shape

    def matmul(self, x, shape):
        return np.zeros((x.shape[0], shape[0]), np.float32)

    def describe(self):
        return {"backend": self.name}


def _profile(kind: str | None, backend: str) -> list[float]:
    if kind is None:
        return default_model.acceptance_profile(backend)
    name = "EVAL_NUMPY_HOST_INT.json" if backend == "host-int" else "EVAL_NUMPY.json"
    runs = json.loads((default_model.BUILTIN_DIR / name).read_text())["kinds"][kind]["by_k"]
    return runs[max(runs, key=int)]["acceptance_by_position"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="host-int")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--kind", choices=["code", "prose"], help="acceptance of one prompt kind (default: both pooled)")
    ap.add_argument("--ks", default="1,2,3,4,5,7")
    args = ap.parse_args()
    b = get_backend(args.backend, threads=args.threads) if args.backend == "host-int" else get_backend(args.backend)
    row_set = 16 if getattr(b, "row_invariant", False) else 8
    target, draft = default_model.load_builtin_pair(backend=b, row_set=row_set)
    plain = target if target.row_invariant else default_model.load_builtin_pair(backend=b, row_set=1)[0]
    bare = load_target(default_model.builtin_paths()[0], backend=NoGemm(), row_set=row_set)
    tok = default_model.load_tokenizer()
    prompt = tok.encode(default_model.default_code_prompt())
    profile = _profile(args.kind, args.backend)
    ks = [int(k) for k in args.ks.split(",")]

    states = {}
    for name, t in (("target", target), ("plain", plain), ("bare", bare)):
        st = t.new_state()
        out = t.forward(prompt, st)
        states[name] = st
        if name == "target":
            ds = draft.new_state()
            draft.append_context(ds, out.hidden)
            last = int(np.argmax(out.logits[-1]))
    drafts = {k: [int(x) for x in draft.propose(ds, last, k).tokens] for k in ks}
    kept = {k: min(k, max(0, int(round(tune.expected_tokens(profile, k) - 1)))) for k in ks}

    def verify_commit(t, st_name, k):
        def run(st):
            ver = t.verify([last] + drafts[k], st)
            t.commit(st, kept[k] + 1)
            return ver
        return lambda: states[st_name].copy(), run

    jobs = {("step", 0): (lambda: states["plain"].copy(), lambda st: plain.forward([last], st)),
            ("bare step", 0): (lambda: states["bare"].copy(), lambda st: bare.forward([last], st))}
    for k in ks:
        jobs[("draft", k)] = (lambda: None, lambda _, k=k: draft.propose(ds, last, k))
        jobs[("verify+commit", k)] = verify_commit(target, "target", k)
        jobs[("bare verify+commit", k)] = verify_commit(bare, "bare", k)
        hidden = target.verify([last] + drafts[k], states["target"].copy()).hidden[: kept[k] + 1]
        jobs[("append", k)] = (ds.copy, lambda st, h=hidden: draft.append_context(st, h))
    ms = bench_runner.timed_interleaved(jobs, repeats=args.reps, warmup=3)
    step, bare_step = ms[("step", 0)], ms[("bare step", 0)]
    kind = args.kind or "code and prose pooled"
    print(f"built-in pair, {args.backend} ({b.describe().get('kernel_set')}), {args.threads} thread(s), row set "
          f"{row_set}; medians of {args.reps} interleaved calls; acceptance: held-out prompts ({kind})")
    print(f"plain step (1 row): {step:.3f} ms, of which GEMMs {step - bare_step:.3f} ms and the rest {bare_step:.3f} ms")
    print()
    print("| k | E(k) tokens/round | draft ms | verify + commit ms (GEMMs / rest) | append ms | round ms | round in "
          "plain steps | predicted speedup |")
    print("|---|---|---|---|---|---|---|---|")
    out = {"step_ms": step, "step_gemm_ms": step - bare_step}
    for k in ks:
        v, bv = ms[("verify+commit", k)], ms[("bare verify+commit", k)]
        rnd = ms[("draft", k)] + v + ms[("append", k)]
        e = tune.expected_tokens(profile, k)
        print(f"| {k} | {e:.2f} | {ms[('draft', k)]:.3f} | {v:.3f} ({v - bv:.3f} / {bv:.3f}) | {ms[('append', k)]:.3f} | "
              f"{rnd:.3f} | {rnd / step:.2f} | {e * step / rnd:.2f} |")
        out[f"k{k}"] = {"draft_ms": ms[("draft", k)], "verify_commit_ms": v, "verify_gemm_ms": v - bv,
                        "append_ms": ms[("append", k)], "expected_tokens": e, "predicted_speedup": e * step / rnd}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
