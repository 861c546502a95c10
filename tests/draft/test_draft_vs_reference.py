"""The numpy draft against the reference: the PyPI ``dflash`` 0.1.0 package (``dflash.model``, REF-NEW).

Both load the same seeded synthetic checkpoint folder (the reference through its own
``from_pretrained``, so this also pins the z-lab tensor layout), get the same context features and
blocks, and are driven round by round the way ``dflash.model.dflash_generate`` drives its draft
(DynamicCache with past recording, append [ctx_new; block], crop back to ``start``). float32 on both sides.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ref = pytest.importorskip("dflash.model")

from onebit_engine.draft import load_draft, write_synthetic_draft  # noqa: E402

from .draft_helpers import VOCAB, make_taps, make_target  # noqa: E402

DRAFT_HIDDEN_ATOL = 1e-5  # max |numpy - torch| of the final-normed block rows (float32 both sides)
DRAFT_LOGITS_ATOL = 1e-4  # logits are ~10x the hidden scale (lm_head gain 4, up to 32 terms)

# (new context rows, n_draft) per round: prefill of 7, then anchor + accepted drafts; the last rounds
# shrink the block (REF-NEW's min(B, remaining)).
ROUNDS = [(7, 5), (3, 5), (1, 5), (6, 5), (2, 3), (4, 1), (2, 5)]

CASES = {
    "v1-full": dict(version=1, num_layers=2),
    "v1-sliding-causal": dict(
        version=1, num_layers=3, sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
    "v2-conv-selector": dict(
        version=2, num_layers=2, sliding_window=5, is_causal=False,
        layer_types=["sliding_attention", "sliding_attention"],
        output_multiplier=0.6, final_logit_softcapping=6.0, input_embedding_scale=1.3,
    ),
}

def _reference(folder, version):
    cls = ref.DFlash2DraftModel if version == 2 else ref.DFlashDraftModel
    model, info = cls.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


def _ref_round(model, cache, head, embed, feats_new, block, start, scale):
    """One draft call exactly as dflash_generate makes it; returns (hidden [B', H], logits [n, V], tokens [n])."""
    b = block.shape[0]
    ids = torch.from_numpy(block)[None]
    noise = torch.nn.functional.embedding(ids, embed) * scale
    pos = torch.arange(start + b)[None]
    hidden = model(
        target_hidden=torch.from_numpy(feats_new)[None],
        noise_embedding=noise,
        position_ids=pos[:, start - feats_new.shape[0] : start + b],
        past_key_values=cache,
        use_cache=True,
    )
    ref._crop_to(cache, start)
    drafts = hidden[:, 1 - b :, :]
    logits = model.compute_logits(drafts, head)
    if isinstance(model, ref.DFlash2DraftModel):
        tokens = model.propose(drafts, ids[:, 0], head, 0.0)[0]
    else:
        tokens = torch.argmax(logits, dim=-1)
    return hidden[0].numpy(), logits[0].numpy(), tokens[0].numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_draft_matches_reference(case, tmp_path, ops):
    opts = CASES[case]
    tgt = make_target(seed=1)
    folder = write_synthetic_draft(tmp_path / case, tgt.config, block_size=6, seed=3, **opts)
    draft = load_draft(folder, tgt, ops=ops)
    model = _reference(folder, opts["version"])
    # Same per-layer mask rule on both sides (REF-NEW Qwen3DFlashAttention.__init__).
    assert [layer.self_attn.is_causal for layer in model.layers] == list(draft.config.causal)
    assert [layer.self_attn.sliding_window for layer in model.layers] == list(draft.config.windows)
    head = torch.nn.Linear(tgt.config.hidden_size, VOCAB, bias=False)
    head.weight.data = torch.from_numpy(tgt.lm_head_weight)
    embed = torch.from_numpy(tgt.embed_tokens)
    scale = float(opts.get("input_embedding_scale", 1.0))
    ids = list(draft.config.target_layer_ids)

    rng = np.random.default_rng(11)
    st = draft.new_state()
    cache = ref._make_cache(model.config)
    worst_h = worst_z = 0.0
    with torch.inference_mode():
        for n_ctx, n_draft in ROUNDS:
            taps = make_taps(rng, n_ctx)
            draft.append_context(st, taps)
            anchor = int(rng.integers(0, VOCAB - 1))
            p = draft.propose(st, anchor, n_draft)
            block = np.array([anchor] + [draft.config.mask_token_id] * n_draft, dtype=np.int64)
            feats = np.ascontiguousarray(taps[:, ids, :].reshape(n_ctx, -1))
            h_ref, z_ref, tok_ref = _ref_round(model, cache, head, embed, feats, block, st.length, scale)
            worst_h = max(worst_h, float(np.abs(p.hidden - h_ref).max()))
            worst_z = max(worst_z, float(np.abs(p.logits - z_ref).max()))
            np.testing.assert_array_equal(p.tokens, tok_ref, err_msg=f"{case}: draft tokens differ at context {st.length}")
    print(f"{case} [{ops}]: max|hidden diff| {worst_h:.3e}, max|logits diff| {worst_z:.3e}")
    assert worst_h <= DRAFT_HIDDEN_ATOL, f"{case}: hidden differs from the reference by {worst_h:.3e}"
    assert worst_z <= DRAFT_LOGITS_ATOL, f"{case}: logits differ from the reference by {worst_z:.3e}"


def test_window_really_matters(tmp_path):
    """Guard against a vacuous sliding case: the same weights without the window give other hidden rows."""
    tgt = make_target(seed=1)
    opts = dict(CASES["v1-sliding-causal"])
    hidden = []
    for window in (opts.pop("sliding_window"), None):
        folder = write_synthetic_draft(tmp_path / str(window), tgt.config, block_size=6, seed=3, sliding_window=window, **opts)
        draft = load_draft(folder, tgt)
        st = draft.new_state()
        draft.append_context(st, make_taps(np.random.default_rng(11), 9))
        hidden.append(draft.propose(st, 2, 5).hidden)
    assert np.abs(hidden[0] - hidden[1]).max() > 1e-2
