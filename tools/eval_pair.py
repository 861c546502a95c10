#!/usr/bin/env python
"""Measure the built-in pair on the numpy engine: greedy speculative decoding vs plain decoding.

    python tools/eval_pair.py [--ks 3 7 15] [--new-tokens 128] [--json out.json]
    python tools/eval_pair.py --pair /tmp/pair2/builtin --prompts /tmp/pair2/default.json

``--pair`` measures a pair in another folder (``target/``, ``draft/``, ``tokenizer.json``, as written by
``tools/train_pair.py --out``) instead of the shipped one; ``--prompts`` a prompt file of the same format.

For every default (held-out) prompt and every k: tokens per round, acceptance by position, the share of
distinct 4-grams of the output, and the wall time against ``onebit_engine.loop.generate.generate`` on the same
backend. The output must equal plain greedy decoding token for token (checked).

Uses ``onebit_engine.loop.speculative.speculative_generate`` when that module exists; otherwise a minimal
greedy loop over the engine's own ``verify`` / ``commit`` and the draft's ``append_context`` / ``propose``
(the round of docs/loop.md at T = 0).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def distinct4(tokens) -> float:
    grams = [tuple(tokens[i: i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / max(1, len(grams))


def spec_greedy(target, draft, prompt, max_new_tokens: int, k: int):
    """Greedy speculative loop; returns (tokens, accepted-per-round list)."""
    st, ds = target.new_state(), draft.new_state()
    out = target.forward(prompt, st)
    draft.append_context(ds, out.hidden)
    tok = int(np.argmax(out.logits[-1]))
    gen, acc = [tok], []
    while len(gen) < max_new_tokens:
        n = min(k, max_new_tokens - len(gen))
        p = draft.propose(ds, tok, n)
        v = target.verify([tok] + [int(t) for t in p.tokens], st)
        post = np.argmax(v.logits, axis=-1)
        a = 0
        while a < n and int(p.tokens[a]) == int(post[a]):
            a += 1
        target.commit(st, a + 1)
        draft.append_context(ds, v.hidden[: a + 1])
        gen.extend([int(t) for t in p.tokens[:a]] + [int(post[a])])
        tok = int(post[a])
        acc.append(a)
    return gen[:max_new_tokens], acc


def run_speculative(target, draft, prompt, max_new_tokens, k):
    try:
        from onebit_engine.loop.speculative import speculative_generate
    except ImportError:
        speculative_generate = None
    if speculative_generate is not None:
        res = speculative_generate(target, draft, prompt, max_new_tokens=max_new_tokens, k=k, stop_tokens=[])
        acc = [int(r.accepted) for r in res.rounds if r.proposed == k]  # full-width rounds only
        return list(res.tokens), acc, res, "onebit_engine.loop.speculative.speculative_generate"
    toks, acc = spec_greedy(target, draft, prompt, max_new_tokens, k)
    return toks, acc, None, "tools/eval_pair.py spec_greedy (engine verify/commit + draft propose)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", type=int, nargs="+", default=[3, 7, 15])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--row-set", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0, help="only the first N prompts of each kind")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--pair", help="folder with target/, draft/, tokenizer.json (default: the shipped pair)")
    ap.add_argument("--prompts", help="prompt JSON file (default: the shipped default prompts)")
    args = ap.parse_args(argv)

    from onebit_engine.loop.generate import generate
    from onebit_engine.default_model import default_prompts, load_builtin_pair, load_tokenizer

    if args.pair:
        from pathlib import Path

        from onebit_engine.draft import load_draft
        from onebit_engine.hybrid import load_target

        pair = Path(args.pair)
        target = load_target(pair / "target", backend=args.backend, row_set=args.row_set)
        draft = load_draft(pair / "draft", target, backend=args.backend, row_set=args.row_set)
        tok = load_tokenizer(pair / "tokenizer.json")
    else:
        target, draft = load_builtin_pair(backend=args.backend, row_set=args.row_set)
        tok = load_tokenizer()
    if args.prompts:
        with open(args.prompts) as f:
            all_prompts = json.load(f)["prompts"]
    else:
        all_prompts = default_prompts()
    results = {"backend": args.backend, "row_set": args.row_set, "new_tokens": args.new_tokens,
               "pair": args.pair or "builtin", "kinds": {}}
    # Warm-up, untimed: loading the compiled kernels and first-touch memory must not land on whichever
    # mode runs first. (The timings here are still one fixed order; benchmarks.md §0 has interleaved ones.)
    first = tok.encode(all_prompts[0]["text"])
    generate(target, first, max_new_tokens=8, stop_tokens=[])
    run_speculative(target, draft, first, 8, max(args.ks))
    for kind in ("code", "prose"):
        prompts = [p for p in all_prompts if p["kind"] == kind]
        if args.limit:
            prompts = prompts[: args.limit]
        plain_s, plain, d4 = 0.0, [], []
        for p in prompts:
            ids = tok.encode(p["text"])
            t = time.perf_counter()
            r = generate(target, ids, max_new_tokens=args.new_tokens, stop_tokens=[])
            plain_s += time.perf_counter() - t
            plain.append(r.tokens)
            d4.append(distinct4(r.tokens))
        kres = {"prompts": len(prompts), "plain_seconds": plain_s, "distinct4_mean": float(np.mean(d4)),
                "distinct4_per_prompt": [round(x, 3) for x in d4], "by_k": {}}
        for k in args.ks:
            spec_s, accs, same = 0.0, [], True
            impl = None
            for p, ref in zip(prompts, plain):
                ids = tok.encode(p["text"])
                t = time.perf_counter()
                toks, acc, _, impl = run_speculative(target, draft, ids, args.new_tokens, k)
                spec_s += time.perf_counter() - t
                same &= toks == ref
                accs.extend(acc or [])
            a = np.asarray(accs)
            kres["by_k"][str(k)] = {
                "rounds": int(len(a)),
                "tokens_per_round": float(1 + a.mean()) if len(a) else None,
                "acceptance_by_position": [float((a >= i).mean()) for i in range(1, k + 1)] if len(a) else None,
                "spec_seconds": spec_s,
                "speedup_vs_plain": plain_s / spec_s if spec_s else None,
                "equals_plain_greedy": bool(same),
                "implementation": impl,
            }
            print(f"{kind} k={k}: tokens/round {kres['by_k'][str(k)]['tokens_per_round']:.2f} "
                  f"speedup {plain_s / spec_s:.2f}x (plain {plain_s:.1f}s, spec {spec_s:.1f}s) "
                  f"equal={same} distinct4 {kres['distinct4_mean']:.3f}", flush=True)
        results["kinds"][kind] = kres
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
