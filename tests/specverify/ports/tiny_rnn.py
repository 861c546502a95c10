"""A third port, built only from the plugin's helpers (``SnapshotCommit``, ``ReferenceLoop``, ``NgramDraft``):
a tiny numpy recurrent target with a conv window, no taps, and a batched pass that differs from single
steps by rounding (as any BLAS does), so it is correct but not bitwise: the fp32 profile's port."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pytest_specverify.helpers import NgramDraft, SnapshotCommit, plain_generate, reference_speculative_generate
from pytest_specverify.protocol import Rows, byte_encode

F32 = np.float32


@dataclass
class RnnState:
    h: np.ndarray
    conv: np.ndarray
    length: int = 0
    pending: object = None
    log: list = field(default_factory=list)


class TinyRnnPort(SnapshotCommit):
    name = "tiny-rnn"
    tolerance = "fp32"
    commit_paths = ("keep", "replay")

    def __init__(self, vocab: int = 48, hidden: int = 16, seed: int = 0, logit_scale: float = 3.0, batch_ulps: bool = True):
        rng = np.random.default_rng(seed)
        self.vocab_size = vocab
        self.E = rng.standard_normal((vocab, hidden)).astype(F32)
        self.W = (0.5 * rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(F32)
        self.U = (logit_scale * rng.standard_normal((hidden, vocab)) / np.sqrt(hidden)).astype(F32)
        self.batch_ulps = batch_ulps
        self.seed = seed

    def new_state(self):
        return RnnState(np.zeros(self.W.shape[0], F32), np.zeros((3, self.W.shape[0]), F32))

    def forward(self, state, tokens):
        rows = []
        for t in tokens:
            x = self.E[int(t)] + state.conv.mean(0)
            state.conv = np.concatenate([state.conv[1:], x[None]], 0)
            state.h = np.tanh(state.h @ self.W + x).astype(F32)
            if self.batch_ulps and len(tokens) > 1:  # a batched pass rounds differently: one ulp here and there
                state.h = np.nextafter(state.h, np.float32(np.inf)) if int(t) % 2 else state.h
            rows.append(state.h @ self.U)
        state.length += len(tokens)
        return Rows(np.asarray(rows, F32), None)

    def snapshot(self, state):
        return state.h.copy(), state.conv.copy(), state.length

    def restore(self, state, snap):
        state.h, state.conv, state.length = snap[0].copy(), snap[1].copy(), snap[2]

    def state_arrays(self, state):
        return {"layer.0.h": state.h, "layer.0.conv": state.conv}

    def encode(self, text):
        return byte_encode(text, self.vocab_size)

    def make_draft(self):
        return NgramDraft(self.vocab_size, seed=self.seed + 1)

    def generate(self, prompt, *, max_new_tokens, temperature=0.0, seed=None):
        return plain_generate(self, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)

    def speculative_generate(self, prompt, draft, *, max_new_tokens, k, temperature=0.0, seed=None, commit_path=None):
        return reference_speculative_generate(self, prompt, draft, max_new_tokens=max_new_tokens, k=k,
                                              temperature=temperature, seed=seed, commit_path=commit_path)


def make_port(options) -> TinyRnnPort:
    return TinyRnnPort(seed=options.seed)
