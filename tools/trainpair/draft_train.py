"""Stages 4 and 5: the draft's data (the float16 target's greedy continuations and residual taps),
its hyperparameters, training and the z-lab checkpoint folder. torch is imported inside the functions."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from .common import MASK_ID, SEED, VOCAB, lr_at
from .target_train import greedy_batch


def draft_hparams(target_cfg) -> dict:
    return {
        "hidden_size": target_cfg.hidden_size, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 48, "intermediate_size": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "target_layer_ids": [0, 1, 2], "block_size": 16, "mask_token_id": MASK_ID,
        "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 32, "selector_top_k": 8,
        "output_multiplier": 1.0, "final_logit_softcapping": 30.0,
    }


def draft_state_dict_for_file(draft) -> dict:
    """z-lab names (the table in docs/draft.md), codebooks without '.weight', float16."""
    import torch

    return {k: v.detach().to(torch.float16).contiguous() for k, v in draft.state_dict().items()}


def save_draft(draft, hp: dict, target_cfg, folder: Path) -> None:
    from safetensors.torch import save_file

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    save_file(draft_state_dict_for_file(draft), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(draft_config_json(hp, target_cfg), indent=2) + "\n")


def draft_config_json(hp: dict, target_cfg) -> dict:
    """The draft folder's config.json: HF qwen3 fields plus the z-lab ``dflash_config``."""
    return {
        "architectures": ["DFlash2DraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "hidden_size": hp["hidden_size"],
        "intermediate_size": hp["intermediate_size"],
        "num_hidden_layers": hp["num_hidden_layers"],
        "num_attention_heads": hp["num_attention_heads"],
        "num_key_value_heads": hp["num_key_value_heads"],
        "head_dim": hp["head_dim"],
        "layer_types": ["full_attention"] * hp["num_hidden_layers"],
        "is_causal": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_position_embeddings": 4096,
        "rms_norm_eps": hp["rms_norm_eps"],
        "rope_theta": hp["rope_theta"],
        "rope_parameters": {"rope_type": "default", "rope_theta": hp["rope_theta"]},
        "tie_word_embeddings": False,
        "vocab_size": target_cfg.vocab_size,
        "num_target_layers": target_cfg.num_hidden_layers,
        "dtype": "float16",
        "dflash_config": {
            "target_layer_ids": hp["target_layer_ids"],
            "mask_token_id": hp["mask_token_id"],
            "block_size": hp["block_size"],
            "conv_kernel_size": hp["conv_kernel_size"],
            "conv_group_size": hp["conv_group_size"],
            "selector_rank": hp["selector_rank"],
            "selector_top_k": hp["selector_top_k"],
            "output_multiplier": hp["output_multiplier"],
            "final_logit_softcapping": hp["final_logit_softcapping"],
            "is_causal": False,
        },
    }


def target_taps(model, seqs: np.ndarray, layer_ids: list[int], batch: int = 16) -> np.ndarray:
    """Residual stream after each layer in ``layer_ids`` (HF hidden_states[l + 1]), concatenated: [N, T, nf*H] f16."""
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            x = torch.from_numpy(seqs[i: i + batch].astype(np.int64))
            hs = model(input_ids=x, output_hidden_states=True).hidden_states
            out.append(torch.cat([hs[l + 1] for l in layer_ids], dim=-1).to(torch.float16).numpy())
    return np.concatenate(out)


def make_draft_data(model, stream: np.ndarray, n_seqs: int, prompt_len: int, gen_len: int, log) -> np.ndarray:
    """Prompts = random windows of the training stream; continuations = the target's greedy tokens."""
    rng = np.random.default_rng(SEED + 2)
    seqs = []
    t0 = time.time()
    bs = 64
    for i in range(0, n_seqs, bs):
        starts = rng.integers(0, len(stream) - prompt_len, size=min(bs, n_seqs - i))
        prompts = [stream[s: s + prompt_len].tolist() for s in starts]
        conts = greedy_batch(model, prompts, gen_len)
        seqs.extend(p + c for p, c in zip(prompts, conts))
        log(f"draft data: {len(seqs)}/{n_seqs} sequences {time.time() - t0:.0f}s")
    return np.asarray(seqs, dtype=np.int32)


def train_draft(target, seqs: np.ndarray, taps: np.ndarray, prompt_len: int, hp: dict, args, log):
    import torch

    from .draft_model import DraftModel

    torch.manual_seed(SEED + 3)
    draft = DraftModel(hp, VOCAB)
    n_params = sum(p.numel() for p in draft.parameters())
    log(f"draft: {n_params:,} parameters")
    embed = target.get_input_embeddings().weight.detach()
    head = target.lm_head.weight.detach()
    opt = torch.optim.AdamW(draft.parameters(), lr=args.draft_lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = np.random.default_rng(SEED + 4)
    B = hp["block_size"]
    N_seq, T = seqs.shape
    lo, hi = prompt_len - 1, T - B  # anchors whose next B-1 tokens are all the target's greedy output
    gamma = args.loss_gamma
    w = torch.exp(-torch.arange(B - 1, dtype=torch.float32) / gamma)  # weight of block row 1..B-1
    losses, sel_losses = [], []
    t0 = time.time()
    for step in range(args.draft_steps):
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step, args.draft_steps, args.draft_lr, 30)
        idx = rng.choice(N_seq, size=args.draft_batch, replace=False)
        nb = args.blocks_per_seq
        anchors = np.stack([np.sort(rng.choice(np.arange(lo, hi + 1), size=nb, replace=False)) for _ in idx])
        blen = rng.choice([4, 8, B, B], size=anchors.shape)  # shorter blocks = drafting k = 3 / 7
        block_loss, sel_loss = draft_losses(draft, embed, head, seqs[idx], taps[idx], anchors, blen, w)
        loss = block_loss + args.selector_weight * sel_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(block_loss))
        sel_losses.append(float(sel_loss))
        if step % 25 == 0 or step == args.draft_steps - 1:
            log(f"draft step {step:4d}/{args.draft_steps} block CE {np.mean(losses[-25:]):.3f} "
                f"selector CE {np.mean(sel_losses[-25:]):.3f} {time.time() - t0:.0f}s")
    draft.eval()
    return draft, losses, sel_losses, time.time() - t0, n_params


def draft_losses(draft, embed, head, seqs: np.ndarray, taps: np.ndarray, anchors: np.ndarray, blen: np.ndarray, w):
    """(block CE, selector CE) of one batch: blocks [anchor, MASK x (B-1)] at ``anchors`` with ``blen``
    rows against the true next tokens (weights ``w`` per row); the selector's candidates come from the
    detached logits and it is given the true predecessor."""
    import torch
    import torch.nn.functional as F

    B = w.shape[0] + 1
    nb = anchors.shape[1]
    toks = torch.from_numpy(seqs.astype(np.int64))
    feats = torch.from_numpy(taps.astype(np.float32))
    a_t = torch.from_numpy(anchors)
    bl_t = torch.from_numpy(blen)
    gather = a_t[..., None] + torch.arange(B)  # [N, nb, B]
    labels = torch.gather(toks[:, None, :].expand(-1, nb, -1), 2, gather)  # [N, nb, B]: anchor + true next B-1
    block_ids = torch.full_like(labels, MASK_ID)
    block_ids[..., 0] = labels[..., 0]
    hidden = draft(feats, F.embedding(block_ids, embed), a_t, bl_t)  # [N, nb, B, H]
    logits = draft.logits(hidden[:, :, 1:], head)  # [N, nb, B-1, V]
    valid = (torch.arange(1, B)[None, None, :] < bl_t[..., None]).float()  # row exists in this block
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), labels[:, :, 1:].reshape(-1), reduction="none").view_as(valid)
    wv = valid * w
    block_loss = (ce * wv).sum() / wv.sum()
    m = valid.bool().reshape(-1)
    hid = hidden[:, :, 1:].reshape(-1, hidden.shape[-1])[m]
    lg = logits.detach().reshape(-1, VOCAB)[m]
    prev = labels[:, :, :-1].reshape(-1)[m]
    true = labels[:, :, 1:].reshape(-1)[m]
    cand, score = draft.selector_scores(hid, lg, prev)
    hit = cand == true[:, None]
    has = hit.any(-1)
    sel_loss = F.cross_entropy(score[has], hit[has].float().argmax(-1)) if has.any() else score.sum() * 0
    return block_loss, sel_loss
