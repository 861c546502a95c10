#!/usr/bin/env python
"""What a verify pass of 1..k+1 rows costs against a plain step, binned by the memory's minute.

    python tools/pass_prices.py .bench/synth/qwen3.6-27b-int4-s0 [--seconds 300] [--threads 2] [--rows 8]

The folder is one `onebit synth` wrote (its target/). For --seconds: a read of the stream `onebit bench
--shape` pairs its plain steps with (`measure.membw.ReadStream` on the host-int library's pool, 512 MiB, the
faster of `paired_bound.READS` reads: `membw.stream_gb_s`), then, in shuffled order, a plain step and a verify + commit of each row
count, each from a copy of one prefilled state. Medians by the read's speed: the prices the loop's pass planner
(`loop/stages.py`) would see in a slow and in a fast minute (docs/loop.md, "What a Zen 4 with AVX-512 VNNI
gives"). Needs the target's memory (~14 GB for 27B int4) and a quiet machine.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from onebit_engine.gemm import get_backend  # noqa: E402
from onebit_engine.hybrid import load_target  # noqa: E402
from onebit_engine.measure.membw import ReadStream, host_library, stream_gb_s  # noqa: E402
from onebit_engine.measure.paired_bound import READS  # noqa: E402

BINS = ((0.0, 40.0), (40.0, 50.0), (50.0, float("inf")))  # GB/s: this VM's slow and fast minutes (docs/host-int.md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="a folder `onebit synth` wrote (target/ inside)")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=8, help="the largest pass (k + 1)")
    args = ap.parse_args()
    if not (args.folder / "target" / "config.json").is_file():
        print(f"pass_prices: error: {args.folder} has no target/config.json: give a folder `onebit synth --out DIR` wrote "
              "(e.g. .bench/synth/qwen3.6-27b-int4-s0 after `onebit bench --shape qwen3.6-27b --format int4`)", file=sys.stderr)
        return 2
    if args.rows < 1 or args.threads < 1:
        print(f"pass_prices: error: --rows {args.rows} and --threads {args.threads}: both must be >= 1", file=sys.stderr)
        return 2
    backend = get_backend("host-int", threads=args.threads)
    if host_library(backend) is None:
        print(f"pass_prices: error: the host-int native library is not available here ({backend.describe()['unavailable']}); "
              "it times the kernel the loop runs: install the fast extra (pip install -e '.[fast]')", file=sys.stderr)
        return 2
    target = load_target(args.folder / "target", backend=backend, row_set=16)
    rng = np.random.default_rng(0)
    start = target.new_state()
    target.forward([int(t) for t in rng.integers(0, target.config.vocab_size, 16)], start)
    toks = [int(t) for t in rng.integers(0, target.config.vocab_size, args.rows)]
    stream = ReadStream(512 << 20, threads=args.threads, native=host_library(backend))

    def price(rows: int) -> float:  # rows 0: a plain step
        st = start.copy()
        t = time.perf_counter()
        if rows == 0:
            target.forward(toks[:1], st)
        else:
            target.verify(toks[:rows], st)
            target.commit(st, rows)
        return 1e3 * (time.perf_counter() - t)

    kinds = list(range(args.rows + 1))
    for k in kinds:  # first touches and compiled code out of the way
        price(k)
    sets, end = [], time.time() + args.seconds
    while time.time() < end:
        gbs = stream_gb_s(stream, READS)
        random.shuffle(kinds)
        sets.append((gbs, {k: price(k) for k in kinds}))
    print(f"{args.folder.name}, {args.threads} threads, {len(sets)} sets; medians, ms (x plain step)")
    for lo, hi in BINS:
        sel = [ms for gbs, ms in sets if lo <= gbs < hi]
        if sel:
            med = {k: float(np.median([m[k] for m in sel])) for k in range(args.rows + 1)}
            cols = " ".join(f"{k}:{med[k]:.0f} ({med[k] / med[0]:.2f})" for k in range(1, args.rows + 1))
            print(f"stream {lo:.0f}-{hi:.0f} GB/s ({len(sel)} sets): step {med[0]:.0f} | {cols}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
