"""The streaming loader is pinned bitwise to the whole-weight loader it replaced.

For every checkpoint fixture (dense, tied, VL prefix, Qwen3-Next grouped, MoE per-expert and fused,
float16 / bfloat16 / float64 tensors, sharded, quantized int8 / int4 / ternary folders, the built-in pair)
and every backend path (reference, host-int native, host-int numpy), ``load_target`` (tensors read a
block of rows at a time, packed as read, the embedding kept as stored) must give the same bits as the
old algorithm: read every tensor whole (``load_folder_tensors`` + ``load_quantized``), widen it to
float32, concatenate a fused projection's weights, quantize and tile each weight whole
(``quantize_weight``, the numpy ``tile_codes``). Blocks are made tiny (one ALIGN of rows) so packing
really runs over many blocks, the last one partial.
"""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine import load_target
from onebit_engine.checkpoint.safetensors import QUANT_FILE, load_folder_tensors, read_config
from onebit_engine.cli import main
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.gemm.host_int.layout import TILE_WIDTH, negative_sums, sign_magnitude, tile_codes
from onebit_engine.hybrid.config import TargetConfig
from onebit_engine.hybrid.moe_config import MoeConfig
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint
from onebit_engine.hybrid.weights import check_and_map
from onebit_engine.measure.walk import linears
from onebit_engine.quant import concat_rows, load_quantized, quantize_weight
from onebit_engine.quant import rows as quant_rows
from onebit_engine.quant.formats import QuantWeight

WIDE = dict(vocab_size=300, hidden_size=40, intermediate_size=136)  # rows past one ALIGN (64), not a multiple of it


def _cast(folder, dtype):
    """Rewrite a folder's tensors in another float dtype (bf16 through torch-free rounding)."""
    from safetensors.numpy import save_file

    from onebit_engine.synth.folder import _as

    t = load_folder_tensors(folder)
    (folder / "model.safetensors").unlink()
    if dtype == "bf16":  # safetensors.numpy cannot write bf16: the engine's own streaming writer can
        from onebit_engine.checkpoint.writer import StreamWriter

        with StreamWriter(folder / "model.safetensors", [(n, "BF16", a.shape) for n, a in t.items()]) as w:
            for n, a in t.items():
                w.write(n, _as(a, "BF16"))
    else:
        save_file({n: a.astype(dtype) for n, a in t.items()}, str(folder / "model.safetensors"))
    return folder


def _vl(folder):
    from safetensors.numpy import save_file

    t = load_folder_tensors(folder)
    (folder / "model.safetensors").unlink()
    save_file({n.replace("model.", "model.language_model.", 1): a for n, a in t.items()}, str(folder / "model.safetensors"))
    return folder


def _quantized(src, dest, fmt):
    assert main(["quantize", "--model", str(src), "--format", fmt, "--out", str(dest), "--json"]) == 0
    return dest


def _fixture(name, root):
    moe = MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=16)
    cfgs = {
        "dense": tiny_config(**WIDE), "tied": tiny_config(**WIDE, tie_word_embeddings=True),
        "next": tiny_config(**WIDE, moe=MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                                  shared_expert_intermediate_size=16, mlp_only_layers=(1,))),
        "moe": tiny_config(**WIDE, moe=moe),
    }
    base = name.split("-")[0]
    cfg = cfgs[base if base in cfgs else "dense"]
    src = write_checkpoint(root / "float", cfg, random_weights(cfg, 11), shards=3 if name == "dense-sharded" else 1)
    if name == "moe-fused":
        from onebit_engine.hybrid.moe_weights import split_fused_experts  # noqa: F401 (the inverse is below)

        _fuse_experts(src, cfg)
    for dtype in ("float16", "float64", "bf16"):
        if name == f"dense-{dtype}":
            _cast(src, dtype)
    if name == "dense-vl":
        _vl(src)
    for fmt in ("int8", "int4", "ternary"):
        if name == f"dense-q{fmt}":
            return _quantized(src, root / f"q-{fmt}", fmt)
        if name == f"next-q{fmt}":
            return _quantized(src, root / f"q-{fmt}", fmt)
    return src


def _fuse_experts(folder, cfg):
    from safetensors.numpy import save_file

    t = load_folder_tensors(folder)
    E = cfg.moe.num_experts
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}.mlp.experts."
        gu = np.stack([np.concatenate([t.pop(f"{p}{e}.gate_proj.weight"), t.pop(f"{p}{e}.up_proj.weight")]) for e in range(E)])
        dn = np.stack([t.pop(f"{p}{e}.down_proj.weight") for e in range(E)])
        t[p + "gate_up_proj"], t[p + "down_proj"] = gu, dn
    (folder / "model.safetensors").unlink()
    save_file(t, str(folder / "model.safetensors"))


FIXTURES = ["dense", "tied", "dense-sharded", "dense-float16", "dense-float64", "dense-bf16", "dense-vl", "next", "moe",
            "moe-fused", "dense-qint8", "dense-qint4", "dense-qternary", "next-qint4", "builtin"]
BACKENDS = ["reference", "host-int", "host-int-numpy"]


def _backend(name):
    return {"reference": "reference", "host-int": HostIntBackend(), "host-int-numpy": HostIntBackend(kernel="numpy")}[name]


def _old_weights(folder):
    """The whole-tensor loader: every tensor read whole, then the engine-form map."""
    cfg = TargetConfig.from_hf(read_config(folder))
    raw = load_folder_tensors(folder)
    if (folder / QUANT_FILE).exists():
        raw.update(load_quantized(folder / QUANT_FILE))
    return check_and_map(raw, cfg, str(folder))


def _old_pack(backend, ws):
    """The old packing: concatenate (float32 arrays, or quantized rows), quantize whole, tile whole."""
    if all(isinstance(w, np.ndarray) for w in ws):
        w = np.ascontiguousarray(np.concatenate(ws), dtype=np.float32)
    else:
        w = concat_rows(ws) if len(ws) > 1 else ws[0]
    if backend == "reference":
        return np.ascontiguousarray((w.dequantize() if isinstance(w, QuantWeight) else w).T)
    qw = w if isinstance(w, QuantWeight) else quantize_weight(w, backend.weight_format)
    if backend.kernel == "numpy":
        return qw
    t = TILE_WIDTH[backend.kernel]
    codes = qw.codes()
    ccorr = negative_sums(codes, t) if (backend.kernel == "avx2" and qw.fmt == "int8") else None
    return tile_codes(codes, qw.fmt, t, sign_magnitude(backend.kernel, qw.fmt)), qw.scale, ccorr


def _same(old, new):
    if isinstance(old, tuple):  # tiles, scale, ccorr
        tiles, scale, ccorr = old
        return (np.array_equal(tiles, new.tiles) and np.array_equal(scale, new.scale)
                and ((ccorr is None and new.ccorr is None) or np.array_equal(ccorr, new.ccorr)))
    if isinstance(old, QuantWeight):
        return np.array_equal(old.data, new.data) and np.array_equal(old.scale, new.scale)
    return np.array_equal(old, new)


@pytest.fixture(autouse=True)
def tiny_blocks(monkeypatch):
    monkeypatch.setattr(quant_rows, "BLOCK_BYTES", 1)  # one ALIGN (64 rows) per block


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FIXTURES)
def test_streaming_loader_equals_the_whole_tensor_loader(tmp_path, name, backend):
    if name == "builtin":
        from onebit_engine.default_model import builtin_paths

        folder = builtin_paths()[0]
    else:
        folder = _fixture(name, tmp_path)
    be = _backend(backend)
    target = load_target(folder, backend=be)
    old = _old_weights(folder)
    checked = 0
    for lin in linears(target):
        ws = [old[n if n in old else "model.embed_tokens.weight"] for n in lin.name.split("+")]  # tied: the table is the head
        assert _same(_old_pack(be if backend != "reference" else "reference", ws), lin.packed), lin.name
        checked += 1
    assert checked >= 2 * target.config.num_hidden_layers
    assert np.array_equal(np.asarray(target.embed_tokens), np.ascontiguousarray(old["model.embed_tokens.weight"], np.float32))
    twin = type(target)(target.config, old, backend=_backend(backend))  # the engine built from the whole tensors
    toks = [3, 1, 4, 1, 5, 9, 2, 6]
    a = target.forward(toks, target.new_state())
    b = twin.forward(toks, twin.new_state())
    assert np.array_equal(a.logits, b.logits) and np.array_equal(a.hidden, b.hidden)


def test_a_tied_checkpoint_that_also_stores_the_head_loads(tmp_path):
    cfg = tiny_config(**WIDE, tie_word_embeddings=True)
    w = random_weights(cfg, 3)
    w["lm_head.weight"] = w["model.embed_tokens.weight"].copy()  # transformers writes such files
    same = load_target(write_checkpoint(tmp_path / "same", cfg, w), backend="host-int")
    w["lm_head.weight"] = w["model.embed_tokens.weight"] * 2
    with pytest.warns(UserWarning, match="differs from model.embed_tokens.weight"):
        other = load_target(write_checkpoint(tmp_path / "other", cfg, w), backend="host-int")
    toks = [1, 2, 3]
    assert np.array_equal(same.forward(toks, same.new_state()).logits, other.forward(toks, other.new_state()).logits)
