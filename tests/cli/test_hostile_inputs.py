"""Inputs a sweep of broken checkpoints and flags found mishandled (a hang, a traceback, a success that was not
one, a message with the wrong way out), each now refused in one line with exit 2 - or, for the two that are
valid, served."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onebit_engine.draft.config import DraftConfig
from onebit_engine.errors import ConfigError, WeightError
from onebit_engine.gemm import Linear, get_backend
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint
from onebit_engine.loop.inputs import check_run
from onebit_engine.quant import quantize_weight

from .refusals import refused as _refused


def _target(root: Path, weights=None, seed: int = 3) -> Path:
    cfg = tiny_config()
    return write_checkpoint(root, cfg, weights if weights is not None else random_weights(cfg, seed))


def test_a_config_that_is_a_fifo_or_a_device_is_not_read(tmp_path, run, no_hang):
    for name, make in (("fifo", os.mkfifo), ("zero", lambda p: p.symlink_to("/dev/zero"))):
        folder = _target(tmp_path / name)
        (folder / "config.json").unlink()
        make(folder / "config.json")
        code, _, err = run("generate", "--model", folder, "--max-new-tokens", 2)
        _refused(code, err, "config.json is not a regular file")
    folder = _target(tmp_path / "dir")
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    _refused(*run("generate", "--model", folder, "--max-new-tokens", 2)[::2], "config.json is not a regular file")


def test_finite_weights_that_overflow_end_in_one_line(tmp_path, run):
    """Weights of 3e38 are finite, so they load; the first forward overflows and the exact backend refuses the
    non-finite activations - a one-line error, not a traceback."""
    cfg = tiny_config()
    w = random_weights(cfg, 3)
    w["model.layers.0.mlp.up_proj.weight"] = np.full_like(w["model.layers.0.mlp.up_proj.weight"], 3e38)
    folder = _target(tmp_path / "huge", w)
    code, _, err = run("generate", "--model", folder, "--backend", "host-int", "--max-new-tokens", 2)
    _refused(code, err, "hold NaN or inf", "overflowed")
    code, _, err = run("generate", "--model", folder, "--backend", "reference", "--max-new-tokens", 2)
    _refused(code, err, "logits hold", "overflowed")
    assert "reference backend" not in err  # the run is on it already


def test_a_fused_projection_of_two_formats_is_a_weight_error():
    rng = np.random.default_rng(0)
    a, b = (quantize_weight(rng.standard_normal((8, 32)).astype(np.float32), f) for f in ("int8", "int4"))
    with pytest.raises(WeightError, match=r"q\+k: cannot fuse .* formats \['int4', 'int8'\].*onebit quantize"):
        Linear.fused([a, b], get_backend("reference"), 8, "q+k")


def test_a_projection_in_both_files_is_refused(tmp_path, run):
    cfg = tiny_config()
    w = random_weights(cfg, 3)
    name = "model.layers.0.mlp.up_proj.weight"
    folder = tmp_path / "q"
    code, _, err = run("quantize", "--model", _target(tmp_path / "t", w), "--out", folder)
    assert code == 0, err
    from safetensors.numpy import load_file, save_file

    floats = load_file(str(folder / "model.safetensors"))
    save_file({**floats, name: w[name]}, str(folder / "model.safetensors"))
    code, _, err = run("generate", "--model", folder, "--max-new-tokens", 2)
    _refused(code, err, "both in quantized.safetensors and in the float checkpoint files", name)


def test_quantize_refuses_what_the_loader_would(tmp_path, run):
    """A servable folder it writes must load: a checkpoint that does not match its config is refused before any
    work, as are an infinite embedding, a zero-row projection and a folder that is already quantized."""
    cfg = tiny_config()
    w = random_weights(cfg, 3)
    cases = {
        "shape": {**w, "model.layers.0.mlp.up_proj.weight": np.ones((cfg.intermediate_size + 1, cfg.hidden_size), np.float32)},
        "missing": {k: v for k, v in w.items() if k != "model.layers.0.mlp.up_proj.weight"},
        "inf": {**w, "model.embed_tokens.weight": np.full_like(w["model.embed_tokens.weight"], np.inf)},
    }
    words = {"shape": "shape mismatch model.layers.0.mlp.up_proj.weight", "missing": "1 missing tensor(s)",
             "inf": "model.embed_tokens.weight (0 NaN"}
    for case, weights in cases.items():
        out = tmp_path / f"out-{case}"
        code, _, err = run("quantize", "--model", _target(tmp_path / case, weights), "--out", out)
        _refused(code, err, "cannot quantize", words[case])
        assert not out.exists()
    zero = _target(tmp_path / "zero", {**w, "model.layers.0.mlp.up_proj.weight": np.zeros((0, cfg.hidden_size), np.float32)})
    code, _, err = run("quantize", "--model", zero, "--out", tmp_path / "z.safetensors")
    _refused(code, err, "no rows or no columns", "(0, 32)")
    good = tmp_path / "good"
    assert run("quantize", "--model", _target(tmp_path / "g", w), "--out", good)[0] == 0
    code, _, err = run("quantize", "--model", good, "--out", tmp_path / "again")
    _refused(code, err, "already quantized")
    (tmp_path / "a-file").write_text("x")
    code, _, err = run("quantize", "--model", tmp_path / "g", "--out", tmp_path / "a-file")
    _refused(code, err, "is a file", "new folder path")


def test_a_quantized_file_that_is_a_folder_is_named_as_such(tmp_path, run):
    folder = tmp_path / "q"
    assert run("quantize", "--model", _target(tmp_path / "t"), "--out", folder)[0] == 0
    (folder / "quantized.safetensors").unlink()
    (folder / "quantized.safetensors").mkdir()
    code, _, err = run("generate", "--model", folder, "--max-new-tokens", 2)
    _refused(code, err, "quantized.safetensors: is a folder, not a regular file")
    assert "does not exist" not in err


def test_synth_writes_into_an_empty_folder_and_refuses_a_file(tmp_path, run):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("synth", "--shape", "qwen3.5-0.8b-shrunk", "--format", "int8", "--out", empty)
    assert code == 0, err
    assert sorted(p.name for p in empty.iterdir()) == ["draft", "synth.json", "target"]
    (tmp_path / "f").write_text("x")
    code, _, err = run("synth", "--shape", "qwen3.5-0.8b-shrunk", "--out", tmp_path / "f")
    _refused(code, err, "is a file", "synth writes a folder")
    assert "regular file" not in err


def test_bench_shape_refuses_the_flags_it_would_not_use(run):
    code, _, err = run("bench", "--shape", "qwen3.5-0.8b-shrunk", "--backend", "reference", "--row-set", 3,
                       "--commit-path", "replay", "--max-new-tokens", 9, "--repeats", 1)
    _refused(code, err, "--backend reference", "--row-set 3", "--commit-path replay", "are not used")


def test_a_temperature_too_small_to_divide_by_is_refused(run):
    code, _, err = run("generate", "--temperature", "1e-320", "--max-new-tokens", 2)
    _refused(code, err, "1e-320", "below 1e-30", "give 0 for greedy")
    with pytest.raises(ConfigError, match="below 1e-30"):
        check_run(None, [1, 2], max_new_tokens=2, temperature=1e-40)
    assert check_run(None, [1, 2], max_new_tokens=2, temperature=1e-30) == [1, 2]


def test_an_empty_model_path_is_not_the_built_in_pair(run):
    for command, flag in (("generate", "--model"), ("loop", "--draft")):
        code, _, err = run(command, flag, "", "--max-new-tokens", 2)
        _refused(code, err, f"{flag} '' is a blank path", f"leave {flag} out for the built-in pair")


def test_a_draft_block_past_64_is_refused():
    raw = {"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 96,
           "dflash_config": {"target_layer_ids": [0], "mask_token_id": 1, "block_size": 65}}
    with pytest.raises(ConfigError, match="block_size is 65, must be >= 2 and <= 64"):
        DraftConfig.from_hf(raw)
    raw["dflash_config"]["block_size"] = 64
    try:
        DraftConfig.from_hf(raw)
    except ConfigError as e:
        assert "block_size" not in str(e), e


def test_warnings_and_numpy_noise_are_one_line_each(tmp_path, cache_dir):
    """Run as a user runs it (a subprocess: pytest keeps its own warning hooks): a tied checkpoint whose stored
    head differs warns in one line; a reference run that overflows says one error line and nothing of numpy's."""
    cfg = tiny_config(tie_word_embeddings=True)
    w = random_weights(cfg, 3)
    w["lm_head.weight"] = w["model.embed_tokens.weight"] + 1.0
    tied = write_checkpoint(tmp_path / "tied", cfg, w)
    cfg2 = tiny_config()
    w2 = random_weights(cfg2, 3)
    w2["model.layers.0.mlp.up_proj.weight"] = np.full_like(w2["model.layers.0.mlp.up_proj.weight"], 3e38)
    huge = write_checkpoint(tmp_path / "huge", cfg2, w2)
    env = dict(os.environ, ONEBIT_CACHE_DIR=str(cache_dir))
    cmd = [sys.executable, "-m", "onebit_engine", "generate", "--max-new-tokens", "2", "--model"]
    ok = subprocess.run(cmd + [str(tied)], capture_output=True, text=True, env=env, timeout=300)
    assert ok.returncode == 0, ok.stderr
    lines = ok.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onebit: warning: ") and "tie_word_embeddings" in lines[0], ok.stderr
    bad = subprocess.run(cmd + [str(huge), "--backend", "reference"], capture_output=True, text=True, env=env, timeout=300)
    _refused(bad.returncode, bad.stderr, "logits hold")
    assert "RuntimeWarning" not in bad.stderr


def test_a_tokenizer_past_the_models_vocabulary_is_named(run, pair, tmp_path):
    # the ids come from the folder's own tokenizer: the message must blame the tokenizer, not the prompt
    import json
    import shutil

    pytest.importorskip("tokenizers")
    model = tmp_path / "model"
    shutil.copytree(pair[0], model)
    (model / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 500}, "unk_token": "[UNK]"}}))
    code, _, err = run("generate", "--model", model, "--prompt", "hello", "--max-new-tokens", 2)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "token id 500" in err and "tokenizer.json is not this model's" in err and str(model) in err, err


def test_quantize_takes_a_zero_width_shared_expert_the_loader_takes(run, tmp_path):
    # transformers writes a shared expert of width 0 as (0, D) / (D, 0) tensors; the loader drops them, so must quantize
    from safetensors.numpy import load_file, save_file

    from onebit_engine.hybrid.moe_config import MoeConfig

    cfg = tiny_config(moe=MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                    shared_expert_intermediate_size=0))
    folder = write_checkpoint(tmp_path / "moe0", cfg, random_weights(cfg, 5))
    w = load_file(str(folder / "model.safetensors"))
    D = cfg.hidden_size
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}.mlp."
        w[p + "shared_expert.gate_proj.weight"] = w[p + "shared_expert.up_proj.weight"] = np.zeros((0, D), np.float32)
        w[p + "shared_expert.down_proj.weight"] = np.zeros((D, 0), np.float32)
        w[p + "shared_expert_gate.weight"] = np.zeros((1, D), np.float32)
    save_file(w, str(folder / "model.safetensors"))
    ids = ("--prompt-ids", "1 2 3", "--max-new-tokens", 3, "--backend", "host-int")
    code, want, err = run("generate", "--model", folder, *ids)
    assert code == 0, err
    for out in (tmp_path / "q", tmp_path / "q.safetensors"):
        code, _, err = run("quantize", "--model", folder, "--out", out, "--format", "int8")
        assert code == 0, err
    code, got, err = run("generate", "--model", tmp_path / "q", *ids)
    assert code == 0, err


def test_quantize_names_the_folder_and_a_draft_given_for_a_servable_folder(run, pair, tmp_path):
    import json
    import shutil

    code, _, err = run("quantize", "--model", pair[1], "--out", tmp_path / "dq")
    _refused(code, err, "is a DFlash draft", "--out X.safetensors")
    assert not (tmp_path / "dq").exists()
    bad = tmp_path / "vocab0"
    shutil.copytree(pair[0], bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["vocab_size"] = 0
    (bad / "config.json").write_text(json.dumps(cfg))
    code, _, err = run("quantize", "--model", bad, "--out", tmp_path / "q0.safetensors")
    _refused(code, err, str(bad / "config.json"), "vocab_size is 0")


def test_prompt_text_that_is_not_utf8_or_empty_names_its_source(run, tmp_path):
    import json

    code, _, err = run("generate", "-q", "--max-new-tokens", 2, "--prompt", "\udcff\udcfe")  # what argv makes of b"\xff\xfe"
    _refused(code, err, "--prompt", "is not valid UTF-8")
    for name, items, words in (("s.json", ["\udcff abc"], ("prompt file", "prompt 0", "not valid UTF-8")),
                               ("e.json", [""], ("prompt file", "prompt 0", "encodes to no tokens"))):
        path = tmp_path / name
        path.write_text(json.dumps(items))
        out = tmp_path / f"{name}.stage"
        code, _, err = run("probe", "capture", "-q", "--max-new-tokens", 2, "--prompts", path, "--out", out)
        _refused(code, err, *words)
        assert "--prompt " not in err and not out.exists()


def test_two_prompt_sources_are_refused_not_one_dropped(run, tmp_path):
    code, _, err = run("generate", "--max-new-tokens", 2, "--prompt", "x", "--prompt-ids", "1")
    _refused(code, err, "--prompt-ids: not allowed with argument --prompt")
    (tmp_path / "p.json").write_text('[[1, 2]]')
    code, _, err = run("probe", "capture", "--max-new-tokens", 2, "--prompts", tmp_path / "p.json", "--prompt-ids", "1",
                       "--out", tmp_path / "c.stage")
    _refused(code, err, "not allowed with argument --prompts")
