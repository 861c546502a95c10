"""``onebit loop``'s choice of k and threads when the flags leave them open (``tune.py`` measures).

The acceptance profile the choice rests on: the shipped pair's held-out evaluation for the built-in
pair; for any other pair, a short calibration run of this prompt at the largest k (said in the summary).

A measured choice is kept in the cache folder (``tuned/``), keyed by the CPU, the build, the model and
the draft (``tune.TuneKey``), and reused by the next run of the same key: the same machine and build
make the same choice, so a figure can be reproduced. ``--retune`` measures again (and keeps the new one).
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from ..measure import tune
from . import models

K_CANDIDATES = (1, 2, 3, 4, 5, 7, 9, 11, 15)
CALIBRATION_TOKENS = 32


@dataclass(frozen=True)
class Plan:
    k: int
    spec_threads: int
    plain_threads: int
    backend: str
    row_set: int
    measured: bool = False
    reused: bool = False  # the choice was measured by an earlier run and read back (``measured_at``)
    measured_at: str | None = None
    profile_source: str = ""
    predicted_speedup: float | None = None
    table: dict = field(default_factory=dict)  # "threads=T k=K" -> predicted ms per token
    kept_in: str | None = None  # the file the choice is kept in

    def summary(self) -> str:
        th = lambda n: f"{n} thread{'s' if n > 1 else ''}"  # noqa: E731
        text = (f"{self.backend}, row set {self.row_set}; loop: k={self.k}, {th(self.spec_threads)}; "
                f"plain decoding: 1 row per step, {th(self.plain_threads)}")
        if not self.measured:
            return text + " (as given)"
        how = (f"reused the choice measured here at {self.measured_at} (--retune measures again)" if self.reused
               else "picked as the fastest measured here (round and step costs)")
        return text + f" - {how}, with {self.profile_source}: predicted speedup {self.predicted_speedup:.2f}x"

    def describe(self) -> dict:
        return {"k": self.k, "threads": self.spec_threads, "plain_threads": self.plain_threads, "backend": self.backend,
                "row_set": self.row_set, "measured": self.measured, "reused": self.reused, "measured_at": self.measured_at,
                "kept_in": self.kept_in, "profile_source": self.profile_source, "predicted_speedup": self.predicted_speedup,
                "predicted_ms_per_token": self.table}


def candidates(args, loaded) -> tuple[list[int], list[int]]:
    """(k values, thread counts) the choice is made among: what the flags leave open."""
    top = loaded.draft.config.block_size - 1
    # --verify-stages S: only the k whose verify has S rows (k+1 >= S), or S would be clamped to one pass unsaid
    least = args.verify_stages - 1 if isinstance(getattr(args, "verify_stages", None), int) else 1
    ks = [models.check_k(args.k, loaded.draft)] if args.k else sorted({k for k in K_CANDIDATES if least <= k <= top} | {top})
    counts = [args.threads] if args.threads else ([1, 2] if (os.cpu_count() or 1) >= 2 else [1])
    return ks, counts


def calibration_tokens(loaded, prompt) -> int:
    """The calibration run's length: CALIBRATION_TOKENS, or what the context leaves after the prompt (the run's
    own check: prompt + n - 1 positions). A prompt near the context's end was refused, blaming a
    max_new_tokens=32 the user never gave."""
    return max(1, min(CALIBRATION_TOKENS, loaded.target.config.max_position_embeddings - len(prompt) + 1))


def measuring_prompt(loaded, prompt, ks) -> list[int]:
    """The prompt the costs are measured after, cut so that a round of the largest k fits the context behind
    it (a verify of k+1 rows): a prompt near the context's end is the loop's to run, not the measurement's
    to refuse."""
    room = loaded.target.config.max_position_embeddings - max(ks) - 1
    return list(prompt[:max(1, room)])


def _profile_source(loaded, top: int, prompt) -> str:
    if loaded.builtin_trained:
        return "the shipped pair's acceptance on its held-out prompts"
    return f"the acceptance of a {calibration_tokens(loaded, prompt)}-token calibration run of this prompt at k={top}"


def key_for(loaded, ks, counts, source: str) -> tune.TuneKey:
    from ..measure.provenance import git_revision, machine
    from ..version import __version__

    t, d = loaded.target.backend.describe(), loaded.draft.backend.describe()
    return tune.TuneKey(
        cpu=tune.cpu_identity(machine()), build=f"{__version__} git {git_revision()}",
        kernel=f"{t.get('kernel_set')} {t.get('hash')} / {d.get('kernel_set')} {d.get('hash')}",
        model=loaded.model_hash, draft=loaded.draft_hash or "", backend=t.get("backend") or "", row_set=loaded.target.row_set,
        ks=tuple(ks), threads=tuple(counts), profile=source)


def plan(args, loaded, plain_target, prompt, threads, *, store=None, retune: bool = False, status=None) -> Plan:
    """The k and threads of the run. ``store``: the folder kept choices live in (None: keep none)."""
    from ..loop.speculative import speculative_generate

    ks, counts = candidates(args, loaded)
    common = dict(backend=loaded.target.backend.name, row_set=loaded.target.row_set)
    if len(ks) == 1 and len(counts) == 1:
        return Plan(ks[0], counts[0], counts[0], **common)
    top = loaded.draft.config.block_size - 1
    source = _profile_source(loaded, top, prompt)
    key = key_for(loaded, ks, counts, source) if store is not None else None
    kept = tune.load_choice(store, key) if key is not None and not retune else None
    if kept is not None:
        if status:
            status.say(f"reusing the k and threads measured here at {kept['measured_at']} (--retune measures again)")
        return Plan(kept["k"], kept["threads"], kept["plain_threads"], measured=True, reused=True,
                    measured_at=kept["measured_at"], profile_source=source, predicted_speedup=kept["predicted_speedup"],
                    table=kept.get("table") or {}, kept_in=str(tune.choice_path(store, key)), **common)
    what = f"choosing k and threads: measuring {len(ks)} k x {len(counts)} thread count{'s' * (len(counts) > 1)} here"
    with (status.stage(what) if status else contextlib.nullcontext()):
        if loaded.builtin_trained:
            from .. import default_model

            profile = default_model.acceptance_profile(common["backend"])
        else:
            threads.set(counts[0])
            cal = speculative_generate(loaded.target, loaded.draft, prompt, max_new_tokens=calibration_tokens(loaded, prompt),
                                       k=top)
            profile = cal.acceptance_by_position()
        costs = tune.measure(loaded.target, loaded.draft, measuring_prompt(loaded, prompt, ks), ks=ks, threads=counts,
                             set_threads=threads.set, acceptance=profile, plain_target=plain_target)
        plain, spec = tune.choose(costs, profile)
    table = {tune.row_name(t, k): round(ms, 4) for (t, k), ms in spec.table.items()}
    when = time.strftime(tune.WHEN, time.gmtime())
    chosen = Plan(spec.k, spec.threads, plain.threads, measured=True, measured_at=when, profile_source=source,
                  predicted_speedup=plain.ms_per_token / spec.ms_per_token, table=table, **common)
    if status:
        status.detail("predicted ms per token: " + ", ".join(f"{n} {ms:.4f}" for n, ms in table.items()))
    if key is not None:
        from ..errors import OutputError

        try:
            path = tune.save_choice(store, key, {"k": chosen.k, "threads": chosen.spec_threads, "plain_threads": chosen.plain_threads,
                                                 "predicted_speedup": chosen.predicted_speedup, "measured_at": when, "table": table})
        except (OutputError, OSError) as e:  # a read-only cache costs the next run a measurement, not this run
            if status:
                status.say(f"could not keep the choice in {store} ({e}); the next run measures again")
        else:
            chosen = Plan(**{**chosen.__dict__, "kept_in": str(path)})
    return chosen

