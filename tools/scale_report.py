"""The scale rows of docs/benchmarks.md: real model shapes, synthesized, each measured in its own process.

    python tools/scale_report.py                     # every row (16 GiB of memory, 35 GB of disk)
    python tools/scale_report.py --rows 08b,27b      # some of them
    python tools/scale_report.py --write docs/benchmarks.md   # and put the table into that page

A run writes the section of the host-int kernel path it ran (``markers``): the ``avx512vnni`` path the main scale
section and regime map, another path (``avx2`` on a Zen 3) sections of its own, so one machine's run never
replaces another's. About 40 min on a 2-core Zen 4, 70 on a 2-core Zen 3.

Rows (each a ``onebit bench --shape`` run, or a load in a fresh process, JSON kept under --json-dir):

* ``rss``: peak RSS of loading a Qwen3.5-0.8B-shaped bf16 checkpoint on host-int int8 and decoding 4 tokens,
  over the checkpoint's bytes (a fresh process; the checkpoint written by ``onebit synth --format bf16``);
* ``27b`` / ``27b-seed``: Qwen3.6-27B-shaped int4 with an oracle draft at a = 0.8 (k = 7) and with every draft
  kept; ``08b`` / ``08b-seed``: Qwen3.5-0.8B-shaped int8; ``35b``: Qwen3.5-35B-A3B-shaped int4 at a = 0.8;
* ``kernel``: the int8 4096 x 4096 kernel, 1 thread, cold weights, 8 rows / 1 row (tools/host_int_report.py);
* ``regime``: the regime map of docs/loop.md: 12-layer hybrids from ~6 MB to ~0.9 GB of int8 weights, the
  loop at a = 0.8 against plain decoding, each size in its own process (where does speculation start to pay?).

This is an edge script: it may read the environment (ONEBIT_CACHE_DIR, through the CLI) and runs
subprocesses; the library does neither.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- scale:begin (tools/scale_report.py writes this section) -->", "<!-- scale:end -->"
REGIME_BEGIN, REGIME_END = "<!-- regime:begin (tools/scale_report.py writes this table) -->", "<!-- regime:end -->"
# The speed targets are set for a core with AVX-512 VNNI: a run whose host-int kernel is that path writes the
# sections above; a run on another path (a Zen 3 runs `avx2`) writes its own, so neither machine's run replaces the other's.
MAIN_PATH = "avx512vnni"
BENCH = {
    "27b": ["--shape", "qwen3.6-27b", "--format", "int4", "--acceptance", "0.8", "--k", "7"],
    "27b-seed": ["--shape", "qwen3.6-27b", "--format", "int4", "--acceptance", "seed", "--k", "7"],
    "08b": ["--shape", "qwen3.5-0.8b", "--format", "int8", "--acceptance", "0.8", "--k", "7"],
    "08b-seed": ["--shape", "qwen3.5-0.8b", "--format", "int8", "--acceptance", "seed", "--k", "7"],
    "35b": ["--shape", "qwen3.5-35b-a3b", "--format", "int4", "--acceptance", "0.8", "--k", "7"],
}
ROWS = ["rss", "kernel", *BENCH, "regime"]
# Rows whose runs last about a second take 3x the repeats: at 3, two loops running the same pass schedule in
# one 0.8B process differed by 12% (1.45 vs 1.64 of plain), more than the effects the rows report.
# The 27B and 35B-A3B rows take 2x: their loop is bound by compute and their plain steps by a memory whose speed
# moves ~1.6x from one minute to the next (a 27B plain step 268-440 ms), so 3 repeats left the 27B a = 0.8 row
# anywhere in 2.17-2.79 over four runs of the same engine.
MORE_REPEATS = {"08b": 3, "08b-seed": 3, "regime": 3, "27b": 2, "27b-seed": 2, "35b": 2}
REGIME_HIDDEN = (128, 256, 512, 1024, 2048)  # 12-layer hybrids of these widths, vocab 32000: ~6 MB to ~0.9 GB of int8
RSS_SCRIPT = """
import json, os, resource, sys
from onebit_engine import load_target
from onebit_engine.gemm import get_backend
from onebit_engine.loop.generate import generate
folder = sys.argv[1]
t = load_target(folder, backend=get_backend("host-int", weight_format="int8"), row_set=16)
g = generate(t, [1, 2, 3, 4], max_new_tokens=4, stop_tokens=())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
files = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors"))
print(json.dumps({"peak_rss_bytes": peak, "file_bytes": files, "ratio": peak / files, "tokens": g.tokens}))
"""


def _run(cmd: list[str], log) -> str:
    print("$ " + " ".join(cmd), file=log, flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if res.returncode:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr.strip()[-2000:]}")
    return res.stdout


def measure(rows: list[str], json_dir: Path, cache: Path, repeats: int, tokens: int, log) -> dict:
    json_dir.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)  # `onebit synth --out` wants its parent to exist (a typo must not make folders)
    out = {}
    onebit = [sys.executable, "-m", "onebit_engine"]
    for row in rows:
        t0 = time.time()
        reps = repeats * MORE_REPEATS.get(row, 1)
        if row == "rss":
            folder = cache / "qwen3.5-0.8b-bf16-s0"
            if not (folder / "synth.json").is_file():
                _run(onebit + ["synth", "--shape", "qwen3.5-0.8b", "--format", "bf16", "--out", str(folder), "--json"], log)
            doc = json.loads(_run([sys.executable, "-c", RSS_SCRIPT, str(folder / "target")], log))
        elif row == "regime":
            doc = {"points": [json.loads(_run([sys.executable, "tools/scale_report.py", "--regime-point", str(h),
                                                "--cache", str(cache), "--repeats", str(reps)], log)) for h in REGIME_HIDDEN]}
        elif row == "kernel":
            # the path the dispatcher runs here, by name: the report measures every native path the CPU has, one
            # after another, and its figures would otherwise be the last one's (AVX2 on a VNNI machine)
            from onebit_engine.gemm.host_int.backend import HostIntBackend

            path = HostIntBackend().kernel
            text = _run([sys.executable, "tools/host_int_report.py", "kernel", "--kernel", path, "--threads", "1",
                         "--reps", "40"], log)
            doc = {**json.loads(text.strip().splitlines()[-1]), "path": path}
        else:
            text = _run(onebit + ["bench", *BENCH[row], "--cache", str(cache), "--repeats", str(reps),
                                  "--max-new-tokens", str(tokens), "--json"], log)
            doc = json.loads(text)
        if row in BENCH or row == "regime":
            doc["repeats"] = reps
        doc["wall_seconds"], doc["cpu_model"] = time.time() - t0, cpu_model()
        (json_dir / f"{row}.json").write_text(json.dumps(doc, indent=1))
        out[row] = doc
        print(f"{row}: done in {doc['wall_seconds']:.0f} s", file=log, flush=True)
    return out


def cpu_model() -> str:
    """"family F model M" of /proc/cpuinfo (the vendor's name alone, "AMD EPYC", does not tell Zen 3 from Zen 5)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()[:30]
    except OSError:
        return "family/model unknown"
    info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return f"family {info.get('cpu family', '?')} model {info.get('model', '?')}"


def regime_point(hidden: int, cache: Path, repeats: int) -> dict:
    """One point of the regime map, measured in this process: a 12-layer hybrid of width ``hidden``."""
    sys.path.insert(0, str(ROOT / "src"))
    from onebit_engine import load_draft, load_target
    from onebit_engine.gemm import get_backend
    from onebit_engine.hybrid.synthetic import tiny_config
    from onebit_engine.measure.oracle import profile
    from onebit_engine.measure.resources import last_level_cache_bytes
    from onebit_engine.measure.scale_bench import run_scale_bench
    from onebit_engine.measure.walk import packed_bytes
    from onebit_engine.synth.folder import synthesize
    from onebit_engine.synth.shapes import Shape, _scaled_draft

    heads = max(1, hidden // 64)
    t = tiny_config(vocab_size=32000, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=12,
                    num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), head_dim=64,
                    linear_num_key_heads=heads, linear_num_value_heads=heads, linear_key_head_dim=64,
                    linear_value_head_dim=64)
    shape = Shape(f"regime-h{hidden}", t, _scaled_draft(t, 31999), "a 12-layer hybrid for the regime map", "scaled recipe")
    folder = cache / f"regime-h{hidden}-int8"
    if not (folder / "synth.json").is_file():
        import shutil

        shutil.rmtree(folder, ignore_errors=True)  # a half-written pair of an interrupted run
        synthesize(shape, "int8", folder)
    be = get_backend("host-int", threads=2)
    target = load_target(folder / "target", backend=be, row_set=16)
    draft = load_draft(folder / "draft", target, backend=be, row_set=16)
    llc = last_level_cache_bytes()
    res = run_scale_bench(target, draft, [3, 1, 4, 1, 5, 9, 2, 6], profile("0.8", 7), k=7, max_new_tokens=64, repeats=repeats,
                          threads=[1, 2], set_threads=lambda n: setattr(be, "threads", n),
                          lazy_logits=llc is not None and packed_bytes(target.lm_head) <= llc)
    return {"hidden": hidden, "weight_bytes": res["plain_step_bytes"]["weights"], "last_level_cache_bytes": llc, "kernel": be.kernel, **{
        k: res[k] for k in ("speedup_vs_plain", "plain_tokens_per_s", "loop_tokens_per_s", "verify_over_plain_step",
                            "draft_over_plain_step", "tokens_per_round", "identical_to_plain", "plain_stream_gb_s")}}


def kernel_path(docs: dict) -> "str | None":
    """The host-int kernel path the run's rows ran (None for older JSON that does not say). Rows of two paths
    (JSON of two machines in one --json-dir) are refused: one table is one machine."""
    paths = {d["provenance"].get("kernel") for k, d in docs.items() if k in BENCH and d.get("provenance")}
    paths |= {d.get("path") for k, d in docs.items() if k == "kernel"}
    paths |= {q.get("kernel") for q in docs.get("regime", {}).get("points", ())}
    paths.discard(None)
    if len(paths) > 1:
        raise SystemExit(f"the rows ran different host-int kernels ({', '.join(sorted(paths))}): one table is one machine; "
                         f"give each machine's JSON its own --json-dir")
    return paths.pop() if paths else None


def markers(path: "str | None") -> tuple[str, str, str, str]:
    """(scale begin, end, regime begin, end) of the sections a run on this kernel path writes."""
    if path in (None, MAIN_PATH):
        return BEGIN, END, REGIME_BEGIN, REGIME_END
    return (f"<!-- scale-{path}:begin (tools/scale_report.py writes this section: runs on the `{path}` kernel) -->",
            f"<!-- scale-{path}:end -->", f"<!-- regime-{path}:begin (tools/scale_report.py writes this table) -->",
            f"<!-- regime-{path}:end -->")


def _f(v, d=2):
    return "-" if v is None else f"{v:.{d}f}"


def render(docs: dict) -> str:
    counts = {row: d["repeats"] for row, d in docs.items() if d.get("repeats")}
    reps = f"; rates are medians of each row's repeats ({', '.join(f'{r} {n}' for r, n in counts.items())})" if counts else ""
    path = kernel_path(docs)
    begin, end = markers(path)[:2]
    title = ("## Scale: real model shapes, synthesized (`nox -s bench-scale`)" if begin == BEGIN else
             f"## Scale on a CPU without AVX-512 VNNI (host-int `{path}`): real model shapes, synthesized (`nox -s bench-scale`)")
    lines = [begin, title, ""]
    any_bench = next((d for k, d in docs.items() if k in BENCH), None)
    if any_bench:
        p = any_bench["provenance"]
        lines += [f"Measured {any_bench['time']} with `python tools/scale_report.py` (`nox -s bench-scale`), commit "
                  f"{p['git_revision']}, on {p['host'].get('cpu')} ({any_bench.get('cpu_model', 'family/model not recorded')}, "
                  f"{p['host'].get('logical_cpus')} logical CPUs); vector "
                  f"flags: {' '.join(p['cpu_vector_flags'])}; host-int kernel `{p['kernel']}` ({p['kernel_set']}). Each row is "
                  f"one process; ratios are taken in that process, plain decoding and the loop interleaved in shuffled "
                  f"order{reps}. Weights are seeded random codes in the real shapes (`onebit synth`); the draft is the real "
                  f"DFlash 2 draft of that shape (its whole cost paid every round) proposing the target's own greedy "
                  f"tokens at the declared acceptance (docs/loop.md, \"The oracle draft\").", ""]
    lines += ["| row | figure | measured | target |", "|---|---|---|---|"]
    if "rss" in docs:
        d = docs["rss"]
        lines.append(f"| 0.8B-shaped bf16 checkpoint, host-int int8: load + decode 4 tokens | peak RSS / file bytes | "
                     f"{_f(d['ratio'])} ({d['peak_rss_bytes'] / 2**30:.2f} / {d['file_bytes'] / 2**30:.2f} GiB) | <= 1.0 |")
    for key, label in (("27b", "27B-shaped int4, a = 0.8, k = 7"), ("27b-seed", "27B-shaped int4, every draft kept, k = 7"),
                       ("08b", "0.8B-shaped int8, a = 0.8, k = 7"), ("08b-seed", "0.8B-shaped int8, every draft kept, k = 7"),
                       ("35b", "35B-A3B-shaped MoE int4, a = 0.8, k = 7")):
        if key not in docs:
            continue
        r = docs[key]["results"]
        same = "identical to plain" if r["identical_to_plain"] else "**DIFFERS from plain**"
        target = {"27b": ">= 2.5", "27b-seed": ">= 4.5", "08b": ">= 2.0", "08b-seed": ">= 3.0", "35b": "measured"}[key]
        roof = r.get("roofline") or {}
        ceiling = (f"; this run's ceiling {_f(roof['loop_ceiling_vs_plain'])}" if roof.get("loop_ceiling_vs_plain") else "")
        passes = ", ".join(f"{k2} x{n}" for k2, n in (r.get("verify_passes") or {}).items())
        one = (f"; in one pass of 8 rows {_f(r['speedup_one_pass_vs_plain'])}, verify passes (rows: rounds) {passes}"
               if r.get("speedup_one_pass_vs_plain") is not None else "")
        lines.append(f"| {label} | loop / fastest plain | **{_f(r['speedup_vs_plain'])}** ({_f(r['loop_tokens_per_s'])} vs "
                     f"{_f(r['plain_tokens_per_s'])} tok/s; {_f(r['tokens_per_round'])} tokens a round; {same}{ceiling}{one}) | {target} |")
        if key in ("27b", "35b"):
            t2 = r["tokens_per_s"].get("plain_t2")
            best = r.get("read_stream_gb_s_max") or r["read_stream_gb_s"]  # older JSON: the medians
            s2 = best.get("2") or best.get(2)
            fastest = t2 * r["plain_step_bytes"]["total"] / 1e9 / s2 if t2 and s2 else None
            pp = r.get("plain_bound_paired")
            what = "read-stream" if key == "27b" else "active-bytes"
            gb = f"{r['plain_step_bytes']['total'] / 1e9:.2f} GB a token"
            if pp:  # each plain step over the stream read just before it
                lines.append(f"| {label.split(',')[0]} | plain step / {what} bound of the same moment, {pp['threads']} threads | "
                             f"**{_f(pp['share'])}** (median of {pp['steps']} steps, quartiles {_f(pp['share_quartiles'][0])}-"
                             f"{_f(pp['share_quartiles'][1])}; {_f(pp['step_ms_median'], 1)} ms a step, {gb}, stream "
                             f"{_f(pp['stream_gb_s_median'], 1)} GB/s; against the run's fastest read, {_f(s2, 1)} GB/s: "
                             f"{_f(fastest)} at {_f(t2)} tok/s) | {'>= 0.85' if key == '27b' else '>= 0.7'} |")
            else:  # older JSON
                lines.append(f"| {label.split(',')[0]} | plain tok/s / {what} bound, 2 threads | **{_f(fastest)}** ({_f(t2)} tok/s, "
                             f"{gb}, fastest stream read {_f(s2, 1)} GB/s) | {'>= 0.85' if key == '27b' else '>= 0.7'} |")
        if key == "27b":
            # three decimals: at two, a draft round of 0.154 steps reads "0.15" beside its target "<= 0.15"
            floors = (f" (floors in this run: {_f(roof['verify_floor_over_plain_step'], 3)}; "
                      f"{_f(roof['draft_floor_over_plain_step'], 3)})" if roof.get("verify_floor_over_plain_step") else "")
            lines.append(f"| {label} | verify(8) / plain step; draft round / plain step | **{_f(r['verify_over_plain_step'], 3)}; "
                         f"{_f(r['draft_over_plain_step'], 3)}**{floors} | <= 1.35; <= 0.15 |")
    if "kernel" in docs:
        d = docs["kernel"]
        lines.append(f"| int8 4096 x 4096 kernel (`{d.get('path', '?')}`), 1 thread, cold weights | 8 rows / 1 row | "
                     f"**{_f(d.get('int8_t1_r8_over_r1'))}** | <= 1.30 |")
    roofs = [docs[k]["results"]["roofline"] for k in BENCH if k in docs and (docs[k]["results"].get("roofline") or {}).get("gmac_s")]
    if roofs:
        lo, hi = min(x["gmac_s"] for x in roofs), max(x["gmac_s"] for x in roofs)
        lines += ["", f"A ceiling is the most the loop could give over the plain decoding measured beside it if its verify "
                  f"and draft round took only their floors: the larger of their multiply-adds at the backend's rate "
                  f"(its GEMM at 8 rows on a cache-resident weight, timed in the same run: the best per-thread rate times "
                  f"the loop's threads, {lo:.0f}-{hi:.0f} G multiply-adds a second) and their weight bytes at the run's fastest stream read, the verify's in one pass or in the best schedule of passes at the row's acceptance (docs/loop.md, \"Verifying in passes\"), whichever is lower; attention, the delta rule, the commit "
                  f"and Python not counted (`results.roofline` in each JSON; docs/loop.md, \"Ceilings\"). A target above "
                  f"its row's ceiling is out of reach of any engine on this machine in that run."]
        beat = [k for k in BENCH if k in docs and (docs[k]["results"].get("roofline") or {}).get("loop_ceiling_vs_plain")
                and docs[k]["results"]["speedup_vs_plain"] > docs[k]["results"]["roofline"]["loop_ceiling_vs_plain"]]
        if beat:  # the rate is timed once, in seconds of the row's process: a faster minute later moves the floor
            lines += ["", f"In this run {', '.join(beat)} measured above {'its' if len(beat) == 1 else 'their'} ceiling: "
                      f"the GEMM rate behind a ceiling is timed once in the row's process, and the machine computed faster "
                      f"than that while the loop ran, so this run's ceilings are estimates of the moment they were timed, "
                      f"not bounds."]
    if "regime" in docs:
        lines += ["", regime_table(docs["regime"]["points"])]
    lines += ["", "Per-phase milliseconds, peak RSS and every other figure of each row are in its JSON "
              "(`onebit bench --shape ... --json`; the script keeps them under `.bench/scale/`).", end]
    return "\n".join(lines) + "\n"


def regime_table(pts: list) -> str:
    """The regime map: docs/loop.md carries it too (between its regime markers)."""
    lines = ["The regime map: 12-layer hybrids of growing width, int8, the loop at a = 0.8, k = 7, against plain "
             "decoding at its fastest, 2 threads at most (`python tools/scale_report.py --rows regime`).", "",
             "| width | int8 weights | plain tok/s (GB/s) | loop / plain | verify(8) / step | draft / step | identical |",
             "|---|---|---|---|---|---|---|"]
    for q in pts:
        lines.append(f"| {q['hidden']} | {q['weight_bytes'] / 2**20:.0f} MiB | {_f(q['plain_tokens_per_s'], 1)} "
                     f"({_f(q['plain_stream_gb_s'], 1)}) | **{_f(q['speedup_vs_plain'])}** | {_f(q['verify_over_plain_step'])} | "
                     f"{_f(q['draft_over_plain_step'])} | {q['identical_to_plain']} |")
    llc = pts[0].get("last_level_cache_bytes") if pts else None
    if llc:
        lines += ["", f"The CPU's last-level cache: {llc / 2**20:.0f} MiB."]
    return "\n".join(lines)


def write(page: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    text = page.read_text() if page.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section.rstrip("\n") + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    page.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {ROWS}")
    ap.add_argument("--json-dir", default=str(ROOT / ".bench" / "scale"))
    ap.add_argument("--cache", default=os.environ.get("ONEBIT_SCALE_CACHE", str(ROOT / ".bench" / "synth")))
    ap.add_argument("--repeats", type=int, default=3, help="per row (times MORE_REPEATS for its rows: 3 for the short ones, 2 for 27B and 35B-A3B)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--write", metavar="PAGE", help="put the table into this Markdown page (between its scale markers)")
    ap.add_argument("--write-regime", metavar="PAGE", help="put the regime map into this page too (between its regime markers)")
    ap.add_argument("--from-json", action="store_true", help="render the JSON already in --json-dir, measure nothing")
    ap.add_argument("--regime-point", type=int, metavar="HIDDEN", help=argparse.SUPPRESS)  # one regime point, in this process
    args = ap.parse_args(argv)
    if args.regime_point:
        print(json.dumps(regime_point(args.regime_point, Path(args.cache), args.repeats)))
        return 0
    rows = [r for r in args.rows.split(",") if r]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"unknown rows {bad}; choose from {ROWS}")
    jd = Path(args.json_dir)
    if args.from_json:
        docs = {r: json.loads((jd / f"{r}.json").read_text()) for r in rows if (jd / f"{r}.json").is_file()}
    else:
        docs = measure(rows, jd, Path(args.cache), args.repeats, args.max_new_tokens, sys.stderr)
    section = render(docs)
    print(section)
    begin, end, regime_begin, regime_end = markers(kernel_path(docs))
    if args.write:
        write(Path(args.write), section, begin, end)
    if args.write_regime and "regime" in docs:
        page = Path(args.write_regime)
        if regime_begin not in page.read_text():
            raise SystemExit(f"{page} has no {regime_begin} marker: put one (and {regime_end}) where this machine's regime map goes")
        write(page, "\n".join([regime_begin, regime_table(docs["regime"]["points"]), regime_end]), regime_begin, regime_end)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
