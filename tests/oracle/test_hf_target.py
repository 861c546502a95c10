"""The target against HF transformers (torch on the CPU): the outside reference for the math.

Tolerance: both sides are float32 but sum in different orders (BLAS vs torch, chunked vs recurrent
delta rule), so logits agree to ~1e-6 relative, not bitwise. HF_RTOL is the named bound.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from onebit_engine import load_target  # noqa: E402

from .hf_models import build, hf_logits  # noqa: E402

HF_RTOL = 2e-5  # max |diff| / max |logit|
CASES = [("qwen3_5_text", False), ("qwen3_5_text", True), ("qwen3_5", False), ("qwen3_5", True), ("qwen3_next", False), ("qwen3_next", True)]
MEASURED: dict[str, float] = {}


def rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{'tied' if t else 'untied'}" for m, t in CASES])
def pair(request, tmp_path_factory):
    model_type, tied = request.param
    folder = tmp_path_factory.mktemp(f"{model_type}-{tied}")
    hf = build(model_type, folder, seed=3, tied=tied)
    return request.param, hf, load_target(folder, row_set=8)


def test_prefill_step_verify_commit_match_hf(pair):
    (model_type, tied), hf, target = pair
    rng = np.random.default_rng(7)
    seq = rng.integers(0, 128, 40).tolist()
    ref = hf_logits(hf, seq)
    st = target.new_state()
    pre = target.forward(seq[:19], st).logits  # prefill: > 2 row sets, ragged
    steps = np.stack([target.forward([t], st).logits[0] for t in seq[19:25]])
    ver = target.verify(seq[25:30], st).logits  # verify of 5 rows
    target.commit(st, 2, path="keep")  # keep rows 25, 26
    alt = [int(rng.integers(0, 128)), int(rng.integers(0, 128))]
    after = target.forward(alt, st).logits
    ref_alt = hf_logits(hf, seq[:27] + alt)
    diffs = {
        "prefill": rel(pre, ref[:19]), "step": rel(steps, ref[19:25]), "verify": rel(ver, ref[25:30]),
        "after_partial_commit": rel(after, ref_alt[27:29]),
    }
    MEASURED[f"{model_type}-{tied}"] = max(diffs.values())
    print(f"\n{model_type} tied={tied} max rel diff vs HF: {diffs}")
    assert max(diffs.values()) < HF_RTOL, diffs


def test_greedy_continuation_matches_hf(pair):
    (model_type, tied), hf, target = pair
    prompt = [3, 17, 42, 99, 5, 64, 11]
    with torch.no_grad():
        gen = hf.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, pad_token_id=0)
    want = gen[0, len(prompt):].tolist()
    st = target.new_state()
    logits = target.forward(prompt, st).logits[-1]
    got, margins = [], []
    for _ in range(24):
        top2 = np.sort(logits)[-2:]
        margins.append(float(top2[1] - top2[0]))
        tok = int(np.argmax(logits))
        got.append(tok)
        logits = target.forward([tok], st).logits[0]
    # tokens must agree wherever the choice was not a near tie (a 1e-6 flip there is not a bug)
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if first is not None:
        assert margins[first] < 1e-4, f"diverged at {first} with margin {margins[first]}: {got} vs {want}"
