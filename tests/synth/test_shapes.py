"""The shapes table holds the published shapes, and every shape's layer structure runs (shrunk) in CI:
synthesized in each format, loaded, decoded, the loop equal to plain greedy decoding."""
from __future__ import annotations

import json

import pytest

from onebit_engine import load_draft, load_target
from onebit_engine.errors import ConfigError
from onebit_engine.loop.generate import generate
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.measure.oracle import OracleDraft, constant_for_tau, profile
from onebit_engine.synth import SHAPES, get_shape
from onebit_engine.synth.folder import MARKER, plan, synthesize


def test_the_27b_shapes_are_the_published_ones():
    s = SHAPES["qwen3.6-27b"]
    t = s.target_tensors()
    a, q = "model.layers.0.linear_attn.", "model.layers.3.self_attn."
    assert t[a + "in_proj_qkv.weight"] == (10240, 5120) and t[a + "in_proj_z.weight"] == (6144, 5120)
    assert t[a + "in_proj_a.weight"] == (48, 5120) and t[a + "conv1d.weight"] == (10240, 1, 4)
    assert t[a + "out_proj.weight"] == (5120, 6144) and t[q + "q_proj.weight"] == (12288, 5120)
    assert t[q + "k_proj.weight"] == (1024, 5120) and t[q + "o_proj.weight"] == (5120, 6144)
    assert 26.8e9 < s.target_params < 27.0e9  # 27.78 B with the vision tower and the MTP head, which a text target has not
    d = s.draft_config()
    assert (d.num_hidden_layers, d.hidden_size, d.block_size, d.target_layer_ids) == (5, 5120, 8, (5, 19, 33, 47, 61))
    assert s.published_tau == 5.46
    assert 34.5e9 < SHAPES["qwen3.5-35b-a3b"].target_params < 35e9 and 3e9 < SHAPES["qwen3.5-35b-a3b"].active_params() < 4e9
    assert 79e9 < SHAPES["qwen3-next-80b-a3b"].target_params < 81e9
    assert SHAPES["qwen3.5-0.8b"].target.tie_word_embeddings and not SHAPES["qwen3.5-9b"].target.tie_word_embeddings
    with pytest.raises(ConfigError, match="not known"):
        get_shape("qwen9")


@pytest.mark.parametrize("fmt", ["int8", "int4", "ternary"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_every_shape_runs_shrunk(tmp_path, name, fmt):
    shape = SHAPES[name].shrunk()
    full = SHAPES[name]
    assert shape.target.layer_types == full.target.layer_types
    assert (shape.target.num_attention_heads, shape.target.num_key_value_heads) == (full.target.num_attention_heads, full.target.num_key_value_heads)
    folder = synthesize(shape, fmt, tmp_path / "pair", seed=1)
    assert json.loads((folder / MARKER).read_text())["shape"] == shape.name
    target = load_target(folder / "target", backend="host-int")
    draft = load_draft(folder / "draft", target, backend="host-int")
    prompt = [5, 9, 2, 7]
    plain = generate(target, prompt, max_new_tokens=14, stop_tokens=())
    for prof in (profile("0.6", 7), profile("seed", 7)):
        oracle = OracleDraft(draft, plain.tokens, len(prompt), prof, target.config.vocab_size)
        spec = speculative_generate(target, oracle, prompt, max_new_tokens=14, k=7, stop_tokens=())
        assert spec.tokens == plain.tokens
    assert spec.rounds and all(r.accepted == r.proposed for r in spec.rounds)  # seed: every draft kept
    written = sum(f.stat().st_size for f in folder.rglob("*.safetensors"))
    assert 0 <= written - plan(shape, fmt).disk_bytes < 4 << 20  # the plan is what lands on disk, but for the headers


def test_a_marker_that_fails_to_write_leaves_none(tmp_path, monkeypatch):
    """The marker says the pair is whole, so it is written last and atomically: a failed write of it (a full
    disk) raises one line and leaves no marker, torn or whole, for a cache to trust."""
    import errno

    from onebit_engine import atomic
    from onebit_engine.errors import OutputError

    real = atomic.os.replace

    def full(src, dst):
        if str(dst).endswith(MARKER):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", full)
    with pytest.raises(OutputError, match="No space left"):
        synthesize(SHAPES["qwen3.5-0.8b"].shrunk(), "int8", tmp_path / "pair", seed=1)
    assert sorted(p.name for p in (tmp_path / "pair").iterdir()) == ["draft", "target"]


def test_acceptance_profiles():
    assert profile("seed", 7).expected_tokens() == 8
    assert abs(profile("0.8", 7).expected_tokens() - (1 + sum(0.8**i for i in range(1, 8)))) < 1e-12
    a = constant_for_tau(5.46, 7)
    assert abs(sum(a**i for i in range(8)) - 5.46) < 1e-9 and 0.87 < a < 0.89
    assert abs(profile("published", 7, published_tau=5.46, block=8).expected_tokens() - 5.46) < 1e-9
    pair = profile("pair", 7)
    assert 1.8 < pair.expected_tokens() < 2.5 and all(0 <= c <= 1 for c in pair.keep)
    for bad, msg in (("published", "no published"), ("1.5", "must lie in"), ("fast", "not a number")):
        with pytest.raises(ConfigError, match=msg):
            profile(bad, 7)


def test_the_oracle_refuses_a_truth_the_loop_left(tmp_path):
    shape = SHAPES["qwen3.5-0.8b"].shrunk()
    folder = synthesize(shape, "int8", tmp_path / "p")
    target = load_target(folder / "target", backend="host-int")
    draft = load_draft(folder / "draft", target, backend="host-int")
    plain = generate(target, [1, 2], max_new_tokens=10, stop_tokens=())
    wrong = [(t + 1) % 512 for t in plain.tokens]
    oracle = OracleDraft(draft, wrong, 2, profile("1", 7), 512)
    with pytest.raises(ConfigError, match="does not hold the anchor"):
        speculative_generate(target, oracle, [1, 2], max_new_tokens=10, k=7, stop_tokens=())


def test_a_short_run_keeps_what_the_profile_says():
    from onebit_engine.measure.oracle import accepted_count, weyl

    for spec in ("0.8", "0.5", "pair", "seed"):
        prof = profile(spec, 7)
        counts = [accepted_count(prof.keep, weyl(r)) for r in range(12)]  # a dozen rounds, as a 48-token run has
        assert abs(1 + sum(counts) / len(counts) - prof.expected_tokens()) < 0.06 * prof.expected_tokens(), spec
    assert accepted_count((1.0,) * 7, 0.999) == 7 and accepted_count((0.0,) * 7, 0.0) == 0
