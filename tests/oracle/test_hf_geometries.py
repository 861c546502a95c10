"""The target against HF transformers over other shapes than the main oracle's: GQA 4:1 and 1:1,
linear-attention key heads below / equal to value heads, head dims 8..64, a conv kernel of 2, attention
every 2nd / 3rd / 4th layer (5 layers, so the pattern does not divide), odd vocab, partial rotary 0.25 /
0.5 / 1.0. Prefill, steps and a verify in one sequence, against HF's full forward."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from onebit_engine import load_target  # noqa: E402

from .hf_models import build, hf_logits  # noqa: E402
from .test_hf_target import HF_RTOL, rel  # noqa: E402

GEOMETRIES = {
    "gqa4-interval2": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16, linear_num_key_heads=4,
                           linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, full_attention_interval=2),
    "hd64-conv2-interval3": dict(num_attention_heads=2, num_key_value_heads=2, head_dim=64, linear_num_key_heads=1,
                                 linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=16,
                                 full_attention_interval=3, linear_conv_kernel_dim=2),
    "hidden48-vocab97": dict(hidden_size=48, intermediate_size=80, num_attention_heads=6, num_key_value_heads=3, head_dim=8,
                             linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=8,
                             linear_value_head_dim=12, vocab_size=97),
}
CASES = [("gqa4-interval2", "qwen3_5_text", 0.5), ("gqa4-interval2", "qwen3_next", 1.0),
         ("hd64-conv2-interval3", "qwen3_5_text", 1.0), ("hd64-conv2-interval3", "qwen3_next", 0.25),
         ("hidden48-vocab97", "qwen3_5_text", 0.25), ("hidden48-vocab97", "qwen3_next", 0.5)]


@pytest.mark.parametrize("geometry,model_type,prf", CASES, ids=[f"{g}-{m}-rot{p}" for g, m, p in CASES])
def test_other_geometries_match_hf(geometry, model_type, prf, tmp_path):
    seed = CASES.index((geometry, model_type, prf))
    hf = build(model_type, tmp_path, seed=seed, tied=bool(seed % 2), layers=5, geometry=GEOMETRIES[geometry],
               partial_rotary_factor=prf)
    target = load_target(tmp_path, row_set=8)
    vocab = GEOMETRIES[geometry].get("vocab_size", 128)
    toks = [int(t) for t in np.random.default_rng(seed).integers(0, vocab, 20)]
    st = target.new_state()
    prefill = target.forward(toks[:12], st).logits
    steps = np.stack([target.forward([t], st).logits[0] for t in toks[12:16]])
    verify = target.verify(toks[16:], st).logits
    got = np.concatenate([prefill, steps, verify])
    assert rel(got, hf_logits(hf, toks)) < HF_RTOL
