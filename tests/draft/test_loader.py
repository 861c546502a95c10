"""Draft config parsing and checkpoint loading: aliases, and one clear error listing every problem."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from onebit_engine.draft import DraftConfig, load_draft, write_synthetic_draft
from onebit_engine.errors import ConfigError, WeightError

from .draft_helpers import make_taps, make_target


def _rewrite(folder, edit):
    """Apply ``edit(dict name -> array)`` to the folder's model.safetensors."""
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


def test_every_tensor_problem_in_one_error(target, tmp_path):
    folder = write_synthetic_draft(tmp_path, target.config, version=2)

    def edit(t):
        del t["layers.1.mlp.up_proj.weight"]
        del t["candidate_selector.successor_codebook"]
        t["layers.0.self_attn.q_proj.weight"] = np.zeros((5, 32), np.float32)
        t["layers.0.attention_conv.base_kernel"] = np.zeros((2, 3, 32), np.float32)
        t["layers.7.extra.weight"] = np.zeros(3, np.float32)

    _rewrite(folder, edit)
    with pytest.raises(WeightError) as err:
        load_draft(folder, target)
    msg = str(err.value)
    assert "2 missing, 1 unknown, 2 wrong shape" in msg
    for text in ("missing tensor layers.1.mlp.up_proj.weight", "missing tensor candidate_selector.successor_codebook",
                 "unknown tensor layers.7.extra.weight", "layers.0.self_attn.q_proj.weight: shape (5, 32)",
                 "layers.0.attention_conv.base_kernel: shape (2, 3, 32) in the file, config needs (2, 2, 32)"):
        assert text in msg


def test_draft_that_does_not_fit_the_target(target, tmp_path):
    folder = write_synthetic_draft(tmp_path, target.config, target_layer_ids=[1, 6, 9])
    other = make_target(vocab=80, hidden=32, layers=6)
    with pytest.raises(ConfigError) as err:
        load_draft(folder, other)
    msg = str(err.value)
    assert "target_layer_ids [6, 9] are not target layers" in msg
    assert "draft vocab_size 64 != target vocab_size 80" in msg
    wide = make_target(hidden=48, layers=10)
    with pytest.raises(ConfigError, match="draft hidden_size 32 != target hidden_size 48"):
        load_draft(folder, wide)


def test_alias_names_load_identically(target, tmp_path):
    plain = write_synthetic_draft(tmp_path / "plain", target.config, version=2, num_layers=1, seed=4)
    aliased = write_synthetic_draft(tmp_path / "aliased", target.config, version=2, num_layers=1, seed=4)

    def alias(name):
        for canon, other in (("layers.0.", "midlayer."), ("fc.", "encoder.fc."), ("hidden_norm.", "encoder.output_norm_enc.")):
            if name.startswith(canon):
                name = other + name[len(canon):]
        return "model." + name + (".weight" if "codebook" in name else "")

    def edit(t):
        for name in list(t):
            t[alias(name)] = t.pop(name)

    _rewrite(aliased, edit)
    assert any(k.startswith("model.midlayer.") for k in load_file(str(aliased / "model.safetensors")))
    rng = np.random.default_rng(0)
    taps = make_taps(rng, 6)
    out = []
    for folder in (plain, aliased):
        d = load_draft(folder, target)
        st = d.new_state()
        d.append_context(st, taps)
        out.append(d.propose(st, 3, 5))
    np.testing.assert_array_equal(out[0].hidden, out[1].hidden)
    np.testing.assert_array_equal(out[0].tokens, out[1].tokens)


def test_duplicate_after_aliasing_is_refused(target, tmp_path):
    folder = write_synthetic_draft(tmp_path, target.config)
    _rewrite(folder, lambda t: t.__setitem__("model.fc.weight", t["fc.weight"]))
    with pytest.raises(WeightError, match="both map to 'fc.weight'"):
        load_draft(folder, target)


BASE = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "dflash_config": {"target_layer_ids": [1, 3], "mask_token_id": 63},
}


def _cfg(**changes):
    raw = json.loads(json.dumps(BASE))
    dflash = changes.pop("dflash_config", {})
    raw["dflash_config"].update(dflash)
    raw.update(changes)
    return DraftConfig.from_hf(raw)


def test_config_field_lookup_and_version():
    c = _cfg(block_size=10)
    assert (c.version, c.block_size, c.target_layer_ids, c.mask_token_id) == (1, 10, (1, 3), 63)
    assert _cfg(block_size=10, dflash_config={"block_size": 8}).block_size == 8  # dflash_config wins
    v2 = dict(conv_kernel_size=2, conv_group_size=4, selector_rank=8, selector_top_k=4)
    assert _cfg(architectures=["DFlash2DraftModel"], dflash_config=v2).version == 2
    assert _cfg(architectures=["MuseGlimmerAssistant"], dflash_config=v2).version == 2  # from the fields
    with pytest.raises(ConfigError, match="DFlash 2 draft needs positive"):
        _cfg(architectures=["DFlash2DraftModel"])
    no_ids = json.loads(json.dumps(BASE))
    del no_ids["dflash_config"]["target_layer_ids"]
    no_ids["num_target_layers"] = 36
    assert DraftConfig.from_hf({**no_ids, "num_hidden_layers": 5}).target_layer_ids == (1, 9, 17, 25, 33)


def test_config_causal_and_window_rule():
    mixed = ["sliding_attention", "full_attention", "sliding_attention"]
    c = _cfg(layer_types=mixed, sliding_window=6, use_sliding_window=True)
    assert c.causal == (True, False, True) and c.windows == (6, None, 6)
    c = _cfg(layer_types=mixed, sliding_window=6, use_sliding_window=True, is_causal=False)
    assert c.causal == (False, False, False) and c.windows == (6, None, 6)
    c = _cfg(layer_types=mixed, sliding_window=6)  # HF Qwen3Config: no use_sliding_window -> no window
    assert c.windows == (None, None, None) and c.causal == (True, False, True)
    assert _cfg().causal == (False, False, False)


@pytest.mark.parametrize("change, match", [
    (dict(head_dim=None), "head_dim"),
    (dict(dflash_config={"mask_token_id": None}), "mask_token_id"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0}), "rope_type 'yarn'"),
    (dict(layer_types=["full_attention"]), "layer_types has 1 entries"),
    (dict(num_key_value_heads=3), "divisible"),
])
def test_config_errors_name_the_problem(change, match):
    raw = json.loads(json.dumps(BASE))
    for key, val in change.items():
        if key == "dflash_config":
            raw["dflash_config"].update(val)
        else:
            raw[key] = val
    raw = {k: v for k, v in raw.items() if v is not None}
    raw["dflash_config"] = {k: v for k, v in raw["dflash_config"].items() if v is not None}
    with pytest.raises(ConfigError, match=match):
        DraftConfig.from_hf(raw)


def test_missing_folder_is_a_clear_error(tmp_path):
    from onebit_engine.errors import CheckpointError

    with pytest.raises(CheckpointError, match="config.json"):
        load_draft(tmp_path, SimpleNamespace(config=None))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the injected inf, softmaxed on the way
def test_non_finite_draft_logits_stop_the_proposal(target, tmp_path, version, temperature, bad):
    # the verify keeps the output right whatever the draft says: without this a broken draft runs on as noise
    from onebit_engine.errors import NumericalError
    from .draft_helpers import make_taps

    d = load_draft(write_synthetic_draft(tmp_path, target.config, version=version), target)
    st = d.new_state()
    d.append_context(st, make_taps(np.random.default_rng(0), 5))
    rng = np.random.default_rng(1)
    d.propose(st, 3, 4, temperature=temperature, rng=rng)  # the draft as written proposes
    real = d.compute_logits

    def broken(hidden):
        z = real(hidden)
        z[1] = bad
        return z

    d.compute_logits = broken
    with pytest.raises(NumericalError, match="logits of block row 2 hold .* check the draft's config"):
        d.propose(st, 3, 4, temperature=temperature, rng=rng)
