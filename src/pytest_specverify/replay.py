"""The replay check: on a full accept, the state the batched verify left (``keep``) equals the state of
a replay (restore, run the kept rows again) within the port's profile, and the port's own replay check
agrees. Needs commit paths named ``keep`` and ``replay``; a port without them gets a skip that says so."""
from __future__ import annotations

from typing import Sequence

from .checks import argmax
from .compare import first_state_difference
from .failure import SpecVerifyFailure
from .measure import measuring
from .owned import owned_outputs
from .protocol import NotSupported
from .report import CheckReport
from .tolerance import Tolerance

REPLAY_CONTRACT = ("'replay' must mean: restore the state from before the verify and run the kept rows again "
                   "(as single steps, or any pass the port trusts); 'keep': keep what the batched verify left")


def replay_matches_keep(port, prompt: Sequence[int], k_values: Sequence[int], *, tol: Tolerance | None = None,
                        seed: int = 0) -> CheckReport:
    """On a full accept, the state the batch left ("keep") equals the replayed state within the port's
    profile (bit for bit only when the profile is exact: a batched pass of k+1 rows and k+1 single steps
    differ by rounding in any BLAS), and the port's own replay check (``commit(..., replay_check=True)``)
    agrees. A port without its own replay check raises ``NotSupported`` from that call: the item is
    then skipped, saying that keep and replay agreed."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np

    tol = tol or Tolerance("exact", exact=True)
    paths = list(port.commit_paths)
    if "replay" not in paths or "keep" not in paths:
        raise NotSupported(f"the replay check did not run: port {port.name!r} names its commit paths {paths}, and the check "
                           f"compares the path named 'keep' (keep what the batched verify left) with the one named "
                           f"'replay' (restore the state from before the verify, run the kept rows again); name yours so "
                           f"if they do that")
    rng = np.random.default_rng(seed)
    report = CheckReport("replay_check")
    own_unsupported = None
    for k in [k for k in k_values if k >= 1] or [1]:
        rows = None
        states = {}
        for path in ("keep", "replay"):
            st = port.new_state()
            last = argmax(port.prefill(st, prompt).logits[-1])
            rows = rows or [last] + [int(t) for t in rng.integers(0, port.vocab_size, size=k)]
            port.verify(st, rows, path=path)
            port.commit(st, k + 1, path=path)
            states[path] = port.state_arrays(st)  # already a copy (owned_outputs)
        with measuring() as m:
            bad = first_state_difference(states["keep"], states["replay"], tol)
        if bad:
            raise SpecVerifyFailure(f"full accept of k={k} rows {rows}: the kept batch state differs from the replayed one "
                                    f"beyond profile {tol.name!r} ({tol.describe()}): {bad}\n  ({REPLAY_CONTRACT})")
        report.metrics[f"max_diff_k{k}"] = max((w[1] for w in m.worst.values()), default=0.0)
        report.metrics.setdefault("bitwise", True)
        report.metrics["bitwise"] &= all(np.array_equal(states["keep"][n], states["replay"][n]) for n in states["keep"])
        st = port.new_state()
        port.prefill(st, prompt)
        port.verify(st, rows, path="keep")
        try:
            port.commit(st, k + 1, path="keep", replay_check=True)
        except NotSupported as exc:  # the documented opt-out: the port has no replay check of its own
            own_unsupported = str(exc)
        except Exception as exc:  # the port's own replay check (e.g. onebit_engine.StateMismatch)
            raise SpecVerifyFailure(f"full accept of k={k}: the port's own replay check failed: {exc}") from exc
        report.counts[k] += 1
    if own_unsupported is not None:
        diffs = ", ".join(f"k={k} {report.metrics[f'max_diff_k{k}']:.2e}" for k in report.counts)
        raise NotSupported(f"keep and replay agree within profile {tol.name!r} (max |diff| {diffs}); the port's own "
                           f"replay check is not supported: {own_unsupported}")
    return report
