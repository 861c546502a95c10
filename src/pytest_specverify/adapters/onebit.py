"""``onebit_engine`` as a specverify port. The engine is imported only when a port is built.

``make_port(options)`` builds the battery's default: a seeded tiny random hybrid target (GDN +
gated attention, vocabulary 32) with a seeded random DFlash draft. ``make_folder_port(folder, options)``
points it at a checkpoint folder (any model type ``load_target`` reads, MoE ones included).
``OnebitPort(target)`` wraps any ``onebit_engine.Target`` (or a subclass, e.g. a mutant).
"""
from __future__ import annotations

import tempfile
from typing import Any, Sequence

from ..protocol import PortOptions, Rows, SpecRun, byte_encode

#: The battery's tiny target: 1 delta-net layer + 1 attention layer, a vocabulary small enough for the
#: sampling statistics (a chi-square needs enough expected counts per token; docs/verify-your-port.md).
TINY = dict(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, full_attention_interval=2)


class OnebitPort:
    """The adapter. Bitwise by construction (batch-invariant row sets), so its profile is ``exact``."""

    tolerance = "exact"
    min_k = 1  # the engine's loop refuses k < 1 (ConfigError): the battery's k = 0 loop check is a visible skip

    @property
    def commit_paths(self) -> tuple[str, ...]:
        """The engine's own list (a new commit path is tested here too); a subclass may name fewer by a class attribute."""
        from onebit_engine.hybrid.commit import COMMIT_PATHS

        return COMMIT_PATHS

    def __init__(self, target, *, name: str = "onebit", draft_seed: int = 0, draft=None, tokenizer=None,
                 reference_path=None, tolerance=None):
        self.target = target
        self.reference_path = reference_path  # the checkpoint folder (the reference-agreement check loads it)
        if tolerance is not None:
            self.tolerance = tolerance
        self.name = name
        self.vocab_size = int(target.config.vocab_size)
        self.draft_seed = draft_seed
        self._draft = draft
        self.tokenizer = tokenizer

    # -- target ----------------------------------------------------------------------------------
    def new_state(self):
        return self.target.new_state()

    def prefill(self, state, tokens: Sequence[int]) -> Rows:
        out = self.target.forward(list(tokens), state)
        return Rows(out.logits, out.hidden)

    def step(self, state, token: int) -> Rows:
        out = self.target.forward([int(token)], state)
        return Rows(out.logits, out.hidden)

    def verify(self, state, tokens: Sequence[int], *, path: str) -> Rows:
        out = self.target.verify(list(tokens), state, checkpoints=(path == "checkpoint"))
        return Rows(out.logits, out.hidden)

    def commit(self, state, accepted_rows: int, *, path: str, replay_check: bool = False) -> None:
        self.target.commit(state, accepted_rows, path=path, replay_check=replay_check)

    def state_arrays(self, state):
        return state.arrays()

    @property
    def max_k(self) -> "int | None":
        """The draft's block size minus 1 (the engine's loop refuses more); None for a draft without one."""
        block = int(self.make_draft().block_size or 0)
        return block - 1 if block > 1 else None

    # -- vocabulary and draft --------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer is not None:
            return list(self.tokenizer.encode(text))
        return byte_encode(text, self.vocab_size)

    def make_draft(self):
        """A seeded random DFlash draft (draft/synthetic.py) sized for the target, loaded once."""
        if self._draft is None:
            from onebit_engine import load_draft
            from onebit_engine.draft import write_synthetic_draft

            with tempfile.TemporaryDirectory(prefix="specverify-draft-") as tmp:
                write_synthetic_draft(tmp, self.target.config, seed=self.draft_seed, block_size=8, num_layers=1)
                self._draft = load_draft(tmp, self.target, backend=self.target.backend, row_set=self.target.row_set)
        return self._draft

    # -- loops -----------------------------------------------------------------------------------
    def generate(self, prompt, *, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None) -> list[int]:
        from onebit_engine.loop import generate

        return list(generate(self.target, list(prompt), max_new_tokens=max_new_tokens, temperature=temperature,
                             seed=seed, stop_tokens=[]).tokens)

    def speculative_generate(self, prompt, draft, *, max_new_tokens: int, k: int, temperature: float = 0.0,
                             seed: int | None = None, commit_path: str | None = None) -> SpecRun:
        from onebit_engine import speculative_generate
        from onebit_engine.measure.provenance import loop_provenance

        res = speculative_generate(self.target, draft, list(prompt), max_new_tokens=max_new_tokens, k=k,
                                   temperature=temperature, seed=seed, commit_path=commit_path or "keep", stop_tokens=[])
        prov = loop_provenance(self.target, draft, k=int(k), commit_path=commit_path or "keep", temperature=temperature)
        return SpecRun(list(res.tokens), [r.accepted for r in res.rounds], [r.proposed for r in res.rounds],
                       extra={"tokens_per_s": res.tokens_per_s, "provenance": prov})

    def describe(self) -> dict[str, Any]:
        desc = dict(self.target.backend.describe())
        return {"port": self.name, "backend": desc.get("backend"), "kernel_set": desc.get("kernel_set"),
                "row_set": self.target.row_set, "vocab_size": self.vocab_size}


def make_trained_port(options: PortOptions) -> OnebitPort:
    """Entry point ``onebit-trained``: the engine's built-in trained pair (real tokenizer, trained DFlash 2
    draft), so the default prompt texts are encoded as a user's would be and acceptance is real."""
    from onebit_engine import load_draft, load_target
    from onebit_engine.default_model import builtin_paths, load_tokenizer

    if options.model is not None:  # a model given here would be silently replaced by the built-in pair
        raise ValueError(f"--specverify-model {options.model}: the onebit-trained port runs the built-in pair; give "
                         f"--specverify-port onebit to check the engine on a checkpoint folder")

    target_dir, draft_dir, tok = builtin_paths()
    target = load_target(target_dir, backend=options.backend or "reference", row_set=options.row_set or 8)
    draft = load_draft(draft_dir, target, backend=target.backend, row_set=target.row_set)
    return OnebitPort(target, name="onebit-trained", draft=draft, tokenizer=load_tokenizer(tok),
                      reference_path=str(target_dir), tolerance=_tolerance(target))


#: the host-int backend's int8 x int8 GEMMs against the float32 reference, on the tiny random targets:
#: measured max |dlogit| 0.34 to 2.1 over seeds 0..5 (quantization of 32-wide random activations, not
#: rounding); the bound is about twice the worst. It shows the port computes this model, coarsely.
HOST_INT_REFERENCE = (4.0, 0.0)


def _tolerance(target):
    """``exact`` (the bitwise claims: verify and commit against steps); a backend that quantizes declares
    how far its logits are from the float32 reference model."""
    from ..tolerance import profile

    if target.backend.describe().get("backend") == "reference":
        return profile("exact")
    from dataclasses import replace

    return replace(profile("exact"), name="exact+int8", source="declared by the onebit adapter", reference=HOST_INT_REFERENCE)


def _tiny_checkpoint(seed: int) -> str:
    """The tiny seeded target written as a checkpoint folder (removed when the process ends): what the
    port loads, and the reference the reference-agreement check compares it with."""
    import atexit
    import shutil

    from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint

    folder = tempfile.mkdtemp(prefix="specverify-onebit-")
    atexit.register(shutil.rmtree, folder, True)
    cfg = tiny_config(**TINY)
    write_checkpoint(folder, cfg, random_weights(cfg, 1000 + seed))
    return folder


def make_port(options: PortOptions) -> OnebitPort:
    """Entry point of the ``specverify.ports`` group: the tiny seeded hybrid target, or with ``--specverify-model
    DIR`` the engine on that checkpoint folder (:func:`make_folder_port`; the option was otherwise ignored)."""
    from onebit_engine import load_target

    if options.model is not None:
        return make_folder_port(options.model, options, name="onebit")
    folder = _tiny_checkpoint(options.seed)
    target = load_target(folder, backend=options.backend or "reference", row_set=options.row_set or 8)
    return OnebitPort(target, draft_seed=options.seed, reference_path=folder, tolerance=_tolerance(target))


def make_folder_port(folder, options: PortOptions, *, name: str = "onebit-folder") -> OnebitPort:
    """The engine on the checkpoint in ``folder`` (config.json + safetensors), with a seeded random draft."""
    from onebit_engine import load_target

    target = load_target(folder, backend=options.backend or "reference", row_set=options.row_set or 8)
    return OnebitPort(target, name=name, draft_seed=options.seed, reference_path=str(folder), tolerance=_tolerance(target))
