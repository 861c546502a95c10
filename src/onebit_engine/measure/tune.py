"""Pick the fastest configuration of a run on this machine: threads, drafts per round k, row set.

The speculative loop's tokens/s is E(k) / (round cost), where E(k) = 1 + sum_{i<k} p_i is the expected
tokens per round for the draft's acceptance by position p_i (the share of rounds whose draft i is
accepted: ``SpecResult.acceptance_by_position``), and the round cost is what a draft of k, a verify of
k + 1 rows, a commit and the context append take here, measured. Plain decoding's cost is one step at
its own fastest setting (1 row, no padding). Both are measured on copies of the prompt's state, a few
repeats each, interleaved; the acceptance profile comes from elsewhere (the shipped pair's held-out
evaluation, or a calibration run on another prompt), never from the run being reported.

A choice is kept (``save_choice`` / ``load_choice``) under a ``TuneKey``: the CPU, the build (engine
version, git revision, kernel set and hash), the model and draft, the backend, row set, the candidates
and the acceptance profile's source. The same machine and build then makes the same choice every run,
so a figure can be reproduced; anything in the key that changes measures again.

Nothing here reads the environment: the caller says which thread counts exist, how to apply one, and
which folder keeps the choices.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np


def expected_tokens(acceptance_by_position: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum of the first k acceptance shares (positions past the profile count as 0)."""
    return 1.0 + float(sum(acceptance_by_position[:k]))


@dataclass(frozen=True)
class Choice:
    """The configuration picked for one kind of run, with the costs it was picked from (ms)."""

    threads: int
    k: int | None  # None: plain decoding
    ms_per_token: float
    table: dict = field(default_factory=dict)  # (threads, k) -> predicted ms per token


def _median_ms(setup: Callable[[], object], fn: Callable[[object], None], reps: int) -> float:
    """Median ms of ``fn(setup())``; only ``fn`` is timed (state copies are not part of a round)."""
    times = []
    for _ in range(reps):
        arg = setup()
        t = time.perf_counter()
        fn(arg)
        times.append(1e3 * (time.perf_counter() - t))
    return float(np.median(times))


def measure(target, draft, prompt: Sequence[int], *, ks: Sequence[int], threads: Sequence[int],
            set_threads: Callable[[int], None], acceptance: Sequence[float], plain_target=None,
            reps: int = 5, seed: int = 0) -> dict:
    """ms of one plain step (key ``(threads, None)``) and of one round (key ``(threads, k)``), each the
    minimum of two interleaved passes (shuffled order) of the median of ``reps`` calls. ``plain_target``:
    the target plain decoding runs on when it is not ``target`` (a backend that pads rows needs its own
    row set 1 target for the fastest step). Rounds commit the expected number of accepted rows."""
    plain_target = plain_target or target
    base = target.new_state()
    pre = target.forward(list(prompt), base)
    if plain_target is target:
        pbase = base
    else:
        pbase = plain_target.new_state()
        plain_target.forward(list(prompt), pbase)
    dbase = draft.new_state()
    draft.append_context(dbase, pre.hidden)
    last = int(np.argmax(pre.logits[-1]))

    def step(st) -> None:
        plain_target.forward([last], st)

    def round_of(k: int) -> Callable[[object], None]:
        kept = min(k, max(0, int(round(expected_tokens(acceptance, k) - 1))))

        def run(states) -> None:
            st, dst = states
            prop = draft.propose(dst, last, k)
            ver = target.verify([last] + [int(t) for t in prop.tokens[:k]], st)
            target.commit(st, kept + 1)
            draft.append_context(dst, ver.hidden[: kept + 1])
        return run

    def fresh():
        return base.copy(), dbase.copy()

    jobs = [(t, None) for t in threads] + [(t, k) for t in threads for k in ks]
    samples: dict = {j: [] for j in jobs}
    rng = random.Random(seed)
    for _ in range(2):  # two interleaved passes in shuffled order: no variant always runs first
        rng.shuffle(jobs)
        for th, k in jobs:
            set_threads(th)
            if k is None:
                samples[(th, k)].append(_median_ms(pbase.copy, step, reps))
            else:
                samples[(th, k)].append(_median_ms(fresh, round_of(k), reps))
    return {j: float(np.min(v)) for j, v in samples.items()}


def choose(costs: dict, acceptance: Sequence[float]) -> tuple[Choice, Choice]:
    """(plain, speculative): the fastest per token of ``measure``'s costs; a round yields E(k) tokens."""
    plain = {j: ms for j, ms in costs.items() if j[1] is None}
    spec = {j: ms / expected_tokens(acceptance, j[1]) for j, ms in costs.items() if j[1] is not None}
    if not plain or not spec:
        raise ValueError(f"costs need plain steps (threads, None) and rounds (threads, k); got keys {sorted(costs, key=str)}")
    p = min(plain, key=lambda j: (plain[j], j[0]))
    s = min(spec, key=lambda j: (spec[j], j[0], j[1]))
    return Choice(p[0], None, plain[p], plain), Choice(s[0], s[1], spec[s], spec)


class Threads:
    """Applies one thread count to the host-int backends of some targets / drafts and to BLAS
    (threadpoolctl, when installed): how a measured configuration is switched on between runs."""

    def __init__(self, *models):
        self.backends = {id(m.backend): m.backend for m in models if getattr(m, "backend", None) is not None}

    def set(self, n: int) -> None:
        for b in self.backends.values():
            if hasattr(b, "threads"):
                b.threads = n
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return
        threadpool_limits(limits=n)


# -- the kept choice -----------------------------------------------------------------------------------
STORE_VERSION = 1


@dataclass(frozen=True)
class TuneKey:
    """Everything a measured choice depends on; two runs with equal keys may share a choice."""

    cpu: str  # model name and a digest of the flags (/proc/cpuinfo)
    build: str  # engine version and git revision
    kernel: str  # the target's and the draft's kernel sets and hashes
    model: str  # sha256 of the target checkpoint
    draft: str  # sha256 of the draft checkpoint
    backend: str
    row_set: int
    ks: tuple[int, ...]
    threads: tuple[int, ...]
    profile: str  # where the acceptance profile came from

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:24]


def cpu_identity(host: dict[str, Any]) -> str:
    """``provenance.machine()``'s CPU as one string: model name and a digest of its flags."""
    flags = hashlib.sha256(str(host.get("cpu_flags")).encode()).hexdigest()[:12]
    return f"{host.get('arch')} {host.get('cpu')} flags:{flags} cpus:{host.get('usable_cpus')}"


MAX_CHOICE_BYTES = 1 << 20  # a kept choice is a few KiB; anything larger is not one
WHEN = "%Y-%m-%d %H:%M UTC"  # a kept choice's measured_at
WHEN_WRITTEN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")


def row_name(threads: int, k: int) -> str:
    """A kept choice's table key."""
    return f"threads={threads} k={k}"


def choice_path(folder: Path, key: TuneKey) -> Path:
    return Path(folder) / f"choice-{key.digest()}.json"


def load_choice(folder: Path, key: TuneKey) -> dict[str, Any] | None:
    """The choice kept for ``key``, or None: never measured, or a file that does not hold this key's
    choice (unreadable, another version, edited) - then the caller measures again and replaces it."""
    path = choice_path(folder, key)
    try:  # a regular file of a choice's size only: a FIFO there blocked the run, a link to /dev/zero read until memory ran out
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CHOICE_BYTES:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != STORE_VERSION or doc.get("key") != json.loads(json.dumps(asdict(key))):
        return None
    choice = doc.get("choice")
    need = {"k": int, "threads": int, "plain_threads": int, "predicted_speedup": float, "measured_at": str}
    if not isinstance(choice, dict) or not all(isinstance(choice.get(n), t) and not isinstance(choice.get(n), bool)
                                               for n, t in need.items()):
        return None
    if choice["k"] not in key.ks or choice["threads"] not in key.threads or choice["plain_threads"] not in key.threads:
        return None
    # an edited or damaged file must not be reported as a measurement: a NaN or negative speedup, a table of junk or
    # of rows no run measured, a "measured at" of several lines (it reached stdout and the one-line status)
    table = choice.get("table", {})
    rows = {row_name(t, k) for t in key.threads for k in key.ks}
    if not (math.isfinite(choice["predicted_speedup"]) and choice["predicted_speedup"] > 0) or not isinstance(table, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in table.values()):
        return None
    if not set(table) <= rows or WHEN_WRITTEN.fullmatch(choice["measured_at"]) is None:
        return None
    return choice


def save_choice(folder: Path, key: TuneKey, choice: dict[str, Any]) -> Path:
    """Keep ``choice`` (k, threads, plain_threads, predicted_speedup, measured_at, ...) for ``key``, atomically."""
    from ..atomic import atomic_write_text

    Path(folder).mkdir(parents=True, exist_ok=True)
    path = choice_path(folder, key)
    atomic_write_text(path, json.dumps({"version": STORE_VERSION, "key": asdict(key), "choice": choice},
                                       indent=1, allow_nan=False) + "\n")
    return path
