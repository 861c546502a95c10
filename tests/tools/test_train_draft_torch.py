"""The torch draft that tools/trainpair trains is the draft the engine runs.

A small random DFlash 2 draft is built in torch, rounded and saved by the package's own ``save_draft``,
loaded by the engine's ``load_draft`` against a tiny target with the same embedding table and lm_head,
and both are run on the same context taps and anchors: final-normed hidden rows, logits and the
selector walk's tokens must agree. The torch side runs several blocks in one call (the training path)
while the engine runs one block against its cached context, so the two also pin each other's masking.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from onebit_engine import Target, load_draft  # noqa: E402
from onebit_engine.hybrid.synthetic import random_weights, tiny_config  # noqa: E402
from trainpair.common import round_to_f16_  # noqa: E402  (tools/ is on sys.path: conftest.py)
from trainpair.draft_model import DraftModel  # noqa: E402
from trainpair.draft_train import save_draft  # noqa: E402
from trainpair.evaluate import draft_walk  # noqa: E402

# Same float16-rounded weights on both sides, both computing in float32, but not bitwise equal: the
# GEMMs (torch's matmul vs the engine's 8-row BLAS blocks), attention (SDPA vs the engine's per-row
# softmax) and the norms sum in different orders. Measured max |diff|: 9e-6 on the hidden rows (|h| <= 5),
# 6e-5 on the logits (|z| ~ 20); a wrong sign, norm or mask moves them by 1e-1 or more. A logit's rounding
# error scales with its row's largest terms, not with its own size (a logit near 0 is a sum of terms of
# +-20): so the logits' bound is relative to the row's largest |logit| (5.4e-5 measured on a logit of 0.34
# in a row of |z| <= 26 on Zen 5, torch 2.13, where a fixed 5e-5 failed).
ATOL = 5e-5
RTOL = 1e-5
LOGIT_ATOL_PER_MAX = 5e-6  # x max |logit| of the block: ~1.3e-4 at |z| ~ 26

VOCAB, HIDDEN, TARGET_LAYERS = 96, 32, 4
HP = {
    "hidden_size": HIDDEN, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "intermediate_size": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "target_layer_ids": [0, 1, 3], "block_size": 8, "mask_token_id": 2, "conv_kernel_size": 2,
    "conv_group_size": 4, "selector_rank": 8, "selector_top_k": 4, "output_multiplier": 1.0,
    "final_logit_softcapping": 30.0,
}
CONTEXT = 20
ANCHORS = (3, 9, 14)  # positions; block j sees context 0..ANCHORS[j]-1
N_DRAFT = 5


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(torch draft, engine draft, embed [V, H], lm_head [V, H]) on the same weights."""
    cfg = tiny_config(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=TARGET_LAYERS)
    weights = random_weights(cfg, seed=0, scale=8.0)  # logits of tens: the softcap (30) bends them
    target = Target(cfg, weights)
    torch.manual_seed(0)
    draft = DraftModel(HP, VOCAB)
    with torch.no_grad():  # off the init (unit norms, identity conv) so every weight matters
        for p in draft.parameters():
            p.add_(0.2 * torch.randn_like(p))
    round_to_f16_(draft)  # what save_draft stores, so both sides hold the same numbers
    folder = tmp_path_factory.mktemp("draft")
    save_draft(draft, HP, cfg, folder)
    engine = load_draft(folder, target, ops="numpy")
    return draft.eval(), engine, weights["model.embed_tokens.weight"], weights["lm_head.weight"]


def torch_blocks(draft, embed, head, taps, anchor_tokens, width: int):
    """All ANCHORS blocks in one call, ``width`` rows each of which the first N_DRAFT + 1 exist."""
    nb = len(ANCHORS)
    feats = torch.from_numpy(taps[:, HP["target_layer_ids"]].reshape(1, CONTEXT, -1))
    ids = torch.full((1, nb, width), HP["mask_token_id"], dtype=torch.long)
    ids[0, :, 0] = torch.tensor(anchor_tokens)
    emb = torch.nn.functional.embedding(ids, torch.from_numpy(embed))
    with torch.no_grad():
        hidden = draft(feats, emb, torch.tensor([ANCHORS]), torch.full((1, nb), N_DRAFT + 1))[0, :, : N_DRAFT + 1]
        logits = draft.logits(hidden[:, 1:], torch.from_numpy(head))
        tokens = [draft_walk(draft, hidden[j, 1:], logits[j], a) for j, a in enumerate(anchor_tokens)]
    return hidden.numpy(), logits.numpy(), tokens


@pytest.mark.parametrize("width", [N_DRAFT + 1, HP["block_size"]], ids=["eval-blocks", "training-blocks"])
def test_torch_draft_matches_the_engine_draft(pair, width):
    draft, engine, embed, head = pair
    rng = np.random.default_rng(1)
    taps = (2.0 * rng.standard_normal((CONTEXT, TARGET_LAYERS, HIDDEN))).astype(np.float32)
    anchor_tokens = [int(t) for t in rng.integers(3, VOCAB, len(ANCHORS))]
    hidden, logits, tokens = torch_blocks(draft, embed, head, taps, anchor_tokens, width)
    for j, (s, a) in enumerate(zip(ANCHORS, anchor_tokens)):
        state = engine.new_state()
        engine.append_context(state, taps[:s])
        prop = engine.propose(state, a, N_DRAFT)
        np.testing.assert_allclose(prop.hidden, hidden[j], rtol=RTOL, atol=ATOL, err_msg=f"hidden, block {j}")
        np.testing.assert_allclose(prop.logits, logits[j], rtol=RTOL, atol=LOGIT_ATOL_PER_MAX * float(np.abs(logits[j]).max()),
                                   err_msg=f"logits, block {j}")
        assert prop.tokens.tolist() == tokens[j], f"selector walk, block {j}"
