"""In-process A/B of native host-int kernels built from several source trees, on one step's GEMMs of the
medium config (docs/host-int.md). Every repeat runs each (tree, threads, rows) case once, in a shuffled
order, after a 4 ms pause (the other libraries' pooled workers stop spinning) and an untimed pass; the
weights are packed once, by this tree, and every result is checked bitwise against this tree's first.

    python tools/host_int_libab.py [--format int8] [--reps 30] [--threads 1,2] [--rows 1,8] \\
        [--plus128 old] old=/tmp/old_tree/src new=src

--plus128 NAME: that tree's avx2 int8 tiles hold code + 128 (kernel v5 and before), not sign and magnitude.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from host_int_report import medium_gemms  # noqa: E402

from onebit_engine.gemm.host_int import native  # noqa: E402
from onebit_engine.gemm.host_int.layout import tile_codes  # noqa: E402


def _load(tree: str, out: Path):
    g = Path(tree) / "onebit_engine" / "gemm"
    srcs = [str(g / f) for f in ("kernel.c", "avx2.c", "vnni.c")]
    subprocess.run([sys.executable, "-m", "ziglang", "cc", *native.FLAGS, "-o", str(out), *srcs], check=True)
    lib = ctypes.CDLL(str(out))
    f = lib.onebit_hi_matmul
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64,
                  ctypes.c_int64]
    f.restype = ctypes.c_int

    def matmul(x, tw, threads):
        y = np.empty((x.shape[0], tw.shape[0]), np.float32)
        if f(tw.c_struct[1], x.ctypes.data, x.shape[0], y.ctypes.data, threads, 0, -1):
            raise RuntimeError(f"{tree}: kernel failed")
        return y

    return matmul


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", default="int8")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--plus128", default="", help="trees (comma separated) whose avx2 int8 tiles are code + 128")
    ap.add_argument("trees", nargs="+", help="NAME=SRC_DIR")
    a = ap.parse_args()
    b, packed = medium_gemms(a.format)
    old = [dataclasses.replace(p, tiles=tile_codes(p.codes(), p.fmt, 8)) if p.fmt == "int8" else p for p in packed]
    tmp = Path(tempfile.mkdtemp())
    libs, weights = {}, {}
    for spec in a.trees:
        name, tree = spec.split("=", 1)
        libs[name] = _load(tree, tmp / f"{name}.so")
        weights[name] = old if name in a.plus128.split(",") else packed
    rng = np.random.default_rng(0)
    rows, ths = [int(r) for r in a.rows.split(",")], [int(t) for t in a.threads.split(",")]
    xs = {m: [rng.standard_normal((m, p.shape[1])).astype(np.float32) for p in packed] for m in rows}
    want = {m: [b.matmul(x, p) for x, p in zip(xs[m], packed)] for m in rows}
    for name, mm in libs.items():  # bitwise, every case
        for m in rows:
            for th in ths:
                assert all(np.array_equal(mm(x, p, th), y) for x, p, y in zip(xs[m], weights[name], want[m])), name
    ts = {(n, th, m): [] for n in libs for th in ths for m in rows}
    for _ in range(a.reps):
        for n, th, m in random.sample(sorted(ts), len(ts)):
            mm, ws = libs[n], weights[n]
            time.sleep(0.004)
            for x, p in zip(xs[m], ws):
                mm(x, p, th)
            t = time.perf_counter()
            for x, p in zip(xs[m], ws):
                mm(x, p, th)
            ts[(n, th, m)].append(time.perf_counter() - t)
    print(f"medium GEMMs, {a.format}, {a.reps} repeats: ms min / median; rows / 1 row by min, median")
    print("| tree | threads | " + " | ".join(f"{m} rows" for m in rows) + " | ratio |")
    print("|---|---|" + "---|" * len(rows) + "---|")
    for th in ths:
        for n in libs:
            cells = [f"{min(ts[(n, th, m)]) * 1e3:.2f} / {np.median(ts[(n, th, m)]) * 1e3:.2f}" for m in rows]
            r = (f"{min(ts[(n, th, rows[-1])]) / min(ts[(n, th, rows[0])]):.2f}, "
                 f"{np.median(ts[(n, th, rows[-1])]) / np.median(ts[(n, th, rows[0])]):.2f}")
            print(f"| {n} | {th} | " + " | ".join(cells) + f" | {r} |")


if __name__ == "__main__":
    main()
