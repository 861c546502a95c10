"""MoE configs and checkpoints: every problem reported at once in one refusal; both expert layouts, the
VL wrapper, shards and quantized folders load to the same target."""
import json

import numpy as np
import pytest

from onebit_engine import ConfigError, WeightError, load_target
from onebit_engine.cli import main
from onebit_engine.hybrid.config import TargetConfig
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.hybrid.moe_config import MoeConfig
from onebit_engine.hybrid.synthetic import hf_config_dict, random_weights, tiny_config, write_checkpoint

MOE = MoeConfig(4, 2, 16, 24, True, 1, (0,))
TOKS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def _raw(**moe):
    d = hf_config_dict(tiny_config(moe=MOE))
    d.update(moe)
    return d


@pytest.mark.parametrize("change,messages", [
    ({"num_experts_per_tok": 5}, ["num_experts_per_tok (5) must be <= num_experts (4)"]),
    ({"moe_intermediate_size": "16"}, ["moe_intermediate_size must be an integer, got '16'"]),
    ({"num_experts_per_tok": 0, "decoder_sparse_step": 0}, ["num_experts_per_tok must be >= 1, got 0",
                                                            "decoder_sparse_step must be >= 1, got 0"]),
    ({"shared_expert_intermediate_size": -1, "norm_topk_prob": "yes"},
     ["shared_expert_intermediate_size must be >= 0, got -1", "norm_topk_prob must be true or false, got 'yes'"]),
    ({"mlp_only_layers": [0, 7]}, ["mlp_only_layers [7] are outside the 4 layers [0, 4)"]),
    ({"mlp_only_layers": "0"}, ["mlp_only_layers must be a list of layer indices, got '0'"]),
    ({"num_experts": 2.5}, ["num_experts must be an integer, got 2.5"]),
    ({"num_experts": 10**8}, ["num_experts is 100000000, must be <= 16384"]),  # listing its experts ran out of memory
])
def test_bad_moe_config_is_one_refusal_naming_every_problem(change, messages):
    with pytest.raises(ConfigError) as e:
        TargetConfig.from_hf(_raw(**change))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("config.json: qwen3_next MoE config is invalid")
    for m in messages:
        assert m in msg


@pytest.mark.parametrize("raw,sparse", [
    ({"num_experts": 0}, None), ({"decoder_sparse_step": 2, "mlp_only_layers": []}, [False, True, False, True]),
    ({"mlp_only_layers": [1, 2]}, [True, False, False, True]),
    ({"model_type": "qwen3_5_moe_text", "mlp_only_layers": [1], "decoder_sparse_step": 3, "norm_topk_prob": False},
     [True] * 4),  # qwen3_5_moe: every layer sparse, always renormalised (HF ignores those fields)
])
def test_which_layers_are_sparse(raw, sparse):
    cfg = TargetConfig.from_hf(_raw(**raw))
    if sparse is None:
        assert cfg.moe is None and not any(cfg.is_sparse(i) for i in range(4))
        return
    assert [cfg.is_sparse(i) for i in range(4)] == sparse
    if raw.get("model_type") == "qwen3_5_moe_text":
        assert cfg.moe.norm_topk_prob and cfg.layout == "split"


def test_config_to_dict_round_trips():
    cfg = tiny_config(moe=MOE)
    again = TargetConfig(**cfg.to_dict())
    assert again.moe == cfg.moe and again.to_dict() == cfg.to_dict()
    assert json.loads(json.dumps(cfg.to_dict()))["moe"]["mlp_only_layers"] == [0]


@pytest.fixture()
def moe_ckpt(tmp_path):
    cfg = tiny_config(moe=MoeConfig(4, 2, 16, 24, True), vocab_size=64)
    w = random_weights(cfg, 2)
    return write_checkpoint(tmp_path / "m", cfg, w), cfg, w


def _logits(folder, **kw):
    t = load_target(folder, **kw)
    return t.forward(TOKS, t.new_state()).logits


def _fused(w, cfg):
    """The per-expert engine form as transformers' in-memory layout: experts.gate_up_proj / down_proj."""
    out = dict(w)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}.mlp.experts."
        E = cfg.moe.num_experts
        out[p + "gate_up_proj"] = np.stack([np.concatenate([out.pop(f"{p}{e}.gate_proj.weight"),
                                                            out.pop(f"{p}{e}.up_proj.weight")]) for e in range(E)])
        out[p + "down_proj"] = np.stack([out.pop(f"{p}{e}.down_proj.weight") for e in range(E)])
    return out


def test_missing_experts_shapes_and_counts_reported_at_once(moe_ckpt, tmp_path):
    folder, cfg, w = moe_ckpt
    bad = dict(w)
    for part in ("gate_proj", "up_proj", "down_proj"):
        del bad[f"model.layers.1.mlp.experts.2.{part}.weight"]
    bad["model.layers.2.mlp.experts.9.up_proj.weight"] = np.zeros((16, 32), np.float32)
    bad["model.layers.0.mlp.gate.weight"] = np.zeros((5, 32), np.float32)
    bad["model.layers.3.mlp.shared_expert.down_proj.weight"] = np.zeros((32, 23), np.float32)
    _refused(write_checkpoint(tmp_path / "bad", cfg, bad), ("layer 1 is missing expert(s) [2] of num_experts=4",
                 "inconsistent expert count in layer 2: the file has expert id(s) [9] beyond num_experts=4",
                 "missing tensor(s): model.layers.1.mlp.experts.2.down_proj.weight",
                 "shape mismatch model.layers.0.mlp.gate.weight: file (5, 32), config needs (4, 32)",
                 "shape mismatch model.layers.3.mlp.shared_expert.down_proj.weight: file (32, 23), config needs (32, 24)"))


def test_fused_layout_loads_like_the_per_expert_one(moe_ckpt, tmp_path):
    folder, cfg, w = moe_ckpt
    fused = write_checkpoint(tmp_path / "fused", cfg, _fused(w, cfg), shards=3)
    assert np.array_equal(_logits(fused), _logits(folder))
    bad = _fused(w, cfg)
    bad["model.layers.2.mlp.experts.down_proj"] = bad["model.layers.2.mlp.experts.down_proj"][:3]
    bad["model.layers.1.mlp.experts.gate_up_proj"] = bad["model.layers.1.mlp.experts.gate_up_proj"][:, :20]
    _refused(write_checkpoint(tmp_path / "badfused", cfg, bad), ("inconsistent expert count in layer 2: model.layers.2.mlp.experts.down_proj holds 3 experts, config num_experts is 4",
                 "shape mismatch model.layers.2.mlp.experts.down_proj: file (3, 32, 16), config needs (4, 32, 16)",
                 "shape mismatch model.layers.1.mlp.experts.gate_up_proj: file (4, 20, 32), config needs (4, 32, 32)"))


def test_vl_wrapper_layout_loads(moe_ckpt, tmp_path):
    folder, cfg, w = moe_ckpt
    vl = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in w.items()}
    vl["model.visual.blocks.0.attn.qkv.weight"] = np.zeros((6, 2), np.float32)
    dest = write_checkpoint(tmp_path / "vl", cfg, vl, shards=2)
    text = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
    t = load_target(dest)
    assert t.config.model_type == "qwen3_5_moe" and t.config.moe == cfg.moe
    assert np.array_equal(_logits(dest), _logits(folder))


def test_zero_width_shared_expert_is_dropped(tmp_path):
    """HF with shared_expert_intermediate_size=0 saves zero-size shared tensors and a gate; they are ignored."""
    cfg = tiny_config(moe=MoeConfig(4, 2, 16, 0, True), vocab_size=64)
    w = random_weights(cfg, 3)
    plain = write_checkpoint(tmp_path / "plain", cfg, w)
    extra = dict(w)
    for i in range(4):
        p = f"model.layers.{i}.mlp.shared_expert"
        extra.update({p + ".gate_proj.weight": np.zeros((0, 32), np.float32), p + ".up_proj.weight": np.zeros((0, 32), np.float32),
                      p + ".down_proj.weight": np.zeros((32, 0), np.float32), p + "_gate.weight": np.ones((1, 32), np.float32)})
    hf_like = write_checkpoint(tmp_path / "hf", cfg, extra)
    assert np.array_equal(_logits(hf_like), _logits(plain))


@pytest.mark.parametrize("fmt", ["int8", "int4", "ternary"])
def test_quantized_moe_folder_equals_on_the_fly_quantization(moe_ckpt, tmp_path, fmt):
    """`onebit quantize --out` quantizes every expert projection (a 2-D weight) like a dense one."""
    folder, cfg, w = moe_ckpt
    dest = tmp_path / f"q-{fmt}"
    assert main(["quantize", "--model", str(folder), "--format", fmt, "--out", str(dest), "--json"]) == 0
    from onebit_engine.quant import load_quantized

    names = set(load_quantized(dest / "quantized.safetensors"))
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in names and "model.layers.1.mlp.gate.weight" in names
    served = load_target(dest, backend="host-int")
    assert np.array_equal(_logits(dest, backend="host-int"), _logits(folder, backend=HostIntBackend(weight_format=fmt)))
    st = served.new_state()
    served.forward(TOKS[:4], st)
    ver = served.verify(TOKS[4:], st).logits
    ref = served.new_state()
    singles = np.concatenate([served.forward([t], ref).logits for t in TOKS])[4:]
    assert np.array_equal(ver, singles)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_quantizing_a_fused_layout_quantizes_every_expert(moe_ckpt, tmp_path, fmt):
    """A fused 3-D checkpoint is split per expert before quantizing: host-int then runs the requested format
    for the experts too, bitwise like quantizing the per-expert checkpoint on the fly."""
    folder, cfg, w = moe_ckpt
    fused = write_checkpoint(tmp_path / "fused", cfg, _fused(w, cfg))
    dest = tmp_path / f"qf-{fmt}"
    assert main(["quantize", "--model", str(fused), "--format", fmt, "--out", str(dest), "--json"]) == 0
    from safetensors import safe_open

    with safe_open(str(dest / "model.safetensors"), "np") as f:
        assert not [k for k in f.keys() if ".experts." in k]  # nothing left in float
    assert np.array_equal(_logits(dest, backend="host-int"), _logits(folder, backend=HostIntBackend(weight_format=fmt)))


def test_fused_tensors_under_a_weight_name_load(moe_ckpt, tmp_path):
    folder, cfg, w = moe_ckpt
    named = {(k + ".weight" if k.endswith(("gate_up_proj", "experts.down_proj")) else k): v for k, v in _fused(w, cfg).items()}
    assert np.array_equal(_logits(write_checkpoint(tmp_path / "fw", cfg, named)), _logits(folder))


def _refused(folder, texts) -> None:
    """Loading ``folder`` is one WeightError naming every problem in ``texts``."""
    with pytest.raises(WeightError) as e:
        load_target(folder)
    for text in texts:
        assert text in str(e.value), str(e.value)
