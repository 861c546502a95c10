"""llama.cpp through llama-cpp-python's low-level (ctypes) API: a loaded model and its contexts.

One decoding state is one ``llama_context`` holding one sequence (id 0): states never share a cache, as
the checks require. Contexts are recycled through a pool (``Model.acquire`` / ``Model.release``), since
the checks make hundreds of states and a context's buffers cost more than clearing its memory.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from .blob import Layout

SEQ = 0  # the one sequence of every context
MAX_FREE = 4  # idle contexts a model keeps for reuse


@dataclass(frozen=True)
class ContextSettings:
    """``n_ctx``: tokens one state holds (one ubatch, so a prefill is one pass); ``n_rs_seq``: recurrent
    snapshots kept per decode for a ``seq_rm`` rollback (0: none); ``flash_attn`` off by default because
    llama.cpp's CPU flash attention computes with f16 K/V (long contexts drift past 1e-3 in log-prob);
    ``kv_f32``: a float32 KV cache (llama.cpp's default is f16, which rounds every key and value to ~5e-4);
    ``threads``: ggml's CPU threads per decode."""

    n_ctx: int = 1024
    n_rs_seq: int = 16
    flash_attn: bool = False
    kv_f32: bool = True
    threads: int = 1


def _lib():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError(f"the llama-cpp port needs llama-cpp-python ({exc}); install the extra: pip install "
                          f"'onebit-specverify[llama]' (or run nox -s llama, which builds it trimmed)") from None
    return llama_cpp


_QUIET = None  # the log callback must outlive every call into llama.cpp


def _silence(L) -> None:
    global _QUIET
    if _QUIET is None:
        _QUIET = L.llama_log_callback(lambda level, text, user_data: None)
        L.llama_backend_init()
        L.llama_log_set(_QUIET, ctypes.c_void_p())


def read_layout(path: "str | Path") -> tuple[str, Layout]:
    """(arch, Layout) from a GGUF file's metadata (the gguf package's reader)."""
    import gguf

    fields = gguf.GGUFReader(str(path)).fields

    def value(key, default=None):
        f = fields.get(key)
        if f is None:
            if default is None:
                raise ValueError(f"{path}: GGUF key {key!r} is missing; is it a qwen35 / qwen3next hybrid model?")
            return default
        return f.contents()

    arch = value("general.architecture")
    n_layer = int(value(f"{arch}.block_count"))
    flags = fields.get(f"{arch}.attention.recurrent_layers")
    if flags is not None:
        recurrent = tuple(bool(x) for x in flags.contents())
    else:
        interval = int(value(f"{arch}.full_attention_interval", 4))
        recurrent = tuple((i + 1) % interval != 0 for i in range(n_layer))
    groups, d = int(value(f"{arch}.ssm.group_count")), int(value(f"{arch}.ssm.state_size"))
    inner = int(value(f"{arch}.ssm.inner_size"))
    return arch, Layout(
        n_layer=n_layer, recurrent=recurrent, n_kv_heads=int(value(f"{arch}.attention.head_count_kv")),
        head_dim=int(value(f"{arch}.attention.key_length")), conv_channels=inner + 2 * groups * d,
        conv_kernel=int(value(f"{arch}.ssm.conv_kernel")), v_heads=int(value(f"{arch}.ssm.time_step_rank")), state_dim=d,
        cell_ext=f"{arch}.rope.dimension_sections" in fields)


class Context:
    """One ``llama_context`` and its batch. ``decode`` returns copies (the next decode overwrites llama.cpp's)."""

    def __init__(self, model: "Model"):
        L = model.L
        self.L, self.model = L, model
        s = model.settings
        p = L.llama_context_default_params()
        p.n_ctx = p.n_batch = p.n_ubatch = s.n_ctx
        p.n_seq_max = 1
        p.n_rs_seq = s.n_rs_seq
        p.n_threads = p.n_threads_batch = s.threads
        p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if s.flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if s.kv_f32:
            p.type_k = p.type_v = 0  # GGML_TYPE_F32
        p.embeddings = True  # the taps: the final (normed) hidden state of every row
        p.no_perf = True
        self.ctx = L.llama_init_from_model(model.model, p)
        if not self.ctx:
            raise RuntimeError(f"llama_init_from_model failed for {model.path} (n_ctx {s.n_ctx}, n_rs_seq {s.n_rs_seq})")
        self.mem = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(s.n_ctx, 0, 1)

    def decode(self, tokens, pos0: int):
        """Run ``tokens`` at positions ``pos0..``: (logits [T, V], taps [T, n_embd]) as float32 copies."""
        import numpy as np

        L, b, n = self.L, self.batch, len(tokens)
        if n == 0 or pos0 + n > self.model.settings.n_ctx:
            raise ValueError(f"decode of {n} tokens at position {pos0}: a state holds 1..{self.model.settings.n_ctx} "
                             f"tokens (ContextSettings.n_ctx)")
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = int(t), pos0 + i, 1, 1
            b.seq_id[i][0] = SEQ
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} for {n} tokens at position {pos0}")
        V, E = self.model.vocab_size, self.model.n_embd
        logits = np.ctypeslib.as_array(L.llama_get_logits(self.ctx), shape=(n * V,)).reshape(n, V).copy()
        taps = np.ctypeslib.as_array(L.llama_get_embeddings(self.ctx), shape=(n * E,)).reshape(n, E).copy()
        return logits, taps

    def seq_rm(self, p0: int) -> bool:
        """``llama_memory_seq_rm(mem, 0, p0, -1)``: drop every position >= p0; llama.cpp's answer."""
        return bool(self.L.llama_memory_seq_rm(self.mem, SEQ, int(p0), -1))

    def save(self) -> bytes:
        L = self.L
        size = L.llama_state_seq_get_size(self.ctx, SEQ)
        buf = (ctypes.c_uint8 * size)()
        got = L.llama_state_seq_get_data(self.ctx, buf, size, SEQ)
        if got != size:
            raise RuntimeError(f"llama_state_seq_get_data wrote {got} bytes of {size}")
        return bytes(buf)

    def load(self, blob: bytes) -> None:
        L = self.L
        self.clear()
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        if L.llama_state_seq_set_data(self.ctx, buf, len(blob), SEQ) != len(blob):
            raise RuntimeError(f"llama_state_seq_set_data refused a {len(blob)}-byte state")

    def clear(self) -> None:
        self.L.llama_memory_clear(self.mem, True)

    def free(self) -> None:
        if self.ctx:
            self.L.llama_batch_free(self.batch)
            self.L.llama_free(self.ctx)
            self.ctx = None


class Model:
    """A GGUF file loaded once; ``acquire()`` hands out a cleared context, ``release(ctx)`` takes it back."""

    def __init__(self, path: "str | Path", settings: ContextSettings = ContextSettings()):
        L = _lib()
        _silence(L)
        self.L, self.path, self.settings = L, Path(path), settings
        if not self.path.is_file():
            raise FileNotFoundError(f"--specverify-model {path}: no such GGUF file")
        self.arch, self.layout = read_layout(self.path)
        self.model = L.llama_model_load_from_file(str(self.path).encode(), L.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {self.path} (arch {self.arch})")
        self.vocab_size = int(L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model)))
        self.n_embd = int(L.llama_model_n_embd(self.model))
        self._free: list[Context] = []

    def acquire(self) -> Context:
        return self._free.pop() if self._free else Context(self)

    def release(self, ctx: Context) -> None:
        """A context back to the pool, or freed when the pool already holds MAX_FREE: a check that once held many
        states at a time (hundreds of sampling runs) must not keep a context of each (~100s of MB) for good."""
        if ctx.ctx:
            if len(self._free) >= MAX_FREE:
                ctx.free()
                return
            ctx.clear()
            self._free.append(ctx)

    def close(self) -> None:
        for c in self._free:
            c.free()
        self._free.clear()
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None
