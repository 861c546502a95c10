"""llama.cpp as a specverify port (entry point ``llama-cpp``; extra ``[llama]``: llama-cpp-python, gguf).

``--specverify-port llama-cpp --specverify-model FILE.gguf`` verifies a GGUF hybrid Qwen3.5 model
(arch ``qwen35``; ``qwen3next`` too, whose ``keep`` path restores and re-runs since llama.cpp refuses its
partial rollback). Without ``--specverify-model`` (or with ``tiny-qwen3_5`` / ``tiny-qwen3_next``) the port
makes a seeded tiny random checkpoint (``--specverify-seed``) and its GGUF in a temporary folder, so a run
needs no file. ``--specverify-backend flash-attn`` turns llama.cpp's flash attention on (off by default: on the
CPU it computes with f16 K/V, so long contexts drift past the profile's log-prob bound).

The parts: ``native`` (the ctypes calls: one ``llama_context`` per state, pooled), ``blob`` (the
sequence state parsed into named arrays), ``port`` (``LlamaCppPort``: commit paths, the zero-row-keep
workaround, the declared ``FP32`` profile). docs/verify-your-port.md walks through it.
"""
from __future__ import annotations

from ...protocol import PortOptions

BACKENDS = ("cpu", "flash-attn")


TINY = ("tiny-qwen3_5", "tiny-qwen3_next")


def tiny_model_file(seed: int = 0, model_type: str = "qwen3_5"):
    """(gguf path, HF folder, the TemporaryDirectory holding both) of a seeded tiny checkpoint."""
    import tempfile

    from ...helpers.tiny_models import tiny_gguf

    tmp = tempfile.TemporaryDirectory(prefix="specverify-llama-")
    path = tiny_gguf(tmp.name, seed=seed, model_type=model_type)
    return path, tmp.name, tmp


def make_port(options: PortOptions):
    """Entry point ``llama-cpp`` of the ``specverify.ports`` group."""
    from .native import ContextSettings, Model
    from .port import LlamaCppPort

    backend = options.backend or "cpu"
    if backend not in BACKENDS:
        raise ValueError(f"--specverify-backend {backend!r}: the llama-cpp port knows {BACKENDS} (flash-attn: llama.cpp's "
                         f"flash attention, f16 K/V on the CPU)")
    settings = ContextSettings(flash_attn=backend == "flash-attn")
    spec = options.model or "tiny-qwen3_5"
    if spec in TINY:
        path, reference, tmp = tiny_model_file(options.seed, spec[len("tiny-"):])
        port = LlamaCppPort(Model(path, settings), name=f"llama-cpp[{spec} seed {options.seed}]",
                            draft_seed=options.seed, reference=reference)
        port._tmp = tmp  # the folder lives as long as the port
        return port
    if spec.startswith("tiny-"):
        raise ValueError(f"--specverify-model {spec}: the llama-cpp port builds {', '.join(TINY)}; give a .gguf file otherwise")
    return LlamaCppPort(Model(spec, settings), draft_seed=options.seed)
