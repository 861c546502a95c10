"""Cost of a draft round on the built-in pair: an older draft (``--old REV``, read from git) against this one.

Every variant runs in this one process, interleaved in shuffled order, so machine drift hits them all
alike; the table gives median and min over ``--repeats`` calls per variant and case, and the same
for one plain target step (1 row at row set 1, the yardstick: a round should cost <= 0.3 of it). The older
``onebit_engine/draft`` is loaded as ``onebit_engine.draft_old`` beside the current package (it shares
``gemm``, ``ops``, ``sampling``: files this comparison assumes unchanged between the two revisions).

    PYTHONPATH=src OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python tools/draft_report.py --old 9c132d9
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def load_old_draft(rev: str):
    """The ``onebit_engine/draft`` package of git revision ``rev``, imported as ``onebit_engine.draft_old``."""
    import onebit_engine

    folder = Path(tempfile.mkdtemp(prefix="draft_old_")) / "draft_old"
    folder.mkdir()
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:src/onebit_engine/draft"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    for name in names:
        text = subprocess.run(["git", "show", f"{rev}:src/onebit_engine/draft/{name}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        (folder / name).write_text(text)
    spec = importlib.util.spec_from_file_location("onebit_engine.draft_old", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["onebit_engine.draft_old"] = mod
    spec.loader.exec_module(mod)
    onebit_engine.draft_old = mod
    return mod


def main() -> None:
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--old", default="9c132d9", help="git revision of the older draft. Default: %(default)r")
    p.add_argument("--backends", default="reference,host-int", help="Default: %(default)r")
    p.add_argument("--context", type=int, default=128, help="context rows before the timed calls. Default: %(default)r")
    p.add_argument("--repeats", type=int, default=200, help="timed calls per variant and case. Default: %(default)r")
    args = p.parse_args()

    from onebit_engine.draft import load_draft
    from onebit_engine.gemm import get_backend
    from onebit_engine.default_model import builtin_paths
    from onebit_engine.hybrid import load_target

    old = load_old_draft(args.old)
    tdir, ddir, _ = builtin_paths()
    rng = np.random.default_rng(0)
    prefix = (2 * rng.standard_normal((args.context, 4, 192))).astype(np.float32)
    taps = {t: (2 * rng.standard_normal((t, 4, 192))).astype(np.float32) for t in (1, 3, 8)}
    print(f"context {args.context} rows, {args.repeats} interleaved calls per cell; ms median / min")
    for bname in args.backends.split(","):
        backend = get_backend(bname)
        target = load_target(tdir, backend=backend, row_set=8)
        drafts = {
            f"old {args.old}": old.load_draft(ddir, target, backend=backend, row_set=8),
            "new numpy": load_draft(ddir, target, backend=backend, row_set=8, ops="numpy"),
            "new numba": load_draft(ddir, target, backend=backend, row_set=8, ops="numba"),
        }
        states = {}
        for name, d in drafts.items():
            states[name] = d.new_state()
            d.append_context(states[name], prefix)
        cases = {"propose(7)": ("p", 7), "propose(3)": ("p", 3), "append 1": ("a", 1), "append 3": ("a", 3),
                 "append 8": ("a", 8)}

        def run(name, case):
            if name == "plain":
                return step()
            d, st = drafts[name], states[name]
            kind, n = cases[case]
            if kind == "p":
                t0 = time.perf_counter()
                d.propose(st, 5, n)
                return time.perf_counter() - t0
            t0 = time.perf_counter()
            d.append_context(st, taps[n])
            dt = time.perf_counter() - t0
            st.truncate(args.context)
            return dt

        plain = load_target(tdir, backend=backend, row_set=1)
        pstate = plain.new_state()
        plain.forward(list(range(1, args.context + 1)), pstate)

        def step():
            scratch = pstate.copy()  # outside the timing
            t0 = time.perf_counter()
            plain.forward([7], scratch)
            return time.perf_counter() - t0

        jobs = [(n, c) for n in drafts for c in cases] + [("plain", "step")]
        for job in jobs * 5:  # warm-up: numba compile / cache load, BLAS buffers
            run(*job)
        times = {job: [] for job in jobs}
        order = jobs * args.repeats
        random.Random(1).shuffle(order)
        for job in order:
            times[job].append(run(*job))
        width = max(len(n) for n in drafts)
        print(f"\n{bname}\n  {'':{width}}  " + "  ".join(f"{c:>13}" for c in cases))
        for name in drafts:
            cells = [f"{1e3 * np.median(times[name, c]):.3f}/{1e3 * min(times[name, c]):.3f}" for c in cases]
            print(f"  {name:{width}}  " + "  ".join(f"{x:>13}" for x in cells))
        med = 1e3 * np.median(times["plain", "step"])
        print(f"  plain target step (row set 1): {med:.3f}/{1e3 * min(times['plain', 'step']):.3f}; "
              f"round = propose(7) + append 3, in plain steps (medians): "
              + ", ".join(f"{n} {(1e3 * np.median(times[n, 'propose(7)']) + 1e3 * np.median(times[n, 'append 3'])) / med:.2f}"
                          for n in drafts))


if __name__ == "__main__":
    main()
