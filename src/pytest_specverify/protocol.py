"""What a port must expose for the specverify checks: ``SpecPort`` (a ``typing.Protocol``).

A *port* is one implementation of a speculative-decoding engine (a target, its state, a draft and the
two decoding loops). The checks drive it only through the methods below, so they run unchanged on any
engine: nothing here is specific to ``onebit_engine``.

State contract (the one every check leans on)::

    st = port.new_state()             # storage of its own: checks keep several states side by side
    port.prefill(st, prompt)          # advances st by len(prompt); returns Rows(logits [T, V], taps)
    port.step(st, token)              # advances st by 1; Rows with T = 1
    port.verify(st, [last, d1..dk], path=p)   # one batched pass over k+1 rows; st holds them *pending*
    port.commit(st, r, path=p)        # keep the first r rows (0 <= r <= k+1); afterwards st must be
                                      # what prefill + r single steps of those rows leave
    port.state_arrays(st)             # every live array by name: {"layer.0.keys": ndarray, ...}

Returned logits, taps, draft proposals and state arrays may be views of a buffer the port's next call overwrites
(zero-copy outputs): every check drives the port through ``owned.owned_outputs``, which copies them.

Draft contract (``DraftLike``, the engine's): ``new_state()``; ``append_context(dstate, taps)`` with
the target's taps of every *committed* row, in order; ``propose(dstate, anchor, n, *, temperature,
rng) -> obj`` with ``.tokens`` [n] and ``.q`` [n, V]. The anchor is the last committed token, which
sits at position ``len(context)``: the prompt's rows are the first context, each round then appends
the rows ``[last, d1..da]`` it committed. The draft state is a function of the appended context alone:
``propose`` must leave it as it found it (``checks.draft_consistency``). The onebit engine's loop
also reads ``draft.block_size`` (anchor + the most drafts a proposal makes; None: no fixed block), so
the plugin's own drafts carry one.

Loop contract: ``speculative_generate`` returns a :class:`SpecRun` whose ``tokens`` are the generated
ids (prompt excluded; the first one comes from the prefill) and whose ``accepted``/``proposed`` give,
per speculative round, the accepted and proposed draft counts. At temperature 0 its tokens must equal
``generate``'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable


class NotSupported(Exception):
    """A port cannot run a check (a missing loop, no replay path, ...). Checks turn it into a skip."""


@dataclass(frozen=True)
class Rows:
    """What a target pass returns: ``logits`` [T, V] (any float dtype) and ``taps`` (the per-row
    hidden features the draft consumes, ``[T, ...]``) or ``None`` when the port has none."""

    logits: Any
    taps: Any = None


@dataclass
class SpecRun:
    """One speculative generation, engine-neutral. ``accepted[i]``/``proposed[i]``: round i's counts
    (zero-draft rounds may be left out); ``extra``: anything the port wants reported (timings...)."""

    tokens: list[int]
    accepted: list[int]
    proposed: list[int]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return sum(self.accepted) / sum(self.proposed) if sum(self.proposed) else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per speculative round (accepted drafts + the bonus)."""
        return (sum(self.accepted) + len(self.accepted)) / len(self.accepted) if self.accepted else 0.0


@runtime_checkable
class DraftLike(Protocol):
    def new_state(self) -> Any: ...
    def append_context(self, state: Any, taps: Any) -> None: ...
    def propose(self, state: Any, anchor_token: int, n_draft: int, *, temperature: float = 0.0, rng: Any = None) -> Any: ...


@runtime_checkable
class SpecPort(Protocol):
    """The adapter a port implements (see docs/verify-your-port.md for a worked example).

    Optional attribute ``max_k``: the largest k the port's *own* draft (``make_draft()``) can propose,
    e.g. a DFlash block size minus 1; the checks that run that draft ask for at most that many (see
    ``own_draft_k``). The checks that bring their own drafts are not limited by it. Optional attribute
    ``max_context``: the most tokens one state may hold; the long-context check fills at most that many
    (``long_context.context_length``).

    Attributes: ``name`` (shown in reports), ``vocab_size``, ``tolerance`` (the name of the port's
    declared tolerance profile, see ``tolerance.PROFILES``, or a ``Tolerance``), ``commit_paths`` (the commit
    paths it implements; paths named ``"keep"`` and ``"replay"`` enable the replay check, which otherwise is a
    skip saying so).

    Optional: ``close(state) -> None``: the battery calls it once for every state it obtained from
    ``new_state()``, when the check that made it is done (pass or fail), so a native engine can free the
    context behind it; a port without it is left alone. ``reference_path``: the checkpoint folder of the model
    the port computes (the reference-agreement check loads it on the engine's float32 reference backend;
    ``--specverify-reference`` overrides it). ``draft_may_never_match = True``: the port's own draft may get
    nothing accepted over the prompt set (greedy identity's power check is then a skip that says so).
    """

    name: str
    vocab_size: int
    tolerance: str
    commit_paths: Sequence[str]

    # -- the target --------------------------------------------------------------------------
    def new_state(self) -> Any: ...
    def prefill(self, state: Any, tokens: Sequence[int]) -> Rows: ...
    def step(self, state: Any, token: int) -> Rows: ...
    def verify(self, state: Any, tokens: Sequence[int], *, path: str) -> Rows: ...
    def commit(self, state: Any, accepted_rows: int, *, path: str, replay_check: bool = False) -> None: ...
    def state_arrays(self, state: Any) -> Mapping[str, Any]: ...

    # -- vocabulary and draft -----------------------------------------------------------------
    def encode(self, text: str) -> list[int]: ...
    def make_draft(self) -> DraftLike: ...

    # -- the port's own loops -----------------------------------------------------------------
    def generate(self, prompt: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None) -> list[int]: ...
    def speculative_generate(
        self, prompt: Sequence[int], draft: DraftLike, *, max_new_tokens: int, k: int, temperature: float = 0.0,
        seed: int | None = None, commit_path: str | None = None,
    ) -> SpecRun: ...


@dataclass(frozen=True)
class PortOptions:
    """What the command line tells a port factory: ``backend`` and ``row_set`` (None: the port's
    default), the run's ``seed`` (``--specverify-seed``: seed your random weights and drafts with it),
    ``model`` (``--specverify-model``: a checkpoint folder, a config file or a preset name, for ports
    that load one)."""

    backend: str | None = None
    row_set: int | None = None
    seed: int = 0
    model: str | None = None


def byte_encode(text: str, vocab_size: int) -> list[int]:
    """The fallback tokenizer: ``id = byte % vocab_size`` over the UTF-8 bytes."""
    return [b % vocab_size for b in text.encode("utf-8")]


def _declared_limit(port: Any, attr: str, value: int, lowest: int, meaning: str) -> int:
    """``min(value, port.<attr>)`` when the port declares that optional attribute, else ``value``."""
    limit = getattr(port, attr, None)
    if limit is None:
        return value
    if not isinstance(limit, int) or limit < lowest:
        raise ValueError(f"port {getattr(port, 'name', port)!r} declares {attr} = {limit!r}; it must be an int >= {lowest} "
                         f"({meaning}) or absent")
    return min(value, limit)


def require_loop_k(port: Any, k: int) -> None:
    """A port whose loop refuses small k declares ``min_k`` (e.g. 1: no zero-draft rounds); a loop check
    below it is then a visible skip, not a failure and not a silent pass."""
    lowest = getattr(port, "min_k", None)
    if lowest is not None and k < lowest:
        raise NotSupported(f"port {getattr(port, 'name', port)!r} declares min_k = {lowest}: its loop refuses k = {k}, "
                           f"so the loop is not checked at k = {k}")


def own_draft_k(port: Any, k: int) -> int:
    """k for a check that runs the port's own draft: ``min(k, port.max_k)`` when the port declares one."""
    return _declared_limit(port, "max_k", k, 1, "the largest k its own draft proposes")


def context_length(port: Any, length: int) -> int:
    """Tokens for the long-context check: ``min(length, port.max_context)`` when the port declares one."""
    return _declared_limit(port, "max_context", length, 2, "the most tokens one state may hold")
