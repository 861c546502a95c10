"""A bad checkpoint gets one clear error naming every problem; good layouts load."""
import json

import numpy as np
import pytest

from onebit_engine import CheckpointError, ConfigError, WeightError, load_target
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint


@pytest.fixture()
def ckpt(tmp_path):
    cfg = tiny_config()
    return write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1)), cfg


def _rewrite(folder, mutate):
    from safetensors.numpy import load_file, save_file

    t = load_file(str(folder / "model.safetensors"))
    mutate(t)
    save_file(t, str(folder / "model.safetensors"))


def test_good_checkpoint_loads_and_runs(ckpt):
    folder, cfg = ckpt
    target = load_target(folder)
    assert target.forward([1, 2, 3], target.new_state()).logits.shape == (3, cfg.vocab_size)


def test_sharded_equals_single_file(tmp_path):
    cfg = tiny_config()
    w = random_weights(cfg, 2)
    a = load_target(write_checkpoint(tmp_path / "one", cfg, w))
    b = load_target(write_checkpoint(tmp_path / "three", cfg, w, shards=3))
    assert np.array_equal(a.forward([4, 5], a.new_state()).logits, b.forward([4, 5], b.new_state()).logits)


def test_all_problems_reported_at_once(ckpt):
    folder, _ = ckpt

    def mutate(t):
        del t["model.layers.0.linear_attn.A_log"]
        del t["model.layers.3.self_attn.k_norm.weight"]
        t["model.layers.1.mlp.up_proj.weight"] = np.zeros((3, 3), np.float32)
        t["model.layers.9.bogus.weight"] = np.zeros(2, np.float32)

    _rewrite(folder, mutate)
    with pytest.raises(WeightError) as e:
        load_target(folder)
    msg = str(e.value)
    for part in ("2 missing", "layers.0.linear_attn.A_log", "layers.3.self_attn.k_norm", "1 unknown",
                 "layers.9.bogus", "shape mismatch model.layers.1.mlp.up_proj.weight: file (3, 3)"):
        assert part in msg, msg


def test_unknown_model_type(ckpt):
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "llama"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="model_type 'llama' is not supported.*qwen3_5_text"):
        load_target(folder)


def test_moe_qwen3_next_without_its_moe_fields_is_refused(ckpt):
    """MoE configs load since issue 18; one that lacks the expert sizes is refused, naming them."""
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="qwen3_next", num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="qwen3_next MoE config is invalid: moe_intermediate_size must be an integer, got None") as e:
        load_target(folder)
    assert str(e.value).startswith(f"{folder / 'config.json'}: "), e.value  # the file, as every config problem says


@pytest.mark.parametrize("keep", [4, 100, -50])
def test_truncated_safetensors(ckpt, keep):
    folder, _ = ckpt
    f = folder / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:keep] if keep > 0 else data[:keep])
    with pytest.raises(CheckpointError, match="truncated"):
        load_target(folder)


def test_missing_folder_and_config(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        load_target(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_target(tmp_path / "nope")


def test_missing_shard_named(tmp_path):
    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "s", cfg, random_weights(cfg, 0), shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002"):
        load_target(folder)


def test_bf16_tensors_load_exactly(tmp_path):
    """Real checkpoints store bf16; the reader widens it exactly."""
    import struct

    cfg = tiny_config()
    w = random_weights(cfg, 3)
    bf = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in w.items()}
    header, blobs, off = {}, [], 0
    for k, v in bf.items():
        b = v.tobytes()
        header[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header).encode()
    folder = write_checkpoint(tmp_path / "bf", cfg, w)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    t = load_target(folder)
    want = (bf["model.embed_tokens.weight"].astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(t.embed_tokens, want)


# -- values: float dtypes and finite numbers, checked at load (issue 16) --------------------------------
def _one_line_weight_error(folder, load=load_target) -> str:
    with pytest.raises(WeightError) as e:
        load(folder)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("name", ["model.embed_tokens.weight", "model.norm.weight", "model.layers.0.mlp.down_proj.weight",
                                  "model.layers.1.linear_attn.A_log", "model.layers.2.linear_attn.dt_bias",
                                  "model.layers.0.linear_attn.conv1d.weight", "lm_head.weight",
                                  "model.layers.3.self_attn.q_norm.weight"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weight_refused_naming_the_tensor(ckpt, name, bad):
    folder, _ = ckpt

    def mutate(t):
        t[name] = t[name].copy()
        t[name].flat[1] = bad

    _rewrite(folder, mutate)
    msg = _one_line_weight_error(folder)
    assert f"1 tensor(s) hold NaN or inf: {name} (" in msg, msg


def test_float64_past_float32_range_is_non_finite(ckpt):
    folder, _ = ckpt

    def mutate(t):
        t["model.norm.weight"] = t["model.norm.weight"].astype(np.float64)
        t["model.norm.weight"][0] = 1e300

    _rewrite(folder, mutate)
    assert "model.norm.weight (0 NaN, 1 inf in float32)" in _one_line_weight_error(folder)


@pytest.mark.parametrize("dtype, name", [(np.int8, "I8"), (np.int16, "I16"), (np.int32, "I32"), (np.int64, "I64"),
                                         (np.uint8, "U8"), (np.bool_, "BOOL")])
def test_float_weight_stored_as_integer_is_refused(ckpt, dtype, name):
    folder, _ = ckpt

    def mutate(t):
        for k in ("model.layers.0.input_layernorm.weight", "model.layers.1.mlp.up_proj.weight"):
            t[k] = t[k].astype(dtype)

    _rewrite(folder, mutate)
    msg = _one_line_weight_error(folder)
    assert (f"2 float weight(s) stored as integer or bool: model.layers.0.input_layernorm.weight ({name}), "
            f"model.layers.1.mlp.up_proj.weight ({name}) (allowed: F32, F16, BF16, F64)") in msg, msg


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_float_dtypes_still_load(tmp_path, dtype):
    cfg = tiny_config()
    w = {k: v.astype(dtype) for k, v in random_weights(cfg, 5).items()}
    t = load_target(write_checkpoint(tmp_path / "m", cfg, w))
    assert np.array_equal(t.embed_tokens, w["model.embed_tokens.weight"].astype(np.float32))


def test_long_problem_lists_name_the_first_few_and_count_the_rest(ckpt):
    folder, _ = ckpt
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(num_hidden_layers=12, layer_types=cfg["layer_types"] * 3)
    (folder / "config.json").write_text(json.dumps(cfg))
    msg = _one_line_weight_error(folder)
    assert "missing tensor(s): " in msg and " more;" in msg and len(msg) < 700, msg


def test_index_with_a_tensor_in_the_wrong_shard_is_refused(tmp_path):
    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "s", cfg, random_weights(cfg, 0), shards=2)
    p = folder / "model.safetensors.index.json"
    raw = json.loads(p.read_text())
    name = "model.norm.weight"
    raw["weight_map"][name] = next(s for s in set(raw["weight_map"].values()) if s != raw["weight_map"][name])
    p.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=f"does not match its shards for 1 tensor.*{name}"):
        load_target(folder)


def test_a_tensor_in_two_shards_names_the_folder(tmp_path):
    # a run reads two checkpoints (target and draft): the shard names alone do not say which
    from safetensors.numpy import load_file, save_file

    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "s", cfg, random_weights(cfg, 0), shards=2)
    (folder / "model.safetensors.index.json").unlink()
    a, b = sorted(folder.glob("*.safetensors"))
    wa, wb = load_file(str(a)), load_file(str(b))
    name = next(iter(wa))
    wb[name] = wa[name]
    save_file(wb, str(b))
    with pytest.raises(CheckpointError, match=f"'{name}' appears in more than one shard of {folder} "):
        load_target(folder)


# -- a servable quantized folder: scales and codes checked at load, whatever the backend ----------------
@pytest.fixture(scope="module")
def qfolder(tmp_path_factory):
    from onebit_engine.cli import main

    root = tmp_path_factory.mktemp("q")
    cfg = tiny_config(vocab_size=64)
    src = write_checkpoint(root / "float", cfg, random_weights(cfg, 4))
    out = {}
    for fmt in ("int8", "int4", "ternary"):
        assert main(["quantize", "--model", str(src), "--format", fmt, "--out", str(root / fmt), "--json"]) == 0
        out[fmt] = root / fmt
    return out


def _requant(src, dest, mutate):
    import shutil

    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dest)
    f = dest / "quantized.safetensors"
    with safe_open(str(f), "np") as h:
        meta = h.metadata()
    t = load_file(str(f))
    mutate(t)
    save_file(t, str(f), metadata=meta)
    return dest


W = "model.layers.0.mlp.gate_proj.weight"


def _set_scale(v):
    def m(t):
        t[W + ".scale"] = t[W + ".scale"].copy()
        t[W + ".scale"][2] = v
    return m


def _set_byte(v):
    def m(t):
        t[W + ".qdata"] = t[W + ".qdata"].copy()
        t[W + ".qdata"][1, 0] = v
    return m


@pytest.mark.parametrize("fmt, mutate, text", [
    ("int8", _set_scale(np.nan), "1 scale(s) are NaN, inf or <= 0 (first at row 2: nan)"),
    ("int4", _set_scale(np.inf), "scale(s) are NaN, inf or <= 0"),
    ("ternary", _set_scale(0.0), "scale(s) are NaN, inf or <= 0"),
    ("int8", _set_scale(-1.0), "scale(s) are NaN, inf or <= 0"),
    ("int8", _set_byte(0x80), "int8 codes outside [-127, 127]"),
    ("int4", _set_byte(0x08), "int4 codes outside [-7, 7]"),
    ("int4", _set_byte(0x80), "int4 codes outside [-7, 7]"),
    ("ternary", _set_byte(0b11000000), "ternary codes outside [-1, 1]"),
    ("int8", lambda t: t.__setitem__(W + ".scale", t[W + ".scale"].astype(np.float16)), f"tensor '{W}.scale' is F16, must be F32"),
    ("int8", lambda t: t.__setitem__(W + ".qdata", t[W + ".qdata"].view(np.int8)), f"tensor '{W}.qdata' is I8, must be U8"),
    ("int8", lambda t: t.pop(W + ".scale"), f"tensor '{W}.scale' is missing"),
    ("int8", lambda t: t.__setitem__("stray", np.zeros(2, np.float32)), "1 tensor(s) no weight of the header names: stray"),
])
@pytest.mark.parametrize("backend", ["reference", "host-int"])
def test_bad_quantized_values_refused_on_every_backend(qfolder, tmp_path, fmt, mutate, text, backend):
    folder = _requant(qfolder[fmt], tmp_path / "bad", mutate)
    with pytest.raises(CheckpointError) as e:
        load_target(folder, backend=backend)
    msg = str(e.value)
    assert "quantized.safetensors" in msg and text in msg and "\n" not in msg, msg


def test_odd_k_padding_codes_must_be_zero(tmp_path):
    from onebit_engine.quant import load_quantized, quantize_weight, save_quantized

    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": quantize_weight(np.ones((2, 5), np.float32), "int4")})
    assert load_quantized(path)["w"].shape == (2, 5)
    _rewrite_q = _requant  # same edit, on a bare file
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "quantized.safetensors").write_bytes(path.read_bytes())
    _rewrite_q(folder, tmp_path / "g", lambda t: t["w.qdata"].__setitem__((0, 2), 0x10))
    with pytest.raises(CheckpointError, match="non-zero padding codes past K=5"):
        load_quantized(tmp_path / "g" / "quantized.safetensors")


# -- the draft: same value rules ------------------------------------------------------------------------
@pytest.mark.parametrize("edit, text", [
    (lambda a: a.astype(np.int32), "float weight(s) stored as integer or bool: fc.weight (I32)"),
    (lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, np.nan, a).astype(np.float32), "hold NaN or inf: fc.weight (1 NaN, 0 inf)"),
])
def test_draft_bad_values_refused(tmp_path, edit, text):
    from safetensors.numpy import load_file, save_file

    from onebit_engine.draft import load_draft, write_synthetic_draft

    cfg = tiny_config()
    target = load_target(write_checkpoint(tmp_path / "t", cfg, random_weights(cfg, 1)))
    folder = write_synthetic_draft(tmp_path / "d", cfg, version=2)
    t = load_file(str(folder / "model.safetensors"))
    t["fc.weight"] = edit(t["fc.weight"])
    save_file(t, str(folder / "model.safetensors"))
    msg = _one_line_weight_error(folder, lambda f: load_draft(f, target))
    assert text in msg, msg


# -- tokenizer.json -------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, text", [
    (b"{not json", "tokenizer.json is not valid JSON"),
    (b'{"model": "\xff"}', "tokenizer.json is not UTF-8 text"),
    (b"[1, 2]", "tokenizer.json is not a tokenizers file"),
    (b'{"model": {"type": "NoSuchModel"}}', "the tokenizers library cannot build this tokenizer.json"),
])
def test_broken_tokenizer_refused_naming_the_file(tmp_path, content, text):
    from onebit_engine.default_model import load_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        load_tokenizer(path)
    assert str(e.value).startswith(str(path)) and text in str(e.value) and "\n" not in str(e.value)


def test_missing_tokenizers_package_names_the_extra(tmp_path, monkeypatch):
    import sys

    from onebit_engine.errors import MissingExtra
    from onebit_engine.default_model import load_tokenizer

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingExtra, match=r"pip install 'onebit-specverify\[cli\]'") as e:
        load_tokenizer(tmp_path / "tokenizer.json")
    assert isinstance(e.value, ImportError) and isinstance(e.value, ConfigError)


def test_a_tensor_stored_under_both_vl_names_is_refused(ckpt):
    # model.X and model.language_model.X are one tensor: the loader kept the last and dropped the other unseen
    folder, _ = ckpt

    def alias(t):
        x = t["model.norm.weight"].copy()
        x[0] = np.nan
        t["model.language_model.norm.weight"] = x

    _rewrite(folder, alias)
    with pytest.raises(WeightError, match="are both 'model.norm.weight'.*keep one") as e:
        load_target(folder)
    assert str(folder) in str(e.value) and "'model.language_model.norm.weight'" in str(e.value)
