"""``LlamaCppPort``: llama.cpp's hybrid Qwen3.5 (arch ``qwen35``) as a specverify port.

Commit paths:

* ``keep`` - llama.cpp's own rollback: ``llama_memory_seq_rm`` drops the rejected rows (the attention KV
  cells, and the delta-net state through the per-row snapshots ``n_rs_seq`` keeps). Where llama.cpp
  refuses (``seq_rm`` returns false: an arch without recurrent rollback such as ``qwen3next``, or more
  rows than ``n_rs_seq``), the state saved before the verify is restored and the kept rows re-run in one
  batch. A commit that keeps *no* row is always restored from the saved state, never ``seq_rm``:
  a llama.cpp bug (the llama.cpp llama-cpp-python 0.3.36 vendors, ``llama_memory_recurrent::seq_rm``):
  removing every row of the last decode is accepted (returns true) but the delta-net state before that
  decode was never snapshotted, so it stays the one after the decode (tiny checkpoints: off by 1.0-1.7, the
  next logits by 0.2-3.1) while the KV and the conv window are rolled back right. ``zero_row_keep="seq_rm"``
  keeps the bug, for the test that shows the battery catches it.
* ``replay`` - restore the saved state, then one ``llama_decode`` per kept row.

``commit(..., replay_check=True)`` runs the port's own replay check: the kept state is compared, within
the port's profile, with a replay in a scratch context.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Sequence

from ...helpers.loop import ReferenceLoops
from ...helpers.ngram import NgramDraft
from ...helpers.snapshot import check_verify, take_pending
from ...protocol import Rows, byte_encode
from ...tolerance import declared
from .blob import parse_seq_state
from .native import Context, Model

PATHS = ("keep", "replay")
ZERO_ROW_KEEPS = ("restore", "seq_rm")

#: float32 weights and KV, flash attention off, one thread, on the tiny checkpoints: the battery (tests/specverify/battery/llama_cpp)
#: on seeds 0..8 measured at most logits 9.5e-5, keys 5.7e-5, values 5.3e-5, conv 3.2e-5, delta-net state 6e-6 (a batch
#: of rows and one row sum in different orders in ggml's CPU matmul; the fuzz's long sequences measure the most).
#: The bounds sit 3-5x above. The port agrees with transformers on the same checkpoint to ~4e-5 in logits
#: (tests/specverify/adapters/test_llama_cpp_port.py). Positions (``kv.positions``) are integers: any difference fails.
#: Against the engine's float32 reference (the reference-agreement check, prompts up to 59 tokens) ggml's AVX2 build
#: on a Zen 3 measured at most 3.4e-4 (seed 0, one position of a 53-token prefill; seeds 1-3: 2.5e-4, 1.0e-4,
#: 5.8e-5), more than the AVX-512 build of a Zen 5, which passed 3e-4: the reference bound is 8e-4, still well
#: under what a conversion mistake moves (2e-3 and more: the transformers-agreement test's broken variants).
FP32 = declared(name="llama.cpp-fp32", atol=3e-4, rtol=1e-4, tie_margin=1e-3,
                kinds={"logits": (5e-4, 1e-4), "taps": (5e-4, 1e-4), "reference": (8e-4, 1e-4)})


@dataclass
class Pending:
    """An uncommitted verify: the sequence state saved before it, its rows, the position of its first row."""

    saved: bytes
    rows: list[int]
    start: int


@dataclass
class LlamaState:
    ctx: Context
    length: int = 0
    pending: Pending | None = None
    finalizer: object = None


class LlamaCppPort(ReferenceLoops):
    """llama.cpp's own speculative loop lives in its common library, outside the C API: the loops are the reference ones."""

    commit_paths = PATHS

    def __init__(self, model: Model, *, name: str | None = None, draft_seed: int = 0, tolerance=FP32,
                 zero_row_keep: str = "restore", reference: str | None = None):
        if zero_row_keep not in ZERO_ROW_KEEPS:
            raise ValueError(f"zero_row_keep={zero_row_keep!r} is not one of {ZERO_ROW_KEEPS}")
        self.model = model
        self.name = name or f"llama-cpp[{model.path.name}]"
        self.vocab_size = model.vocab_size
        self.max_context = model.settings.n_ctx
        self.tolerance = tolerance
        self.draft_seed = draft_seed
        self.zero_row_keep = zero_row_keep
        self.reference_path = reference  # an HF folder of the same weights, when the port was made from one
        self.draft_may_never_match = True  # its n-gram draft proposes from the context: random tiny models never repeat

    # -- target ------------------------------------------------------------------------------------
    def new_state(self) -> LlamaState:
        ctx = self.model.acquire()
        st = LlamaState(ctx)
        st.finalizer = weakref.finalize(st, self.model.release, ctx)  # a state the checks drop frees its context
        st.finalizer.atexit = False
        return st

    def close(self, state: LlamaState) -> None:
        """The context goes back to the pool now (the optional protocol method; a dropped state does it too)."""
        state.finalizer()

    def _run(self, state: LlamaState, tokens: Sequence[int]) -> Rows:
        logits, taps = state.ctx.decode([int(t) for t in tokens], state.length)
        state.length += len(tokens)
        return Rows(logits, taps)

    def prefill(self, state: LlamaState, tokens: Sequence[int]) -> Rows:
        return self._run(state, tokens)

    def step(self, state: LlamaState, token: int) -> Rows:
        return self._run(state, [token])

    def verify(self, state: LlamaState, tokens: Sequence[int], *, path: str) -> Rows:
        check_verify(self, state, path)
        pend = Pending(state.ctx.save(), [int(t) for t in tokens], state.length)
        out = self._run(state, tokens)
        state.pending = pend
        return out

    def _restore(self, state: LlamaState, pend: Pending) -> None:
        state.ctx.load(pend.saved)
        state.length = pend.start

    def commit(self, state: LlamaState, accepted_rows: int, *, path: str, replay_check: bool = False) -> None:
        pend = take_pending(state, accepted_rows)
        kept = pend.rows[:accepted_rows]
        if path == "replay":
            self._restore(state, pend)
            for t in kept:
                self._run(state, [t])
        elif accepted_rows == len(pend.rows):
            pass  # a full accept keeps what the verify left
        elif accepted_rows == 0 and self.zero_row_keep == "restore":
            self._restore(state, pend)  # never seq_rm of a whole decode: see the module docstring
        elif state.ctx.seq_rm(pend.start + accepted_rows):
            state.length = pend.start + accepted_rows
        else:  # llama.cpp refused the rollback: restore and re-run the kept rows in one batch
            self._restore(state, pend)
            if kept:
                self._run(state, kept)
        if replay_check:
            self._replay_check(state, pend, kept)

    def _replay_check(self, state: LlamaState, pend: Pending, kept: list[int]) -> None:
        """The kept state against a replay of the same rows from the saved state, in a scratch context."""
        from ...compare import first_state_difference
        from ...tolerance import profile

        scratch = self.new_state()
        try:
            self._restore(scratch, pend)
            for t in kept:
                self._run(scratch, [t])
            bad = first_state_difference(self.state_arrays(state), self.state_arrays(scratch), profile(self.tolerance))
        finally:
            self.close(scratch)
        if bad:
            raise RuntimeError(f"{self.name}: replay check after keeping {len(kept)} rows: {bad}")

    def state_arrays(self, state: LlamaState):
        return parse_seq_state(state.ctx.save(), self.model.layout)

    # -- vocabulary and draft ----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return byte_encode(text, self.vocab_size)

    def make_draft(self):
        return NgramDraft(self.vocab_size, seed=self.draft_seed)

    def describe(self) -> dict:
        s = self.model.settings
        return {"port": self.name, "arch": self.model.arch, "flash_attn": s.flash_attn, "kv": "f32" if s.kv_f32 else "f16",
                "n_rs_seq": s.n_rs_seq, "zero_row_keep": self.zero_row_keep}

