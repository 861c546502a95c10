"""config.json values are typed and ranged: every problem refused at once, in one line naming the key."""
import json

import pytest

from onebit_engine import ConfigError, load_target
from onebit_engine.hybrid.config import TargetConfig
from onebit_engine.draft import DraftConfig, load_draft, write_synthetic_draft
from onebit_engine.hybrid.synthetic import hf_config_dict, random_weights, tiny_config, write_checkpoint

BASE = hf_config_dict(tiny_config())


def _refusal(raw, cls=TargetConfig) -> str:
    with pytest.raises(ConfigError) as e:
        cls.from_hf(json.loads(json.dumps(raw)))
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# (change to the tiny config.json, text every refusal must contain)
TARGET_CASES = [
    (dict(hidden_size=None), "hidden_size is null, must be an integer"),
    (dict(hidden_size="four"), 'hidden_size is "four", must be an integer'),
    (dict(hidden_size=192.5), "hidden_size is 192.5, must be an integer"),
    (dict(hidden_size=32.0), "hidden_size is 32.0, must be an integer"),
    (dict(num_hidden_layers=True), "num_hidden_layers is true, must be an integer"),
    (dict(num_hidden_layers=10**9), "num_hidden_layers is 1000000000, must be >= 1 and <= 1024"),
    (dict(tie_word_embeddings="false"), 'tie_word_embeddings is "false", must be a JSON boolean'),
    (dict(tie_word_embeddings=0), "tie_word_embeddings is 0, must be a JSON boolean"),
    (dict(attention_bias="no"), 'attention_bias is "no", must be a JSON boolean'),
    (dict(attention_bias=True), "attention_bias true is not supported"),
    (dict(hidden_act="gelu"), 'hidden_act "gelu" is not supported'),
    (dict(rope_parameters="x"), 'rope_parameters is "x", must be a JSON object'),
    (dict(rope_parameters=None, rope_scaling=[1]), "rope_scaling is [1], must be a JSON object"),
    (dict(rope_parameters={"rope_type": "yarn"}), "rope_parameters.rope_type 'yarn' is not supported"),
    (dict(layer_types="linear_attention"), 'layer_types is "linear_attention", must be a list of strings'),
    (dict(layer_types=["linear_attention", "mamba", "linear_attention", "full_attention"]), "unknown layer type(s) ['mamba']"),
    (dict(layer_types=["full_attention"]), "layer_types has 1 entries but num_hidden_layers is 4"),
    (dict(layer_types=None, full_attention_interval=0), "full_attention_interval is 0, must be >= 1"),
    (dict(rms_norm_eps=0), "rms_norm_eps is 0, must be > 0"),
    (dict(rms_norm_eps=-1e-6), "rms_norm_eps is -1e-06, must be > 0"),
    (dict(rms_norm_eps=float("nan")), "rms_norm_eps is NaN, must be a finite float32 number"),
    (dict(rms_norm_eps=float("inf")), "rms_norm_eps is Infinity, must be a finite float32 number"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 0}), "rope_parameters.rope_theta is 0, must be >= 1"),
    (dict(rope_parameters=None, rope_theta=-5), "rope_theta is -5, must be >= 1"),
    (dict(rope_parameters=None, rope_theta=1e-300), "rope_theta is 1e-300, must be >= 1"),  # its frequencies overflow
    (dict(rms_norm_eps=1e39), "rms_norm_eps is 1e+39, must be a finite float32 number"),  # inf in float32
    (dict(rope_parameters={"partial_rotary_factor": 0}), "rope_parameters.partial_rotary_factor is 0, must be > 0 and <= 1"),
    (dict(rope_parameters={"partial_rotary_factor": 1.5}), "partial_rotary_factor is 1.5, must be > 0 and <= 1"),
    (dict(rope_parameters={"partial_rotary_factor": 0.1875}), "rotary dims int(head_dim * partial_rotary_factor) = 3 must be even"),
    (dict(vocab_size=0), "vocab_size is 0, must be >= 1"),
    (dict(intermediate_size=-3), "intermediate_size is -3, must be >= 1"),
    (dict(head_dim=0), "head_dim is 0, must be >= 1"),
    (dict(linear_conv_kernel_dim=0), "linear_conv_kernel_dim is 0, must be >= 1"),
    (dict(num_key_value_heads=3), "num_attention_heads (4) must be divisible by num_key_value_heads (3)"),
    (dict(linear_num_value_heads=3), "linear_num_value_heads (3) must be divisible by linear_num_key_heads (2)"),
    (dict(eos_token_id="2"), 'eos_token_id is "2", must be a token id'),
    (dict(eos_token_id=-1), "eos_token_id holds [-1], every entry must be >= 0"),
    (dict(eos_token_id=[1, 96]), "eos_token_id [96] is outside the vocabulary 0..95"),
    (dict(eos_token_id=[1, True]), "eos_token_id is [1, true], must be a list of integers"),
    (dict(max_position_embeddings=0), "max_position_embeddings is 0, must be >= 1"),
    (dict(max_position_embeddings="4096"), 'max_position_embeddings is "4096", must be an integer'),
    (dict(linear_key_head_dim=None), "linear_key_head_dim is null, must be an integer"),
]


@pytest.mark.parametrize("change, text", TARGET_CASES, ids=[next(iter(c)) + f"-{i}" for i, (c, _) in enumerate(TARGET_CASES)])
def test_bad_target_value_is_refused_by_key(change, text):
    msg = _refusal({**BASE, **change})
    assert msg.startswith("config.json: 1 problem: ") and text in msg, msg
    assert "fix these values in config.json" in msg


def test_missing_required_key_is_named():
    raw = dict(BASE)
    del raw["linear_value_head_dim"]
    assert "linear_value_head_dim is missing (required)" in _refusal(raw)


def test_every_problem_reported_at_once():
    msg = _refusal({**BASE, "hidden_size": None, "rms_norm_eps": -1, "tie_word_embeddings": "false",
                    "layer_types": "full_attention"})
    assert msg.startswith("config.json: 4 problems: "), msg
    for key in ("hidden_size", "rms_norm_eps", "tie_word_embeddings", "layer_types"):
        assert key in msg


@pytest.mark.parametrize("raw, text", [
    ([BASE], "the top level is [{"),
    (None, "the top level is null"),
    ("config", 'the top level is "config"'),
    ({"model_type": "qwen3_5", "text_config": "x"}, "'qwen3_5' needs a 'text_config' object, got \"x\""),
    ({"model_type": "qwen3_5"}, "'qwen3_5' needs a 'text_config' object, got null"),
])
def test_config_that_is_not_an_object(raw, text):
    assert text in _refusal(raw)


def test_vl_wrapper_labels_text_config_keys():
    vl = {"model_type": "qwen3_5", "text_config": {**BASE, "hidden_size": "x"}, "tie_word_embeddings": "no"}
    msg = _refusal(vl)
    assert 'text_config.hidden_size is "x"' in msg and 'tie_word_embeddings is "no"' in msg


def test_null_defaults_still_read_as_before():
    c = TargetConfig.from_hf({**BASE, "head_dim": None, "num_key_value_heads": None, "eos_token_id": None})
    assert (c.head_dim, c.num_key_value_heads, c.eos_token_ids) == (32 // 4, 4, ())
    c = TargetConfig.from_hf({**BASE, "eos_token_id": 3, "rope_theta": 10})  # rope_parameters wins over top level
    assert c.eos_token_ids == (3,) and c.rope_theta == 10000.0


def test_file_named_in_refusal_from_load_target(tmp_path):
    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1))
    (folder / "config.json").write_text(json.dumps({**BASE, "hidden_size": "four"}))
    with pytest.raises(ConfigError, match=str(folder / "config.json") + ': 1 problem: hidden_size is "four"'):
        load_target(folder)


DRAFT = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "dflash_config": {"target_layer_ids": [1, 3], "mask_token_id": 63},
}

DRAFT_CASES = [
    (dict(hidden_size=None), "hidden_size is null, must be an integer"),
    (dict(hidden_size=32.5), "hidden_size is 32.5, must be an integer"),
    (dict(num_hidden_layers="3"), 'num_hidden_layers is "3", must be an integer'),
    (dict(head_dim=0), "head_dim is 0, must be >= 1"),
    (dict(rms_norm_eps=0), "rms_norm_eps is 0, must be > 0"),
    (dict(use_sliding_window="yes"), 'use_sliding_window is "yes", must be a JSON boolean'),
    (dict(use_sliding_window=True, sliding_window=0), "sliding_window is 0, must be >= 1"),
    (dict(layer_types="full_attention"), 'layer_types is "full_attention", must be a list of strings'),
    (dict(rope_parameters="x"), 'rope_parameters is "x", must be a JSON object'),
    (dict(rope_theta=0), "rope_theta is 0, must be >= 1"),
    (dict(dflash_config={"target_layer_ids": [1, 3], "mask_token_id": 63, "output_multiplier": 1e300}),
     "dflash_config.output_multiplier is 1e+300, must be a finite float32 number"),
    (dict(dflash_config={"target_layer_ids": [1, 3], "mask_token_id": 63, "input_embedding_scale": -4e38}),
     "dflash_config.input_embedding_scale is -4e+38, must be a finite float32 number"),
    (dict(dflash_config="x"), 'dflash_config is "x", must be a JSON object'),
    (dict(dflash_config={"target_layer_ids": "1,3", "mask_token_id": 63}), 'dflash_config.target_layer_ids is "1,3", must be a list of integers'),
    (dict(dflash_config={"target_layer_ids": [1, -3], "mask_token_id": 63}), "dflash_config.target_layer_ids holds [-3]"),
    (dict(dflash_config={"target_layer_ids": [1, 3], "mask_token_id": "63"}), 'dflash_config.mask_token_id is "63", must be an integer'),
    (dict(dflash_config={"target_layer_ids": [1, 3], "mask_token_id": 63, "block_size": 16.5}), "dflash_config.block_size is 16.5"),
    (dict(dflash_config={"target_layer_ids": [1, 3], "mask_token_id": 63, "is_causal": "false"}), 'dflash_config.is_causal is "false", must be a JSON boolean'),
    (dict(dflash_config={"target_layer_ids": [1, 3], "mask_token_id": 63, "output_multiplier": float("nan")}), "dflash_config.output_multiplier is NaN"),
    (dict(architectures="DFlashDraftModel"), 'architectures is "DFlashDraftModel", must be a list'),
    (dict(attention_bias="false"), 'attention_bias is "false", must be a JSON boolean'),
]


@pytest.mark.parametrize("change, text", DRAFT_CASES, ids=[next(iter(c)) + f"-{i}" for i, (c, _) in enumerate(DRAFT_CASES)])
def test_bad_draft_value_is_refused_by_key(change, text):
    msg = _refusal({**DRAFT, **change}, DraftConfig)
    assert msg.startswith("draft config.json: ") and text in msg, msg


def test_draft_problems_reported_at_once_and_top_level_object():
    msg = _refusal({**DRAFT, "hidden_size": None, "rms_norm_eps": -1, "head_dim": 7}, DraftConfig)
    assert msg.startswith("draft config.json: 3 problems: ") and "head_dim 7 must be even" in msg, msg
    assert "the top level is [1]" in _refusal([1], DraftConfig)


def test_draft_file_named_in_refusal(tmp_path):
    cfg = tiny_config()
    folder = write_synthetic_draft(tmp_path / "d", cfg)
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "hidden_size": "four"}))
    with pytest.raises(ConfigError, match=str(folder / "config.json")):
        load_draft(folder, None)


@pytest.mark.parametrize("text, match", [
    ('{"hidden_size": ' + "1" * 5000 + "}", "config.json is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "config.json nests too deeply"),
    ('{"model_type": "qwen3_5_text", "rms_norm_eps": ' + "1" * 400 + "}", "rms_norm_eps is 1111"),
])
def test_pathological_json_is_refused_by_file(tmp_path, text, match):
    from onebit_engine import CheckpointError, OnebitError

    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1))
    raw = json.loads(json.dumps(BASE))
    if text.startswith('{"model_type"'):
        raw["rms_norm_eps"] = int("1" * 400)
        text = json.dumps(raw)
    (folder / "config.json").write_text(text)
    with pytest.raises(OnebitError, match=match) as e:
        load_target(folder)
    assert str(folder / "config.json") in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, (CheckpointError, ConfigError))
