"""Stage 6 (torch side): distinct 4-grams, the selector walk and teacher-forced acceptance."""
from __future__ import annotations

import numpy as np

from .common import MASK_ID
from .draft_train import target_taps


def distinct4(tokens: list[int]) -> float:
    grams = [tuple(tokens[i: i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / max(1, len(grams))


def draft_walk(draft, hidden_rows, logits_rows, anchor: int) -> list[int]:
    """Greedy selector walk (docs/draft.md, "DFlash 2 additions") for one block: hidden [n, H], logits [n, V]."""
    import torch

    s = draft.candidate_selector
    unary, cand = torch.topk(logits_rows, draft.top_k, dim=-1)
    hp_ = s.hidden_projection(hidden_rows)
    prev, out = anchor, []
    for t in range(hidden_rows.shape[0]):
        score = unary[t] + ((s.predecessor_codebook[prev] * hp_[t])[None, :] * s.successor_codebook[cand[t]]).sum(-1)
        prev = int(cand[t, int(torch.argmax(score))])
        out.append(prev)
    return out


def teacher_forced_acceptance(target, draft, hp: dict, prompts: list[list[int]], conts: list[list[int]], ks) -> dict:
    """For every anchor in the target's greedy continuation: how many drafted tokens in a row equal the
    target's greedy tokens (block [anchor, MASK x k], context = all earlier positions)."""
    import torch

    res = {}
    with torch.no_grad():
        for k in ks:
            acc = []
            for p, c in zip(prompts, conts):
                acc.extend(accepted_per_anchor(target, draft, hp, p, p + c, k))
            acc = np.asarray(acc)
            res[str(k)] = {
                "anchors": int(len(acc)),
                "mean_accepted": float(acc.mean()),
                "tokens_per_round": float(1 + acc.mean()),
                "acceptance_by_position": [float((acc >= i).mean()) for i in range(1, k + 1)],
            }
    return res


def accepted_per_anchor(target, draft, hp: dict, p: list[int], seq: list[int], k: int) -> list[int]:
    """Accepted draft tokens (0..k) at every anchor of ``seq`` from the prompt ``p``'s last token on."""
    import torch
    import torch.nn.functional as F

    embed = target.get_input_embeddings().weight.detach()
    head = target.lm_head.weight.detach()
    taps = torch.from_numpy(target_taps(target, np.asarray([seq], np.int32), hp["target_layer_ids"]).astype(np.float32))
    anchors = list(range(len(p) - 1, len(seq) - k))
    acc = []
    for i in range(0, len(anchors), 32):
        a = torch.tensor([anchors[i: i + 32]])
        nb = a.shape[1]
        ids = torch.full((1, nb, k + 1), MASK_ID, dtype=torch.long)
        ids[0, :, 0] = torch.tensor([seq[s] for s in a[0].tolist()])
        hidden = draft(taps, F.embedding(ids, embed), a, torch.full((1, nb), k + 1))
        logits = draft.logits(hidden[:, :, 1:], head)
        for j, s in enumerate(a[0].tolist()):
            toks = draft_walk(draft, hidden[0, j, 1:], logits[0, j], seq[s])
            n = 0
            while n < k and toks[n] == seq[s + 1 + n]:
                n += 1
            acc.append(n)
    return acc
