"""``onebit synth`` (a servable pair of a real model's shape) and ``onebit bench --shape`` (the scale
benchmark: plain decoding against the loop with an oracle draft, at that size). See docs/cli.md."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import numpy as np

from ..atomic import probe_writable, temporary_of
from ..errors import CheckpointError, ConfigError, MissingExtra, OutputError, WeightError
from ..measure import resources
from ..synth import get_shape
from ..synth.folder import MARKER, marker, plan, synthesize, target_config_json
from . import models, ui

PROMPT_TOKENS = 16


def _needs(shape, fmt: str, extra: int = 0) -> tuple[int, int]:
    """(memory to serve the pair on host-int, bytes on disk)."""
    p = plan(shape, fmt)
    return resources.serve_bytes(p.target_bytes, p.draft_bytes, extra), p.disk_bytes


def _check_memory(shape, fmt: str, what: str, extra: int = 0, anyway: str = "") -> None:
    """``anyway``: the flag that writes the pair regardless (synth's), named as a way out."""
    need, _ = _needs(shape, fmt, extra)
    have = resources.available_memory()
    if have is not None and need > have:
        smaller = "--format ternary or a smaller shape" if fmt != "ternary" else "a smaller shape"  # ternary is the least
        raise ConfigError(f"{what} {shape.name} in {fmt} needs about {resources.gib(need)} of memory (its weights on "
                          f"host-int and the working set), this machine has {resources.gib(have)} "
                          f"available; use {smaller}, or a machine with more memory{anyway}")


def _write(shape, fmt: str, out: Path, seed: int, args) -> None:
    _, disk = _needs(shape, fmt)
    free = resources.free_disk(out)
    if disk * 1.02 + (64 << 20) > free:
        raise ConfigError(f"{shape.name} in {fmt} takes {resources.gib(disk)} on disk, {out} has {resources.gib(free)} free; "
                          f"free space or give --out (synth) / --cache (bench) on another file system")
    ui.note(args, f"writing {shape.name} ({fmt}, {resources.gib(disk)}) to {out}")
    with ui.Bar(disk, f"synth {shape.name}", ui.progress_enabled(args)) as bar:
        synthesize(shape, fmt, out, seed=seed, tick=bar)


def cmd_synth(args) -> int:
    shape = get_shape(args.shape)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not an empty folder; give a new folder (synth writes target/ and draft/ in it)")
    if args.format != "bf16" and not args.allow_unservable:
        _check_memory(shape, args.format, "serving", anyway=", or give --allow-unservable to write it anyway")
    _write_whole(shape, args.format, out, args.seed, args)
    need, disk = _needs(shape, args.format)
    info = {"command": "synth", **marker(shape, args.format, args.seed), "out": str(out), "target": str(out / "target"),
            "draft": str(out / "draft"), "disk_bytes": disk, "serve_bytes": need if args.format != "bf16" else None}
    if args.json:
        ui.print_json(info)
        return 0
    print(f"wrote {shape.name} ({args.format}, seed {args.seed}): target {out / 'target'}, draft {out / 'draft'}; "
          f"{resources.gib(disk)} on disk; serve it with --model {out / 'target'} --draft {out / 'draft'}")
    return 0


# what synthesize and atomic_folder leave in a pair's folder: a folder holding anything else is not ours to delete
_OWN = ("target", "draft", MARKER)


def _write_whole(shape, fmt: str, out: Path, seed: int, args) -> None:
    """``_write`` into --out (new or empty), or nothing: a write that fails after the target left a half pair
    that a rerun refused as not empty (the error itself goes on, unchanged)."""
    new = not out.exists()
    try:
        _write(shape, fmt, out, seed, args)
    except BaseException:
        _remove_written(out, new)
        raise


def _remove_written(out: Path, new: bool) -> None:
    if new:
        shutil.rmtree(out, ignore_errors=True)
        return
    for name in _OWN:  # out was an empty folder: only what synth put in it
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists():
            p.unlink()


def cache_root(args) -> tuple[Path, str]:
    """(the folder synthesized pairs are kept in, how to name it in a message): ``--cache`` or the default."""
    if args.cache:
        return Path(args.cache), f"--cache {args.cache}"
    root = models.cache_dir() / "synth"
    return root, f"the cache folder {root} (ONEBIT_CACHE_DIR or XDG_CACHE_HOME set it; --cache DIR overrides)"


def _writable_folder(root: Path, where: str) -> None:
    """Make ``root`` (a folder) and prove a file can be created in it, or refuse in one line."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe_writable(root)
    except OSError as e:
        raise ConfigError(f"{where}: cannot write a synthesized pair there ({e.strerror}: {e.filename or root}); "
                          f"give --cache DIR, a writable folder") from None


def _ours(folder: Path) -> bool:
    """Every entry is one synth writes (or a temporary of its interrupted write)."""
    return all(p.name in _OWN or temporary_of(p.name) in _OWN for p in folder.iterdir())


def cached_pair(shape, fmt: str, seed: int, cache: Path, args, where: str = "--cache") -> tuple[Path, bool]:
    """The synthesized folder for (shape, format, seed) under ``cache``, written when absent or stale
    (another version's marker, or an interrupted write). A folder of that name holding anything synth does
    not write is refused, never deleted."""
    if cache.exists() and not cache.is_dir():
        raise ConfigError(f"{where} is a file, not a folder; give --cache DIR, a folder for the synthesized pairs")
    folder = cache / f"{shape.name}-{fmt}-s{seed}"
    if _whole(folder, shape, fmt, seed):
        return folder, True
    _writable_folder(cache, where)
    with _pair_lock(cache / f".{folder.name}.lock", folder, args):
        if _whole(folder, shape, fmt, seed):  # another bench wrote it while this one waited
            return folder, True
        _replace(shape, fmt, seed, folder, args)
    return folder, False


def _whole(folder: Path, shape, fmt: str, seed: int) -> bool:
    """The pair synth wrote for (shape, format, seed): its marker, and the configs it writes for that shape (the
    marker alone let another shape's folders, moved in beside it, be measured under this shape's name)."""
    return (_marked(folder / MARKER, marker(shape, fmt, seed))
            and _marked(folder / "target" / "config.json", target_config_json(shape))
            and _marked(folder / "draft" / "config.json", shape.draft_config_json()))


def _marked(mark: Path, want: dict) -> bool:
    """The JSON file is there and holds ``want`` (the marker, written last: the pair is whole; or a config)."""
    try:
        return mark.is_file() and json.loads(mark.read_text()) == json.loads(json.dumps(want))  # tuples as lists
    except (ValueError, OSError):
        return False


@contextlib.contextmanager
def _pair_lock(path: Path, folder: Path, args):
    """One writer per pair: a second bench on the same cache waits for the first one's pair instead of
    deleting it half-written (POSIX advisory lock; where fcntl is missing, no lock)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with _open_lock(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ui.note(args, f"waiting for another onebit process writing {folder}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _open_lock(path: Path):
    """The lock file, opened without blocking (a FIFO there would wait for a reader forever) and only when it is a
    regular file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o666)
    except OSError as e:
        raise ConfigError(f"{path}, the lock of a synthesized pair, cannot be opened ({e.strerror}): it is not a regular "
                          f"file; remove it, or give another --cache DIR") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path}, the lock of a synthesized pair, is not a regular file; remove it, or give another "
                          f"--cache DIR")
    return os.fdopen(fd, "a")


def _replace(shape, fmt: str, seed: int, folder: Path, args) -> None:
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ConfigError(f"{folder} is in the way of the synthesized pair and is not a folder synth wrote; move it or give another --cache DIR")
    if folder.exists():
        if not _ours(folder):
            raise ConfigError(f"{folder} holds files synth did not write (it writes only {', '.join(_OWN)}); refusing to "
                              f"replace it - move it or give another --cache DIR")
        shutil.rmtree(folder)
    _write(shape, fmt, folder, seed, args)


def cmd_scale_bench(args) -> int:
    from ..draft import load_draft
    from ..gemm import get_backend
    from ..hybrid import load_target
    from ..measure.oracle import profile
    from ..measure.provenance import git_revision, machine
    from ..measure.regime import lazy_logits
    from ..measure.scale_bench import SCHEMA, STREAM_BYTES, run_scale_bench, timestamp
    from ..version import __version__

    shape = get_shape(args.shape)
    fmt = args.format or "int4"
    block = shape.draft.block_size
    k = block - 1 if args.k is None else args.k
    if not 1 <= k <= block - 1:
        raise ConfigError(f"--k {k} is out of range for {shape.name}'s draft: it must be 1..{block - 1} (block {block} minus the anchor)")
    models.check_stages(args.verify_stages, k)
    models.check_length(args.max_new_tokens, [[0] * PROMPT_TOKENS], shape.target.max_position_embeddings, least=k + 2,
                        why=f" (the first token comes from the prefill; a full round of k={k} drafts needs {k + 1} more)")
    prof = profile(args.acceptance, k, published_tau=shape.published_tau, block=block)
    _check_memory(shape, fmt, "benchmarking", extra=STREAM_BYTES)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = [args.threads] if args.threads else sorted({1, min(2, usable)})
    cache, where = cache_root(args)
    folder, reused = cached_pair(shape, fmt, args.seed, cache, args, where)
    ui.note(args, f"{'reusing' if reused else 'wrote'} {folder}; loading {shape.name} ({fmt}) on host-int")
    backend = get_backend("host-int", threads=max(threads))
    try:
        target = load_target(folder / "target", backend=backend, row_set=16)
        draft = load_draft(folder / "draft", target, backend=backend, row_set=16)
    except (CheckpointError, WeightError, ConfigError, OSError) as e:
        if not reused or isinstance(e, MissingExtra):  # a missing package is not a damaged pair
            raise
        # the marker is written last, so a damaged pair was changed after synth finished: say how to get a new one
        raise CheckpointError(f"the cached pair {folder} does not load ({e}); delete {folder} and run again: bench "
                              f"synthesizes it anew") from None
    prompt = [int(t) for t in np.random.default_rng(args.seed).integers(0, shape.target.vocab_size, PROMPT_TOKENS)]

    def set_threads(t: int) -> None:
        backend.threads = t

    llc = resources.last_level_cache_bytes()
    lazy = lazy_logits(target)  # the lm_head in the cache: rows on demand; streaming from memory: every row at once
    ui.note(args, f"measuring plain decoding and the loop ({prof.name}, k={k}) at {threads} threads, {ui.count(args.repeats, 'repeat')}")
    with ui.Bar(args.repeats * 5 * len(threads), "bench", ui.progress_enabled(args)) as bar:
        res = run_scale_bench(target, draft, prompt, prof, k=k, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                              threads=threads, set_threads=set_threads, seed=args.seed, progress=bar, lazy_logits=lazy,
                              stages=args.verify_stages)
    desc = backend.describe()
    host = machine()
    doc = {
        "schema": SCHEMA, "command": "onebit " + " ".join(args.argv), "time": timestamp(),
        "provenance": {"engine_version": __version__, "git_revision": git_revision(), "backend": desc["backend"],
                       "kernel": desc.get("kernel"), "kernel_set": desc.get("kernel_set"), "kernel_hash": desc.get("hash"),
                       "cpu_regs": desc.get("cpu"), "host": host, "cpu_vector_flags": _vector_flags(host),
                       "ops": target.ops.name, "delta_rule": target.ops.delta},
        "config": {"shape": shape.name, "format": fmt, "seed": args.seed, "folder": str(folder), "folder_reused": reused,
                   "target_params": shape.target_params, "active_params": shape.active_params(),
                   "draft_params": shape.draft_params, "shape_source": shape.source, "draft_source": shape.draft_source,
                   "acceptance": args.acceptance, "profile": prof.name, "profile_keep": list(prof.keep), "k": k,
                   "block_size": block, "threads": threads, "lazy_logits": lazy, "verify_stages": args.verify_stages, "last_level_cache_bytes": llc, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                   "prompt": prompt},
        "results": res,
    }
    if args.out:
        from ..atomic import atomic_write_text
        from .outputs import unwritten

        try:
            atomic_write_text(args.out, ui.dumps(doc))
        except OutputError as e:  # minutes of measuring are not lost: the result goes to stdout, the error to stderr
            return unwritten(doc, e, args)
    if args.json:
        ui.print_json(doc)
        return 0
    _print(doc)
    return 0


def _vector_flags(host: dict) -> list[str]:
    flags = set((host.get("cpu_flags") or "").split())
    return sorted(f for f in flags if f.startswith(("avx512", "avx2", "avx_vnni")))


def _print(doc: dict) -> None:
    c, r, f = doc["config"], doc["results"], ui.fmt
    pb = r["plain_step_bytes"]
    print(f"{c['shape']} {c['format']}: target {c['target_params'] / 1e9:.2f} B parameters ({c['active_params'] / 1e9:.2f} B "
          f"read per token), draft {c['draft_params'] / 1e9:.2f} B; {'reused' if c['folder_reused'] else 'new'} folder {c['folder']}")
    best = r.get("read_stream_gb_s_max", {})
    rows = [(f"plain, {t} thread{'s' * (t > 1)}", r["tokens_per_s"][f"plain_t{t}"], r["read_stream_gb_s"][t], best.get(t))
            for t in c["threads"]]
    rows += [(f"loop, {t} thread{'s' * (t > 1)}", r["tokens_per_s"][f"loop_t{t}"], None, None) for t in c["threads"]]
    print(ui.table(["mode", "tok/s (median)", "read stream GB/s (median)", "(fastest)"], rows))
    same = "identical to plain greedy" if r["identical_to_plain"] else f"DIFFERS from plain greedy: {r['mismatches'][:2]}"
    passes = ", ".join(f"{key} {n}" for key, n in r.get("verify_passes", {}).items())
    print(f"\nloop / fastest plain: {f(r['speedup_vs_plain'], 2)}x  (draft: {c['profile']}, k={c['k']}); output {same}")
    prices = ", ".join(f"{rows} rows {f(v['median_ms'], 1)}" for rows, v in (r.get("verify_pass_ms") or {}).items())
    print(f"verify passes {c['verify_stages']} (rows per pass: rounds): {passes}; the loop in one pass of k+1 rows: "
          f"{f(r.get('speedup_one_pass_vs_plain'), 2)}x; the planner's last prices (ms): {prices or 'none'}")
    pp = r.get("plain_bound_paired") or {}
    print(f"plain reads {pb['total'] / 1e9:.2f} GB a token: {f(r['plain_stream_gb_s'], 1)} GB/s; {f(r['plain_bound_share'], 2)} "
          f"of the read stream of the same moment (median of {pp.get('steps', 0)} steps, each after a stream read: "
          f"{f(pp.get('step_ms_median'), 1)} ms a step, {f(pp.get('stream_gb_s_median'), 1)} GB/s), "
          f"{f(r.get('plain_bound_share_fastest_read'), 2)} of the run's fastest read ({f(r['bound_tokens_per_s'], 2)} tok/s)")
    ph = r["phase_ms"]
    print(f"a round: draft {f(ph['draft'], 1)} + verify {f(ph['verify'], 1)} + commit {f(ph['commit'], 1)} ms; a plain step "
          f"{f(ph['plain_step'], 1)} ms; verify(k+1) / step {f(r['verify_over_plain_step'])}, draft / step "
          f"{f(r['draft_over_plain_step'])}; {f(r['tokens_per_round'])} tokens a round (profile: "
          f"{f(r['expected_tokens_per_round'])})")
    roof = r.get("roofline") or {}
    if roof.get("loop_ceiling_vs_plain"):
        print(f"ceiling on this machine now: {f(roof['loop_ceiling_vs_plain'], 2)}x (a verify takes at least "
              f"{f(roof['verify_floor_ms'], 1)} ms, {roof['verify_bound_by']}-bound at {f(roof['gmac_s'], 0)} G multiply-adds/s "
              f"and {f(roof['stream_gb_s'], 1)} GB/s in one pass, {f(roof.get('staged_verify_floor_ms'), 1)} ms expected in "
              f"passes; a draft round {f(roof['draft_floor_ms'], 1)} ms); the loop reached "
              f"{f(roof.get('speedup_share_of_ceiling'), 2)} of it")
    p = doc["provenance"]
    print(f"peak RSS {resources.gib(r['peak_rss_bytes'])}; {p['host'].get('cpu')} [{' '.join(p['cpu_vector_flags'])}]; "
          f"kernel {p['kernel']}, git {p['git_revision']}")
    for key, why in r.get("null_reasons", {}).items():
        print(f"not measured: {key} ({why})", file=sys.stdout)
