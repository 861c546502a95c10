"""Mixture-of-experts targets against HF transformers (torch on the CPU): qwen3_next and qwen3_5_moe.

Same fp32 bound as the dense oracle (``HF_RTOL`` of test_hf_target.py). Cases cover top-2 of 4 experts
and top-3 of 6, the shared expert on and off, norm_topk_prob on and off, a dense layer among sparse ones,
both expert layouts save_pretrained writes (per-expert by default, fused 3-D with
save_original_format=False), sharded files and the VL wrapper.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from onebit_engine import load_target  # noqa: E402
from onebit_engine.ops.moe import route  # noqa: E402

from .hf_models import hf_logits  # noqa: E402
from .hf_moe_models import MoeCase, build_moe  # noqa: E402
from .test_hf_target import HF_RTOL, rel  # noqa: E402

CASES = [
    MoeCase("qwen3_next", shared=48, norm_topk_prob=True, mlp_only_layers=(1,)),
    MoeCase("qwen3_next", shared=0, norm_topk_prob=False, mlp_only_layers=(0,), fused=True, shard=True),
    MoeCase("qwen3_next", experts=6, top_k=3, shared=48, norm_topk_prob=False, tied=True),
    MoeCase("qwen3_5_moe_text", shared=48),
    MoeCase("qwen3_5_moe_text", shared=0, fused=True, tied=True),
    MoeCase("qwen3_5_moe", shared=48, shard=True),
    MoeCase("qwen3_5_moe", experts=6, top_k=3, shared=0, fused=True),
]


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def pair(request, tmp_path_factory):
    case = request.param
    folder = tmp_path_factory.mktemp(case.id)
    hf = build_moe(case, folder, seed=5)
    return case, hf, folder


@pytest.mark.parametrize("backend_rs", [("reference", 8), ("reference", 4)], ids=["rs8", "rs4"])
def test_moe_prefill_step_verify_commit_match_hf(pair, backend_rs):
    case, hf, folder = pair
    backend, rs = backend_rs
    target = load_target(folder, backend=backend, row_set=rs)
    assert target.config.moe is not None and target.config.moe.num_experts == case.experts
    sparse = [i for i in range(4) if target.config.is_sparse(i)]
    assert sparse == [i for i in range(4) if i not in case.mlp_only_layers]
    rng = np.random.default_rng(11)
    seq = rng.integers(0, 128, 40).tolist()
    ref = hf_logits(hf, seq)
    st = target.new_state()
    pre = target.forward(seq[:19], st).logits
    steps = np.stack([target.forward([t], st).logits[0] for t in seq[19:25]])
    ver = target.verify(seq[25:30], st).logits
    target.commit(st, 2, path="keep")
    alt = [int(rng.integers(0, 128)), int(rng.integers(0, 128))]
    after = target.forward(alt, st).logits
    ref_alt = hf_logits(hf, seq[:27] + alt)
    diffs = {"prefill": rel(pre, ref[:19]), "step": rel(steps, ref[19:25]), "verify": rel(ver, ref[25:30]),
             "after_partial_commit": rel(after, ref_alt[27:29])}
    print(f"\n{case.id} rs={rs} max rel diff vs HF: {diffs}")
    assert max(diffs.values()) < HF_RTOL, diffs


def test_moe_greedy_continuation_matches_hf(pair):
    case, hf, folder = pair
    target = load_target(folder)
    prompt = [3, 17, 42, 99, 5, 64, 11]
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
    st = target.new_state()
    logits = target.forward(prompt, st).logits[-1]
    got, margins = [], []
    for _ in range(16):
        top2 = np.sort(logits)[-2:]
        margins.append(float(top2[1] - top2[0]))
        got.append(int(np.argmax(logits)))
        logits = target.forward([got[-1]], st).logits[0]
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if first is not None:
        assert margins[first] < 1e-4, f"diverged at {first} with margin {margins[first]}: {got} vs {want}"


@pytest.mark.parametrize("experts,k", [(4, 2), (8, 3), (64, 8), (512, 10)])
def test_route_matches_torch_topk_on_distinct_probabilities(experts, k):
    """The engine's router == HF's (softmax in float32, torch.topk, renormalised) when no two
    probabilities tie: the same experts in the same order, weights within float32 rounding."""
    logits = np.random.default_rng(experts).standard_normal((16, experts)).astype(np.float32) * 3
    for norm in (True, False):
        idx, w = route(logits, k, norm)
        p = torch.softmax(torch.from_numpy(logits), dim=-1, dtype=torch.float)
        tv, ti = torch.topk(p, k, dim=-1)
        if norm:
            tv = tv / tv.sum(dim=-1, keepdim=True)
        assert np.array_equal(idx, ti.numpy())
        np.testing.assert_allclose(w, tv.numpy(), rtol=1e-6, atol=0)  # a few ulps: sums in another order


def test_topk_ties_torch_order_is_unspecified_engine_takes_lowest_ids():
    """What ops/moe.py documents: torch.topk on CPU does not return tied values lowest-index first (the
    order depends on its selection algorithm); the engine takes the lowest expert ids, per row alone."""
    four = torch.full((1, 4), 0.25)
    assert torch.topk(four, 2).indices.tolist() == [[2, 3]]
    assert torch.topk(torch.full((1, 64), 0.5), 8).indices.tolist()[0] != list(range(8))
    logits = np.zeros((3, 4), np.float32)
    logits[1] = [0.0, 1.0, 1.0, 1.0]  # three tied, two of them chosen
    logits[2] = [2.0, 1.0, 1.0, 0.0]  # a tie at the boundary
    idx, w = route(logits, 2, True)
    assert idx.tolist() == [[0, 1], [1, 2], [0, 1]]
    np.testing.assert_array_equal(w[0], [0.5, 0.5])
    for r in range(3):  # a row's choice does not depend on the other rows
        assert route(logits[r : r + 1], 2, True)[0].tolist() == [idx[r].tolist()]
