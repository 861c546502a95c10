"""The hybrid target model: Gated DeltaNet + gated attention decoder layers (``layers.py``; Qwen3.5 /
Qwen3.6 / Qwen3-Next, dense or mixture-of-experts MLPs) and its three entry points (``forward``,
``verify``, ``commit``), plus ``load_target`` for a checkpoint folder.

Batch invariance by construction: tokens go through the network in chunks of ``row_set`` rows; every
GEMM sees exactly ``row_set`` rows (zero-padded; a backend whose rows never depend on the row count,
``row_invariant``, gets the real rows only), every elementwise op sees arrays of the same shape, and
the conv, the delta rule and attention run one row at a time with the same code. So ``forward`` on
T tokens gives, row for row, the bits of T single-token calls, and a verify followed by a full commit
leaves the state a plain step would.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..checkpoint.safetensors import QUANT_FILE, folder_refs, read_config
from ..checkpoint.fields import first_few
from ..errors import CheckpointError, ConfigError, ContextLimitError, StateError
from ..gemm import Linear, get_backend
from ..gemm.base import GemmBackend
from ..ops.kv_cache import KVCache
from ..quant.io import open_quantized
from ..quant.table import RowTable
from .commit import COMMIT_PATHS, commit_verify
from .config import TargetConfig
from ..gemm.base import backend_threads
from .layers import DecoderLayer
from .ops import TargetOps, resolve_ops
from .state import TargetState, VerifyRecord
from .weights import check_and_map

F32 = np.float32


@dataclass(frozen=True)
class Output:
    """logits float32 [T, V]; hidden float32 [T, L, D]: the residual stream after each decoder layer
    (pre-final-norm, HF ``output_hidden_states[l + 1]``) - the taps a DFlash draft reads."""

    logits: np.ndarray
    hidden: np.ndarray



class Target:
    """The hybrid target model bound to one GEMM backend, one row set and one op table (``ops``: "numpy",
    "numba" or "auto", see ``ops/op_sets.py``; ``self.ops.name`` says which ran)."""

    def __init__(self, config: TargetConfig, weights: dict, *, backend: "str | GemmBackend" = "reference", row_set: int = 8,
                 ops: "str | TargetOps" = "auto"):
        if not isinstance(row_set, int) or row_set < 1:
            raise ConfigError(f"row_set must be a positive integer, got {row_set!r}")
        self.config, self.row_set = config, row_set
        self.ops = resolve_ops(ops)
        self.backend = get_backend(backend)
        self.row_invariant = bool(getattr(self.backend, "row_invariant", False))
        lin = lambda name: Linear.from_weight(weights[name], self.backend, row_set, name)  # noqa: E731
        fused = lambda names: Linear.fused([weights[n] for n in names], self.backend, row_set, "+".join(names))  # noqa: E731
        self.embed_tokens = RowTable(weights["model.embed_tokens.weight"])  # [V, D], rows widened on lookup
        self.norm_weight = np.ascontiguousarray(weights["model.norm.weight"], dtype=F32)
        head = "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
        self.lm_head = Linear.from_weight(weights[head], self.backend, row_set, "lm_head.weight")
        self.layers = [DecoderLayer(config, weights, i, lin, fused, self.ops, row_set, self.row_invariant)
                       for i in range(config.num_hidden_layers)]

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return self.ops.norm(x, self.norm_weight, self.config.rms_norm_eps, threads=backend_threads(self.lm_head))

    def new_state(self) -> TargetState:
        return TargetState([layer.mixer.new_state() for layer in self.layers])

    def forward(self, tokens: Sequence[int], state: TargetState) -> Output:
        """Run T >= 1 tokens (a prefill or a plain step) and advance ``state`` by T."""
        self._check_free(state, "forward")
        return self._run(self._tokens(tokens, state), state)

    def verify(self, tokens: Sequence[int], state: TargetState, *, checkpoints: bool = False, logits: bool = True) -> Output:
        """The batched verify of ``[last, d1..dk]`` in one pass; records what ``commit`` needs.

        With ``checkpoints=True`` the GDN state after every row is also kept (needed by
        ``commit(path="checkpoint")``; memory: rows x (conv + recurrent state) per delta-net layer).
        With ``logits=False`` the lm_head is left out (``Output.logits`` is empty, [T, 0]): a caller that
        needs only the rows up to its first rejection computes them with :meth:`logits` - the same bits.
        """
        self._check_free(state, "verify")
        toks = self._tokens(tokens, state)
        start = state.pos
        snapshot = {i: state.hand_over(i) for i, layer in enumerate(self.layers) if layer.kind == "linear_attention"}
        try:
            # the delta-net layers record their rows into the pending record as the run goes by
            state.pending = VerifyRecord.begin(start, len(toks), snapshot, checkpoints)
            return self._run(toks, state, head=logits)
        except BaseException:
            # a verify that did not finish leaves nothing to commit and the state as it found it
            for i, snap in snapshot.items():
                state.layers[i] = snap
            for st in state.layers:
                if isinstance(st, KVCache) and st.length > start:
                    st.truncate(start)
            state.pos, state.pending = start, None
            raise

    def commit(self, state: TargetState, accepted_rows: int, *, path: str = "keep", replay_check: bool = False) -> None:
        """Keep the first ``accepted_rows`` rows of the last verify (see ``commit.py``)."""
        mixers = {i: layer.mixer for i, layer in enumerate(self.layers) if layer.kind == "linear_attention"}
        commit_verify(mixers, state, accepted_rows, path=path, replay_check=replay_check)

    def _tokens(self, tokens, state: TargetState) -> np.ndarray:
        try:
            toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
        except (OverflowError, TypeError, ValueError):
            raise ConfigError(f"tokens must be integer ids in [0, {self.config.vocab_size}), got {str(tokens)[:60]}") from None
        if toks.size == 0:
            raise ConfigError("tokens is empty; forward/verify need at least one token")
        bad = toks[(toks < 0) | (toks >= self.config.vocab_size)]
        if bad.size:
            raise ConfigError(f"token id {int(bad[0])} is outside the vocabulary [0, {self.config.vocab_size}); give ids "
                              f"the model's tokenizer makes")
        limit = self.config.max_position_embeddings
        if state.pos + toks.size > limit:
            raise ContextLimitError(f"{toks.size} token(s) at position {state.pos} would pass the model's "
                                    f"max_position_embeddings={limit}; start a new state or give a shorter input")
        return toks

    @staticmethod
    def _check_free(state: TargetState, what: str) -> None:
        if state.pending is not None:
            raise StateError(
                f"{what}() called while a verify of {state.pending.rows} rows is not committed; "
                f"call commit(state, accepted_rows) first"
            )

    def logits(self, last_hidden: np.ndarray) -> np.ndarray:
        """lm_head(final_norm(h)) for rows of the last layer's output (``Output.hidden[:, -1]``).
        Shapes: [T, D] -> [T, V]. A row's bits are the ones ``forward`` / ``verify`` give it: the norm is
        per row, and the lm_head's rows are independent within a row set."""
        # Linear runs the product in row sets (padding them where the backend needs it), the norm is per row
        return self.lm_head(self.final_norm(np.ascontiguousarray(last_hidden, dtype=F32)))

    def _run(self, toks: np.ndarray, state: TargetState, head: bool = True) -> Output:
        cfg, rs = self.config, self.row_set
        T, L, D = len(toks), cfg.num_hidden_layers, cfg.hidden_size
        # one chunk (a step, a verify): the lm_head's own output, not a copy of it (8 x 248,320 floats a 0.8B verify)
        logits = None if head and T <= rs else np.empty((T, cfg.vocab_size if head else 0), F32)
        hidden = np.empty((T, L, D), F32)
        for c0 in range(0, T, rs):
            chunk = toks[c0 : c0 + rs]
            n = len(chunk)
            R = n if self.row_invariant else rs  # a row-invariant backend needs no padding
            x = np.zeros((R, D), F32)  # [R, D], rows >= n are zero padding
            x[:n] = self.embed_tokens[chunk]
            for i, layer in enumerate(self.layers):
                x = layer(x, n, state)
                hidden[c0 : c0 + n, i] = x[:n]
            if logits is None:
                logits = self.lm_head(self.final_norm(x))[:n]
            elif head:
                logits[c0 : c0 + n] = self.lm_head(self.final_norm(x))[:n]
            state.pos += n
        return Output(logits, hidden)


def folder_weights(folder: Path, *, values: bool = True) -> dict:
    """Every weight of a checkpoint folder, none read yet: checkpoint tensors as refs and, in a servable
    quantized folder (``onebit quantize --out DIR``, ``onebit synth``), ``quantized.safetensors``'s weights
    as lazily read quantized rows. The target packs each weight a block at a time from these, so loading
    never holds a float copy of the model (docs/architecture.md, "Memory"). ``values=False``: the quantized
    codes are not scanned (``open_quantized``)."""
    tensors = folder_refs(folder)
    if (folder / QUANT_FILE).exists():
        quantized = open_quantized(folder / QUANT_FILE, values=values)
        both = sorted(set(quantized) & set(tensors))
        if both:  # which copy would run is not for the loader to guess
            raise CheckpointError(f"{folder}: {len(both)} weight(s) are both in {QUANT_FILE} and in the float checkpoint "
                                  f"files: {first_few(both)}; keep one copy (`onebit quantize --out DIR` writes each "
                                  f"projection only to {QUANT_FILE})")
        tensors.update(quantized)
    return tensors


def load_target(path: "str | Path", *, backend: "str | GemmBackend" = "reference", row_set: int = 8,
                ops: "str | TargetOps" = "auto") -> Target:
    """Load a Hugging Face checkpoint folder (config.json + *.safetensors, single or sharded).

    A folder written by ``onebit quantize --out DIR`` also holds ``quantized.safetensors``: its
    projections are handed to the backend pre-quantized (``host-int`` / ``xrt`` run the codes as they
    are; ``reference`` runs their float dequantization)."""
    folder = Path(path)
    config = TargetConfig.from_hf(read_config(folder), source=str(folder / "config.json"))
    weights = check_and_map(folder_weights(folder), config, str(folder))
    return Target(config, weights, backend=backend, row_set=row_set, ops=ops)


__all__ = ["Target", "Output", "load_target", "COMMIT_PATHS"]
