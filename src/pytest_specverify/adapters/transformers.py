"""Hugging Face transformers causal LMs as a specverify port (entry point ``transformers``).

``--specverify-port transformers --specverify-model PATH``: PATH is a checkpoint folder
(``config.json`` + weights, loaded with ``AutoModelForCausalLM``), a ``config.json`` file (random
weights, seeded by ``--specverify-seed``), or a built-in tiny seeded random config: ``tiny-qwen3_5``
(the default: ``Qwen3_5ForCausalLM``, model_type ``qwen3_5_text``) or ``tiny-qwen3_next`` (dense MLP):
4 layers (3 Gated DeltaNet : 1 gated attention), hidden 64, vocabulary 256, float32 on the CPU.

The port: ``SnapshotCommit`` (commit paths ``keep`` and ``replay`` from cloning the cache), the
reference loop of ``helpers.loop`` (the documented rule; transformers' own ``generate`` does not
speak the draft protocol), a seeded bigram ``NgramDraft``, and ``state_arrays`` over
``DynamicCache`` (keys / values, conv and recurrent states). Tolerance: the fp32 profile, with logits
allowed the rounding of a batched pass against single steps (declared, shown in the header).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..helpers import hf_cache
from ..helpers.loop import ReferenceLoop, plain_generate, reference_speculative_generate
from ..helpers.ngram import NgramDraft
from ..helpers.snapshot import SnapshotCommit
from ..protocol import PortOptions, Rows, byte_encode
from ..tolerance import declared

TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, full_attention_interval=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
TINY_TYPES = ("qwen3_5", "qwen3_next")

#: fp32 as measured on the tiny configs at init 0.1 (a batched pass vs single steps vs one prefill): typically
#: states up to 3e-5, logits and taps up to 3.3e-5 at |x| ~ 3.5; the worst over 20 seeds of the battery
#: (--specverify-seed 100..119) 1.5e-4, a k = 15 verify's attention keys after 7 kept rows - so about 3x that.
#: The fp32 profile's 1e-5 is below it. A real checkpoint's values are larger: declare your own (see
#: docs/verify-your-port.md). The broken variants' errors are 1e-2 and up (tests/specverify/adapters/test_transformers_port.py).
#: ``reference``: against the engine's float32 reference model on the same checkpoint, measured max |dlogit|
#: 2e-5 (tiny-qwen3_5) and 9e-5 (tiny-qwen3_next) over a 40-token prompt; a rotary, norm or gate 1e-4
#: off (relative) moves logits by 5e-4 and up (tests/specverify/checks/test_reference.py).
#: ``logits``: 2e-4 + 5e-5 |x|: measured up to 1.4e-4 (the next step after a k = 7 commit, --specverify-seed 3;
#: 2.5e-5 to 5.5e-5 on seeds 0..2). The sampling check's probe rounds take this bound as the rounding a correct
#: loop may reject a draft for, so a looser one costs it runs (n drafts with n * bound well below the 0.02 n
#: of its named effect).
FP32 = declared(name="transformers-fp32", atol=5e-4, rtol=1e-4, tie_margin=1e-3,
                kinds={"logits": (2e-4, 5e-5), "taps": (5e-4, 1e-4), "reference": (1.5e-4, 3e-5)})


def tiny_model(model_type: str = "qwen3_5", seed: int = 0, init: float = 0.1):
    """A seeded tiny random model of ``model_type`` (float32, eval). ``init``: std of the random weights
    (larger than HF's 0.02, so that p has spread and the sampling checks see temperature mistakes)."""
    import torch
    import transformers as tf

    if model_type not in TINY_TYPES:
        raise ValueError(f"tiny model type {model_type!r} is not one of {TINY_TYPES}")
    torch.manual_seed(seed)
    rope = {"rope_type": "default", "partial_rotary_factor": 0.25}
    if model_type == "qwen3_next":
        cfg = tf.Qwen3NextConfig(**TINY, num_experts=0, initializer_range=init, rope_parameters=dict(rope, rope_theta=1e4))
        model = tf.Qwen3NextForCausalLM(cfg)
    else:
        half = int(TINY["head_dim"] * 0.25) // 2
        section = [half - 2 * (half // 4), half // 4, half // 4]
        cfg = tf.Qwen3_5TextConfig(**TINY, initializer_range=init,
                                   rope_parameters=dict(rope, rope_theta=1e7, mrope_section=section, mrope_interleaved=True))
        model = tf.Qwen3_5ForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # HF's zero / one inits (norms, dt_bias) hide layout bugs: perturb them
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g))
    return model.float().eval()


@dataclass
class HFState:
    cache: Any
    length: int = 0
    pending: Any = None


class TransformersPort(SnapshotCommit):
    """Any transformers causal LM whose cache ``helpers.hf_cache`` can snapshot."""

    commit_paths = ("keep", "replay")
    loop_class = ReferenceLoop
    # its draft is a seeded random bigram table standing in for a real one: over 256 tokens it matches the
    # target by chance only (no draft accepted over the 10 prompts at --specverify-seed 2), so greedy identity's
    # power check is a visible skip here; forced acceptance checks the accepted rows
    draft_may_never_match = True

    def __init__(self, model, *, name: str = "transformers", tokenizer=None, draft_seed: int = 0, tolerance=FP32,
                 reference_path=None):
        import torch

        self.torch = torch
        self.model = model
        self.name = name
        self.vocab_size = int(model.config.vocab_size)
        self.tokenizer = tokenizer
        self.draft_seed = draft_seed
        self.tolerance = tolerance
        self.reference_path = reference_path  # the checkpoint folder (the reference-agreement check loads it)

    # -- target ------------------------------------------------------------------------------------
    def new_state(self) -> HFState:
        from transformers import DynamicCache

        return HFState(DynamicCache(config=self.model.config))

    def forward(self, state: HFState, tokens: Sequence[int]) -> Rows:
        torch = self.torch
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        with torch.no_grad():
            out = self.model(input_ids=ids, cache=state.cache, use_cache=True, output_hidden_states=True)
        state.length += len(tokens)
        return Rows(out.logits[0].float().numpy(), out.hidden_states[-1][0].float().numpy())

    def snapshot(self, state: HFState):
        return hf_cache.snapshot(state.cache), state.length

    def restore(self, state: HFState, snap) -> None:
        hf_cache.restore(state.cache, snap[0])
        state.length = snap[1]

    def state_arrays(self, state: HFState):
        return hf_cache.state_arrays(state.cache)

    # -- vocabulary and draft ----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer is not None:
            return list(self.tokenizer.encode(text).ids if hasattr(self.tokenizer.encode(text), "ids") else self.tokenizer.encode(text))
        return byte_encode(text, self.vocab_size)

    def make_draft(self):
        return NgramDraft(self.vocab_size, seed=self.draft_seed)

    # -- loops --------------------------------------------------------------------------------------
    def generate(self, prompt, *, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None) -> list[int]:
        return plain_generate(self, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)

    def speculative_generate(self, prompt, draft, *, max_new_tokens: int, k: int, temperature: float = 0.0,
                             seed: int | None = None, commit_path: str | None = None):
        return reference_speculative_generate(self, prompt, draft, max_new_tokens=max_new_tokens, k=k,
                                              temperature=temperature, seed=seed, commit_path=commit_path,
                                              loop_class=self.loop_class)


def load_model(spec: str | None, seed: int = 0):
    """(model, tokenizer or None, name) for ``--specverify-model``: a built-in tiny name, a checkpoint
    folder, or a config.json (random weights)."""
    from pathlib import Path

    spec = spec or "tiny-qwen3_5"
    if spec.startswith("tiny-"):
        return tiny_model(spec[len("tiny-"):], seed=seed), None, f"transformers[{spec}]"
    import transformers as tf

    path = Path(spec)
    if path.is_file():
        import torch

        torch.manual_seed(seed)
        cfg = tf.AutoConfig.from_pretrained(str(path.parent)) if path.name == "config.json" else None
        if cfg is None:
            raise ValueError(f"--specverify-model {spec}: a file must be a config.json")
        return tf.AutoModelForCausalLM.from_config(cfg).float().eval(), None, f"transformers[{path}]"
    if not (path / "config.json").is_file():
        raise ValueError(f"--specverify-model {spec}: not a checkpoint folder (no config.json), not a config.json and "
                         f"not one of tiny-qwen3_5, tiny-qwen3_next")
    model = tf.AutoModelForCausalLM.from_pretrained(str(path), dtype="float32").eval()
    tok = None
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    return model, tok, f"transformers[{path.name}]"


def saved_copy(model) -> str:
    """``model`` saved as a checkpoint folder (removed when the process ends): the reference of a model that
    has no folder of its own (a tiny preset, random weights from a config.json)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="specverify-hf-")
    atexit.register(shutil.rmtree, folder, True)
    model.save_pretrained(folder)
    return folder


def make_port(options: PortOptions) -> TransformersPort:
    """Entry point ``transformers`` of the ``specverify.ports`` group."""
    from pathlib import Path

    if (options.model or "tiny-").startswith("tiny-"):
        import torch

        torch.set_num_threads(1)  # a tiny model on many threads is all sync overhead (9 ms a step on 1, 170 on 2 busy cores)
    model, tok, name = load_model(options.model, seed=options.seed)
    folder = options.model if options.model and Path(options.model).is_dir() else saved_copy(model)
    return TransformersPort(model, name=name, tokenizer=tok, draft_seed=options.seed, reference_path=str(folder))
