"""`onebit inspect` on a folder written by `onebit quantize --out DIR` reports its quantization; bad
checkpoint inputs reach the CLI as one line, exit 2."""
import json
import shutil

import pytest


@pytest.mark.parametrize("fmt", ["int8", "int4", "ternary"])
def test_inspect_servable_quantized_folder(run, run_json, pair, tmp_path, fmt):
    dest = tmp_path / f"served-{fmt}"
    run_json("quantize", "--model", pair[0], "--format", fmt, "--out", dest)
    d = run_json("inspect", dest)
    q = d["quantization"]
    assert d["kind"] == "target" and isinstance(q, dict), q
    assert q["formats"] == [fmt] and q["file"] == "quantized.safetensors" and q["float_dtypes"] == ["F32"]
    names = {w["name"] for w in q["weights"]}
    assert "model.layers.0.mlp.gate_proj.weight" in names and "model.embed_tokens.weight" not in names
    files = {t["file"] for t in d["tensors"]}
    assert files == {"model.safetensors", "quantized.safetensors"}
    code, text, err = run("inspect", dest)
    assert code == 0, err
    assert f"quantization: {fmt}, {len(names)} weights in quantized.safetensors" in text
    assert "quantization: none" not in text and "bits/weight" in text and "model.embed_tokens.weight" in text


def test_inspect_float_folder_still_says_none(run_json, pair):
    assert run_json("inspect", pair[0])["quantization"].startswith("none (float checkpoint")


def _one_line(code, err):
    assert code == 2 and err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err


def test_broken_tokenizer_refused_even_with_prompt_ids(run, pair, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(pair[0], model)
    (model / "tokenizer.json").write_text("{broken")
    code, _, err = run("generate", "--model", model, "--prompt-ids", "1 2 3", "--max-new-tokens", 2)
    _one_line(code, err)
    assert str(model / "tokenizer.json") in err and "not valid JSON" in err


def test_missing_tokenizers_package_names_the_extra(run, pair, tmp_path, monkeypatch):
    import sys

    model = tmp_path / "m"
    shutil.copytree(pair[0], model)
    (model / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    code, _, err = run("generate", "--model", model, "--prompt-ids", "1 2 3", "--max-new-tokens", 2)
    _one_line(code, err)
    assert "pip install 'onebit-specverify[cli]'" in err


@pytest.mark.parametrize("edit", [
    lambda c: [c],
    lambda c: {**c, "hidden_size": None},
    lambda c: {**c, "hidden_size": "four"},
    lambda c: {**c, "rope_parameters": "x"},
    lambda c: {**c, "layer_types": "full_attention"},
])
@pytest.mark.parametrize("cmd", [["generate", "--max-new-tokens", 2], ["inspect"]])
def test_bad_config_is_one_line_for_every_command(run, pair, tmp_path, edit, cmd):
    model = tmp_path / "m"
    shutil.copytree(pair[0], model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(edit(cfg)))
    argv = [cmd[0], model, *cmd[1:]] if cmd[0] == "inspect" else [cmd[0], "--model", model, *cmd[1:]]
    code, _, err = run(*argv)
    _one_line(code, err)
    assert "config.json" in err


def test_quantize_refuses_non_finite_or_integer_weights(run, pair, tmp_path):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    model = tmp_path / "m"
    shutil.copytree(pair[0], model)
    t = load_file(str(model / "model.safetensors"))
    t["model.layers.0.mlp.up_proj.weight"][0, 0] = np.nan
    t["model.layers.1.mlp.down_proj.weight"] = t["model.layers.1.mlp.down_proj.weight"].astype(np.int16)
    save_file(t, str(model / "model.safetensors"))
    code, _, err = run("quantize", "--model", model, "--out", tmp_path / "q")
    _one_line(code, err)
    assert "model.layers.0.mlp.up_proj.weight (1 NaN, 0 inf)" in err and "model.layers.1.mlp.down_proj.weight (I16)" in err
    assert not (tmp_path / "q").exists()


def test_a_fused_projection_of_mixed_formats_is_refused_by_inspect_and_load(run, run_json, pair, tmp_path):
    # names and shapes were right, so inspect said "loads: yes" and every loading command then refused the folder
    from onebit_engine import WeightError, load_target
    from onebit_engine.quant import quantize_weight
    from onebit_engine.quant.io import load_quantized, save_quantized

    dest = tmp_path / "served"
    run_json("quantize", "--model", pair[0], "--format", "int8", "--out", dest)
    q = load_quantized(dest / "quantized.safetensors")
    name = next(n for n in q if n.endswith("self_attn.k_proj.weight") or n.endswith("linear_attn.in_proj_z.weight"))
    q[name] = quantize_weight(q[name].dequantize(), "int4")
    save_quantized(dest / "quantized.safetensors", q)
    code, _, err = run("inspect", dest)
    _one_line(code, err)
    assert "does not load" in err and "mix formats" in err and f"{name} (int4)" in err, err
    with pytest.raises(WeightError, match="fused projection.s. mix formats"):
        load_target(dest)


def test_fused_groups_are_the_projections_the_target_fuses(monkeypatch):
    # weights.fused_groups is what the load-time check reads; layers.py builds the fused projections: pin the two
    from onebit_engine.gemm import Linear
    from onebit_engine.hybrid.model import Target
    from onebit_engine.hybrid.moe_config import MoeConfig
    from onebit_engine.hybrid.synthetic import random_weights, tiny_config
    from onebit_engine.hybrid.weights import fused_groups

    built = []
    real = Linear.fused.__func__
    monkeypatch.setattr(Linear, "fused", classmethod(lambda cls, ws, *a, **k: built.append(k.get("name", a[2] if len(a) > 2 else ""))
                                                     or real(cls, ws, *a, **k)))
    for cfg in (tiny_config(), tiny_config(moe=MoeConfig(num_experts=3, num_experts_per_tok=2, moe_intermediate_size=8,
                                                          shared_expert_intermediate_size=8))):
        built.clear()
        Target(cfg, random_weights(cfg, 0))
        assert sorted(built) == sorted("+".join(g) for g in fused_groups(cfg))


def test_a_draft_fused_projection_of_mixed_formats_is_refused_naming_the_draft(run, tmp_path):
    from onebit_engine import WeightError, load_draft, load_target
    from onebit_engine.quant import quantize_weight
    from onebit_engine.quant.io import load_quantized, save_quantized

    pair = tmp_path / "pair"
    code, _, err = run("synth", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8", "--out", pair)
    assert code == 0, err
    q = load_quantized(pair / "draft" / "quantized.safetensors")
    name = next(n for n in q if n.endswith("self_attn.k_proj.weight"))
    q[name] = quantize_weight(q[name].dequantize(), "int4")
    save_quantized(pair / "draft" / "quantized.safetensors", q)
    code, _, err = run("inspect", pair / "draft")
    _one_line(code, err)
    assert "mix formats" in err and f"{name} (int4)" in err, err
    with pytest.raises(WeightError, match=f"^{pair / 'draft'}: .*mix formats"):
        load_draft(pair / "draft", load_target(pair / "target"))
