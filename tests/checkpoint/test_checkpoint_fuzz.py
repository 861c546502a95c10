"""Property: a mutated config.json or safetensors header is either refused with one OnebitError of one
line, or it loads and decodes exactly like what it says (never a traceback, never a silently coerced
value). Mutations: drop a key, or set it (or a RoPE sub-key) to null / a bool / an int (negative, huge) / a
float (NaN, inf) / a string / a list / an object; in the header, one tensor's offsets, dtype or shape."""
import json
import struct
from dataclasses import replace

from hypothesis import given, strategies as st

from onebit_engine import OnebitError, load_target
from onebit_engine.loop.generate import generate
from onebit_engine.hybrid.synthetic import hf_config_dict, random_weights, tiny_config, write_checkpoint
from onebit_engine.hybrid import Target

CFG = tiny_config(eos_token_ids=(5,))
WEIGHTS = random_weights(CFG, 3)
PROMPT, STEPS = [1, 2, 3], 4
CONFIG = hf_config_dict(CFG)
ROPE_KEYS = ("rope_type", "rope_theta", "partial_rotary_factor")


def _tokens(target) -> list[int]:
    return list(generate(target, PROMPT, max_new_tokens=STEPS).tokens)


REFERENCE = _tokens(Target(CFG, WEIGHTS))

values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(-2**63, 2**63), st.sampled_from([0, 1, 2, 4, 16, 32, 96, 10**6]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1.0, 32.0, 1e-6, 1e30, -0.0]),
    st.text(max_size=4), st.sampled_from(["false", "true", "4", "full_attention", "linear_attention"]),
    st.lists(st.one_of(st.integers(-2, 100), st.sampled_from(["full_attention", "linear_attention"])), max_size=5),
    st.dictionaries(st.sampled_from(ROPE_KEYS), st.one_of(st.none(), st.floats(), st.text(max_size=3)), max_size=2),
)
config_mutation = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(sorted(CONFIG)), st.none()),
    st.tuples(st.just("set"), st.sampled_from(sorted(CONFIG)), values),
    st.tuples(st.just("rope"), st.sampled_from(ROPE_KEYS), values),
)


def _one_line_refusal(folder) -> bool:
    """True when refused cleanly; any other exception fails the test."""
    try:
        load_target(folder)
    except OnebitError as e:
        assert str(e) and "\n" not in str(e), repr(e)
        return True
    return False


def _faithful(cfg, key: str, value) -> bool:
    """Did a value the config accepted come through as written (no truncation, no coercion)?"""
    field = {"eos_token_id": "eos_token_ids"}.get(key, key)
    if not hasattr(cfg, field):
        return True  # a key the engine does not read
    got = getattr(cfg, field)
    if field == "eos_token_ids":
        want = () if value is None else (value,) if isinstance(value, int) else tuple(value)
    elif field == "layer_types":
        want = tuple(value) if isinstance(value, list) else CFG.layer_types
    elif value is None:
        return True  # null read as the documented default (head_dim, num_key_value_heads, eos)
    else:
        want = value
    return got == want and type(got) is type(want) or (isinstance(got, float) and float(want) == got and not isinstance(want, bool))


@given(config_mutation)
def test_mutated_config_refused_or_faithful(tmp_path_factory, mutation):
    kind, key, value = mutation
    raw = json.loads(json.dumps(CONFIG))
    if kind == "drop":
        del raw[key]
    elif kind == "set":
        raw[key] = value
    else:
        raw["rope_parameters"][key] = value
    folder = write_checkpoint(tmp_path_factory.mktemp("c"), CFG, WEIGHTS)
    (folder / "config.json").write_text(json.dumps(raw))
    if _one_line_refusal(folder):
        return
    target = load_target(folder)
    cfg = target.config
    if kind == "set" or kind == "rope":
        assert _faithful(cfg, key, value), (key, value, cfg)
    # whatever was read, decoding equals the original weights run under that config
    want = REFERENCE if cfg == CFG else _tokens(Target(cfg, WEIGHTS))
    assert _tokens(target) == want


def _rewrite_header(path, mutate) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    mutate(header)
    hj = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(hj)) + hj + data[8 + n :])


NAMES = sorted(WEIGHTS)
ints = st.one_of(st.integers(-8, 8), st.integers(-2**40, 2**40), st.sampled_from([0, 4, 16, 4096]))
field_values = {
    "data_offsets": st.one_of(st.lists(ints, max_size=3), values, st.tuples(ints, ints).map(list)),
    "dtype": st.one_of(st.sampled_from(["F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "U8", "BOOL", "F8", "f32"]), values),
    "shape": st.one_of(st.lists(ints, max_size=3), values, st.sampled_from([[32], [96, 32], [32, 96], [8, 4], [4, 8]])),
}
header_mutation = st.sampled_from(NAMES).flatmap(
    lambda name: st.sampled_from(sorted(field_values)).flatmap(
        lambda field: st.tuples(st.just(name), st.just(field), field_values[field] | st.just("<drop>"))))


@given(header_mutation)
def test_mutated_header_refused_or_identical(tmp_path_factory, mutation):
    name, field, value = mutation
    folder = write_checkpoint(tmp_path_factory.mktemp("h"), CFG, WEIGHTS)

    def mutate(header):
        if value == "<drop>":
            del header[name][field]
        elif field == "data_offsets" and isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value):
            b, e = header[name]["data_offsets"]  # offsets drawn relative to the real ones: near misses
            header[name]["data_offsets"] = [b + value[0] % 9 - 4 if abs(value[0]) < 9 else value[0],
                                            e + value[1] % 9 - 4 if abs(value[1]) < 9 else value[1]]
        else:
            header[name][field] = value

    _rewrite_header(folder / "model.safetensors", mutate)
    if _one_line_refusal(folder):
        return
    assert _tokens(load_target(folder)) == REFERENCE


def test_both_outcomes_are_reachable(tmp_path):
    """Guard against a property that cannot fail: an unchanged checkpoint loads and decodes like the
    reference, a legitimately changed value decodes differently, and a bad value is refused."""
    assert len(REFERENCE) == STEPS or REFERENCE[-1] in CFG.eos_token_ids
    folder = write_checkpoint(tmp_path / "ok", CFG, WEIGHTS)
    assert not _one_line_refusal(folder) and _tokens(load_target(folder)) == REFERENCE
    assert _tokens(Target(replace(CFG, rope_theta=3.0, rms_norm_eps=0.5), WEIGHTS)) != REFERENCE
    raw = {**CONFIG, "hidden_size": 32.5}
    (folder / "config.json").write_text(json.dumps(raw))
    assert _one_line_refusal(folder)


DRAFT_CONFIG = {
    "architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6,
    "use_sliding_window": True, "sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "vocab_size": 96,
    "dflash_config": {"target_layer_ids": [1, 2], "mask_token_id": 63, "block_size": 8, "conv_kernel_size": 2,
                      "conv_group_size": 4, "selector_rank": 8, "selector_top_k": 4, "is_causal": False},
}
draft_mutation = st.one_of(
    st.tuples(st.just("top"), st.sampled_from(sorted(DRAFT_CONFIG)), values | st.just("<drop>")),
    st.tuples(st.just("dflash"), st.sampled_from(sorted(DRAFT_CONFIG["dflash_config"])), values | st.just("<drop>")),
)


@given(draft_mutation)
def test_mutated_draft_config_refused_in_one_line_or_built(mutation):
    from onebit_engine import ConfigError
    from onebit_engine.draft import DraftConfig

    where, key, value = mutation
    raw = json.loads(json.dumps(DRAFT_CONFIG))
    obj = raw if where == "top" else raw["dflash_config"]
    if value == "<drop>":
        del obj[key]
    else:
        obj[key] = value
    try:
        c = DraftConfig.from_hf(raw)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    field = key if hasattr(c, key) and value not in (None, "<drop>") else None
    if field in ("hidden_size", "intermediate_size", "num_hidden_layers", "head_dim", "mask_token_id", "block_size"):
        assert getattr(c, field) == value and type(getattr(c, field)) is type(value)  # never coerced
