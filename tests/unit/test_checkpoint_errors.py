"""A bad checkpoint gets one clear error naming every problem; good layouts load."""
import json

import numpy as np
import pytest

from onebit_engine import CheckpointError, ConfigError, WeightError, load_target
from onebit_engine.synthetic import random_weights, tiny_config, write_checkpoint


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
    with pytest.raises(ConfigError, match="qwen3_next MoE config is invalid: moe_intermediate_size must be an integer, got None"):
        load_target(folder)


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
