"""Stateful fuzzing: a Hypothesis ``RuleBasedStateMachine`` drives random prefill / verify / commit /
step sequences on the port (zero-draft rounds and repeated full accepts included) next to a sequential
reference (the same port, one ``step`` per committed token), comparing the whole state after every
rule and the logits of every verify row and step. Hypothesis is imported only when this runs.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

from .compare import first_logit_difference, first_state_difference
from .failure import SpecVerifyFailure
from .owned import owned_outputs
from .tolerance import Tolerance


def run_commit_fuzz(port, prompt: Sequence[int], *, k_max: int, tol: Tolerance, max_examples: int = 15,
                    steps: int = 8, paths: Sequence[str] | None = None, seed: int = 0) -> dict:
    """Seeded from ``seed`` (the run's ``--specverify-seed`` + crc32 of the test id): the same examples
    every run, whatever the Hypothesis profile. Every example starts with a zero-draft round and a full
    accept (``initialize`` rules, which swarm testing never switches off), so the coverage the battery
    asserts holds by construction. A failure is raised as the port's first failure, its message first;
    Hypothesis' minimal program follows it as a note."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this module's
    port = owned_outputs(port)  # its outputs copied: a port may reuse its buffers
    import numpy as np
    from hypothesis import HealthCheck, Phase, seed as hseed, settings, strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, initialize, invariant, rule

    paths = list(paths or port.commit_paths)
    V = port.vocab_size
    from .checks import require_independent_states

    require_independent_states(port, prompt, tol)
    totals = {"rounds": 0, "zero_draft": 0, "full_accepts": 0}

    def same_logits(got, want, what):
        bad = first_logit_difference(got, want, tol)
        if bad:
            raise SpecVerifyFailure(f"{what}: logits differ from the sequential reference ({bad})")

    class PortMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.st, self.ref = port.new_state(), port.new_state()
            self.next = int(np.argmax(np.asarray(port.prefill(self.st, list(prompt)).logits)[-1]))
            port.prefill(self.ref, list(prompt))
            self.history: list[str] = []

        def _round(self, drafts, kept, path):
            rows = [self.next] + list(drafts)
            ver = np.asarray(port.verify(self.st, rows, path=path).logits)
            port.commit(self.st, kept, path=path)
            for i, t in enumerate(rows[:kept]):
                same_logits(ver[i], np.asarray(port.step(self.ref, t).logits)[-1], f"verify row {i} of {rows} (path {path!r})")
            self.next = rows[kept] if kept < len(rows) else int(np.argmax(ver[-1]))
            self.history.append(f"verify {rows} path={path} kept={kept}")
            totals["rounds"] += 1
            totals["zero_draft"] += len(drafts) == 0
            totals["full_accepts"] += kept == len(rows) and len(drafts) > 0

        @initialize(path=st.sampled_from(paths), kept=st.sampled_from([0, 1]))
        def begin_with_a_zero_draft_round(self, path, kept):
            self._round([], kept, path)

        @initialize(path=st.sampled_from(paths), k=st.integers(1, max(k_max, 1)), data=st.data())
        def begin_with_a_full_accept(self, path, k, data):
            self._round(data.draw(st.lists(st.integers(0, V - 1), min_size=k, max_size=k), label="drafts"), k + 1, path)

        @rule(data=st.data(), k=st.integers(0, k_max), path=st.sampled_from(paths))
        def verify_commit(self, data, k, path):
            drafts = data.draw(st.lists(st.integers(0, V - 1), min_size=k, max_size=k), label="drafts")
            self._round(drafts, data.draw(st.integers(0, k + 1), label="kept rows"), path)

        @rule(path=st.sampled_from(paths), k=st.integers(1, k_max), repeats=st.integers(1, 3), data=st.data())
        def full_accepts(self, path, k, repeats, data):
            for _ in range(repeats):
                self._round(data.draw(st.lists(st.integers(0, V - 1), min_size=k, max_size=k), label="drafts"), k + 1, path)

        @rule(path=st.sampled_from(paths), kept=st.sampled_from([0, 1]))
        def zero_draft_round(self, path, kept):
            self._round([], kept, path)

        @rule()
        def step(self):
            got = np.asarray(port.step(self.st, self.next).logits)[-1]
            same_logits(got, np.asarray(port.step(self.ref, self.next).logits)[-1], f"plain step with token {self.next}")
            self.history.append(f"step {self.next}")
            self.next = int(np.argmax(got))

        @invariant()
        def same_state(self):
            bad = first_state_difference(port.state_arrays(self.st), port.state_arrays(self.ref), tol)
            if bad:
                raise SpecVerifyFailure(f"after {' ; '.join(self.history[-4:]) or 'the prefill'}: {bad}")

    conf = settings(max_examples=max_examples, stateful_step_count=steps, deadline=None, database=None,
                    report_multiple_bugs=False, suppress_health_check=list(HealthCheck),
                    phases=[p for p in Phase if p.name != "explain"])  # explain re-runs a failure dozens of times
    test = hseed(seed)(get_state_machine_test(PortMachine, settings=conf))
    try:
        with _storage_elsewhere():
            test()
    except SpecVerifyFailure:
        raise
    except BaseExceptionGroup as group:  # report_multiple_bugs=False makes this rare: lead with the port's failure
        first = next((e for e in _leaves(group) if isinstance(e, SpecVerifyFailure)), None)
        if first is None:
            raise
        raise first from group
    return totals


def _leaves(group):
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from _leaves(e)
        else:
            yield e


@contextmanager
def _storage_elsewhere():
    """Hypothesis' storage (its example database is off here, but it also caches the constants it reads from
    source files) in a temporary folder while the fuzz runs, then the process's own setting back: the battery
    leaves no ``.hypothesis/`` folder in the user's working directory."""
    import tempfile

    from hypothesis import configuration

    before = vars(configuration).get("__hypothesis_home_directory")  # private: None until a first use or a set
    with tempfile.TemporaryDirectory(prefix="specverify-hypothesis-") as tmp:
        configuration.set_hypothesis_home_dir(tmp)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(before)
