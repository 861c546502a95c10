"""``onebit loop``'s choice of k and threads when the flags leave them open (``tune.py`` measures).

The acceptance profile the choice rests on: the shipped pair's held-out evaluation for the built-in
pair; for any other pair, a short calibration run of this prompt at the largest k (said in the summary).
"""
from __future__ import annotations

import os
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
    profile_source: str = ""
    predicted_speedup: float | None = None
    table: dict = field(default_factory=dict)  # "threads=T k=K" -> predicted ms per token

    def summary(self) -> str:
        th = lambda n: f"{n} thread{'s' if n > 1 else ''}"  # noqa: E731
        text = (f"{self.backend}, row set {self.row_set}; loop: k={self.k}, {th(self.spec_threads)}; "
                f"plain decoding: 1 row per step, {th(self.plain_threads)}")
        if not self.measured:
            return text + " (as given)"
        return (text + f" - picked as the fastest measured here (round and step costs) with {self.profile_source}: "
                f"predicted speedup {self.predicted_speedup:.2f}x")

    def describe(self) -> dict:
        return {"k": self.k, "threads": self.spec_threads, "plain_threads": self.plain_threads, "backend": self.backend,
                "row_set": self.row_set, "measured": self.measured, "profile_source": self.profile_source,
                "predicted_speedup": self.predicted_speedup, "predicted_ms_per_token": self.table}


def plan(args, loaded, plain_target, prompt, threads) -> Plan:
    from ..loop.speculative import speculative_generate

    top = loaded.draft.config.block_size - 1
    ks = [models.check_k(args.k, loaded.draft)] if args.k else sorted({k for k in K_CANDIDATES if k <= top} | {top})
    counts = [args.threads] if args.threads else ([1, 2] if (os.cpu_count() or 1) >= 2 else [1])
    backend = loaded.target.backend.name
    common = dict(backend=backend, row_set=loaded.target.row_set)
    if len(ks) == 1 and len(counts) == 1:
        return Plan(ks[0], counts[0], counts[0], **common)
    if loaded.builtin_trained:
        from .. import default_model

        profile = default_model.acceptance_profile(backend)
        source = "the shipped pair's acceptance on its held-out prompts"
    else:
        threads.set(counts[0])
        cal = speculative_generate(loaded.target, loaded.draft, prompt, max_new_tokens=CALIBRATION_TOKENS, k=top)
        profile = cal.acceptance_by_position()
        source = f"the acceptance of a {CALIBRATION_TOKENS}-token calibration run of this prompt at k={top}"
    costs = tune.measure(loaded.target, loaded.draft, prompt, ks=ks, threads=counts, set_threads=threads.set,
                         acceptance=profile, plain_target=plain_target)
    plain, spec = tune.choose(costs, profile)
    table = {f"threads={t} k={k}": round(ms, 4) for (t, k), ms in spec.table.items()}
    return Plan(spec.k, spec.threads, plain.threads, measured=True, profile_source=source,
                predicted_speedup=plain.ms_per_token / spec.ms_per_token, table=table, **common)
