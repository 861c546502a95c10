"""Apple's mlx-lm as a specverify port (entry point ``mlx-lm``; extra ``[mlx]``: mlx, mlx-cpu on Linux, mlx-lm).

``--specverify-port mlx-lm --specverify-model FOLDER`` verifies an HF checkpoint folder mlx-lm loads (a
``qwen3_5_text`` config is loaded as mlx-lm's ``qwen3_5``). Without ``--specverify-model`` (or with
``tiny-qwen3_5``) the port writes a seeded tiny random Qwen3.5 checkpoint (``--specverify-seed``) into a
temporary folder (``helpers.tiny_models``).

Commit paths, over mlx-lm's per-layer caches (``KVCache`` for attention, ``ArraysCache`` [conv, state]
for the delta-net, ``RotatingKVCache`` for a sliding window):

* ``keep`` - a full accept keeps what the verify left; a partial one rewinds (attention KV trimmed back by
  its offset, delta-net arrays put back, a ring buffer restored from a copy) and re-runs the kept rows in
  one batch. mlx-lm's own ``trim_prompt_cache`` is not used: on a delta-net cache it trims nothing and
  returns 0 (an ``ArraysCache`` is not trimmable), so a loop relying on it keeps the rejected rows.
* ``replay`` - the same rewind, then one forward per kept row.

Profile ``exact``: on mlx's CPU backend a batched pass and single steps sum in the same order for any row
count (its reference BLAS, and a sequential delta-net update at every length), so keep, replay and steps
agree bit for bit (measured: the battery green with ``exact`` on seeds 0..3, Qwen3.5 and Qwen3-Next).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..helpers.loop import ReferenceLoops
from ..helpers.ngram import NgramDraft
from ..helpers.snapshot import check_verify, take_pending
from ..protocol import NotSupported, PortOptions, Rows, byte_encode
from ..tolerance import profile

PATHS = ("keep", "replay")
TINY = ("tiny-qwen3_5", "tiny-qwen3_next")
#: model types mlx-lm names differently from transformers
MODEL_TYPES = {"qwen3_5_text": "qwen3_5"}


@dataclass
class MlxState:
    cache: list
    length: int = 0
    pending: Any = None


@dataclass
class Rewind:
    """What a verify changed, to undo: the KV offsets, the delta-net arrays, ring buffers' copies."""

    start: int
    rows: list[int]
    saved: list = field(default_factory=list)


def _kind(cache) -> str:
    name = type(cache).__name__
    if name in ("KVCache", "RotatingKVCache", "ArraysCache"):
        return name
    raise TypeError(f"mlx-lm cache {name} is not one the mlx-lm port can rewind (KVCache, RotatingKVCache, ArraysCache)")


def _copy(a):
    import mlx.core as mx

    if a is None:
        return None
    out = mx.array(a)  # a copy: mlx-lm writes KV rows into its buffers by slice assignment
    mx.eval(out)
    return out


def save_cache(cache: list) -> list:
    """Enough of every layer's cache to undo a forward (see ``restore_cache``)."""
    saved = []
    for c in cache:
        kind = _kind(c)
        if kind == "KVCache":
            saved.append(c.offset)
        elif kind == "ArraysCache":
            saved.append(list(c.cache))  # mlx-lm replaces these arrays (cache[i] = new), never writes into them
        else:
            saved.append((_copy(c.keys), _copy(c.values), c.offset, c._idx))
    return saved


def restore_cache(cache: list, saved: list) -> None:
    for c, s in zip(cache, saved):
        kind = _kind(c)
        if kind == "KVCache":
            c.trim(c.offset - s)  # the rows past the offset are dead: the next forward overwrites them
        elif kind == "ArraysCache":
            c.cache = list(s)
        else:
            c.keys, c.values, c.offset, c._idx = _copy(s[0]), _copy(s[1]), s[2], s[3]


def _np(a):
    import numpy as np

    return np.array(a, dtype=np.float32)


def cache_arrays(cache: list) -> dict:
    """Every live array (batch row 0, float32 numpy): ``layer.{i}.keys`` / ``.values`` ``[H, T, hd]`` in position
    order, ``layer.{i}.positions`` for a ring buffer (which rows it still holds), ``layer.{i}.conv`` ``[K-1, C]``,
    ``layer.{i}.recurrent`` ``[Hv, dv, dk]``."""
    import numpy as np

    out = {}
    for i, c in enumerate(cache):
        kind = _kind(c)
        if kind == "ArraysCache":
            for name, a in zip(("conv", "recurrent"), c.cache):
                if a is not None:
                    out[f"layer.{i}.{name}"] = _np(a[0])
        elif c.keys is None:
            continue
        elif kind == "KVCache":
            out[f"layer.{i}.keys"] = _np(c.keys[0, :, : c.offset])
            out[f"layer.{i}.values"] = _np(c.values[0, :, : c.offset])
        else:  # a ring buffer: its slots in temporal order, and the positions they hold
            keys, values = c._temporal_order(c.keys), c._temporal_order(c.values)
            held = min(c.offset, c.max_size)
            out[f"layer.{i}.keys"] = _np(keys[0, :, -held:] if held else keys[0, :, :0])
            out[f"layer.{i}.values"] = _np(values[0, :, -held:] if held else values[0, :, :0])
            first = c.offset - held
            kept = list(range(min(c.keep, first))) if first else []
            out[f"layer.{i}.positions"] = np.array(kept + list(range(first + len(kept), c.offset)), np.int64)
    return out


class MlxLmPort(ReferenceLoops):
    """mlx-lm's own speculative loop rewinds with trim_prompt_cache (see the module docstring): the loops are the reference ones."""

    commit_paths = PATHS
    # bitwise within itself (mlx-cpu's BLAS sums in one order for any row count); against the engine's float32
    # reference model it rounds otherwise: measured max |diff| in logits over seeds 0-3 3e-5 on a Zen 5 but 3.6e-4 on
    # a Zen 3 (AVX2; seed 1, one position of a 53-token prefill). These tiny random models amplify rounding along a
    # prompt: the engine's own numpy and numba op tables differ by up to 5.4e-4 on 56-token prompts there. Bound 8e-4.
    tolerance = replace(profile("exact"), name="exact+mlx", source="declared by the mlx-lm adapter", reference=(8e-4, 1e-4))

    def __init__(self, model, *, name: str = "mlx-lm", draft_seed: int = 0, reference: str | None = None):
        self.model = model
        self.lm = getattr(model, "language_model", model)
        self.name = name
        self.vocab_size = int(self.lm.args.vocab_size)
        self.draft_seed = draft_seed
        self.reference_path = reference  # the HF folder the weights came from (the reference-agreement check reads it)
        self.draft_may_never_match = True  # its n-gram draft proposes from the context: random tiny models never repeat

    # -- target ------------------------------------------------------------------------------------
    def new_state(self) -> MlxState:
        return MlxState(self.lm.make_cache())

    def _run(self, state: MlxState, tokens: Sequence[int]) -> Rows:
        import mlx.core as mx

        h = self.lm.model(mx.array([[int(t) for t in tokens]]), cache=state.cache)
        head = self.lm.model.embed_tokens.as_linear if self.lm.args.tie_word_embeddings else self.lm.lm_head
        logits = head(h)
        mx.eval(logits, h, [c.state for c in state.cache])
        state.length += len(tokens)
        return Rows(_np(logits[0]), _np(h[0]))

    def prefill(self, state: MlxState, tokens: Sequence[int]) -> Rows:
        return self._run(state, tokens)

    def step(self, state: MlxState, token: int) -> Rows:
        return self._run(state, [token])

    def verify(self, state: MlxState, tokens: Sequence[int], *, path: str) -> Rows:
        check_verify(self, state, path)
        rewind = Rewind(state.length, [int(t) for t in tokens], save_cache(state.cache))
        out = self._run(state, tokens)
        state.pending = rewind
        return out

    def commit(self, state: MlxState, accepted_rows: int, *, path: str, replay_check: bool = False) -> None:
        rw = take_pending(state, accepted_rows)
        kept = rw.rows[:accepted_rows]
        if path == "keep" and accepted_rows == len(rw.rows):
            pass
        else:
            restore_cache(state.cache, rw.saved)
            state.length = rw.start
            if path == "keep" and kept:
                self._run(state, kept)
            elif path == "replay":
                for t in kept:
                    self._run(state, [t])
        if replay_check:
            raise NotSupported(f"port {self.name!r} has no replay check of its own")

    def state_arrays(self, state: MlxState):
        return cache_arrays(state.cache)

    def close(self, state: MlxState) -> None:
        """The optional protocol method: the state's arrays are let go now (MLX frees them with their last reference)."""
        state.cache.clear()
        state.pending = None

    # -- vocabulary and draft ----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return byte_encode(text, self.vocab_size)

    def make_draft(self):
        return NgramDraft(self.vocab_size, seed=self.draft_seed)


def load_folder(folder):
    """mlx-lm's model for an HF checkpoint folder (``qwen3_5_text`` loaded as mlx-lm's ``qwen3_5``; transformers 5's
    ``rope_parameters`` also given at the top level, where mlx-lm's ``qwen3_next`` reads them)."""
    import json
    from pathlib import Path

    try:
        from mlx_lm.utils import load_model
    except ImportError as exc:
        raise ImportError(f"the mlx-lm port needs mlx-lm ({exc}); install the extra: pip install "
                          f"'onebit-specverify[mlx]' (on Linux it brings mlx's CPU wheel, mlx-cpu)") from None
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"--specverify-model {folder}: not a checkpoint folder (no config.json)")
    cfg = json.loads((folder / "config.json").read_text())
    extra = {"model_type": MODEL_TYPES.get(cfg.get("model_type"), cfg.get("model_type"))}
    rope = cfg.get("rope_parameters") or {}
    for key in ("rope_theta", "partial_rotary_factor"):  # mlx-lm's qwen3_next reads them at the top level only
        if key not in cfg and key in rope:
            extra[key] = rope[key]
    model, _ = load_model(folder, model_config=extra)
    return model


def make_port(options: PortOptions) -> MlxLmPort:
    """Entry point ``mlx-lm`` of the ``specverify.ports`` group."""
    import tempfile

    from ..helpers.tiny_models import tiny_hf_folder

    spec = options.model or "tiny-qwen3_5"
    if spec in TINY:
        tmp = tempfile.TemporaryDirectory(prefix="specverify-mlx-")
        tiny_hf_folder(tmp.name, seed=options.seed, model_type=spec[len("tiny-"):])
        port = MlxLmPort(load_folder(tmp.name), name=f"mlx-lm[{spec} seed {options.seed}]", draft_seed=options.seed,
                         reference=tmp.name)
        port._tmp = tmp  # the folder lives as long as the port
        return port
    if spec.startswith("tiny-"):
        raise ValueError(f"--specverify-model {spec}: the mlx-lm port builds {', '.join(TINY)}; give a checkpoint folder")
    return MlxLmPort(load_folder(spec), name=f"mlx-lm[{spec}]", draft_seed=options.seed, reference=spec)
