"""The DFlash 2 draft in torch (z-lab layout, docs/draft.md), the module stage 5 trains.

Parameter names are the checkpoint's tensor names, so ``draft_train.save_draft`` writes the state dict
as it is. It runs many blocks of many sequences in one call (training); the engine's numpy draft
(``onebit_engine.draft.Draft``) runs one block against a cached context. The two are held together by
tests/tools/test_train_draft_torch.py.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Qwen3RMSNorm: w * (x / rms(x)), fp32 inside."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def grouped_conv(y, dyn, base, group: int):
    """One side of the conv. y [M, B, H] (rows of one block, causal over rows, row 0 zero-padded);
    dyn [M, B, K, G]; base [K, H]."""
    out = torch.zeros_like(y)
    for o in range(base.shape[0]):
        shifted = y if o == 0 else F.pad(y[:, :-o], (0, 0, o, 0))
        out = out + base[o] * shifted + dyn[:, :, o].repeat_interleave(group, dim=-1) * shifted
    return out


class DynamicConv(nn.Module):
    """GroupedDynamicCausalConv: ``prepare`` wraps a sublayer's input, ``finish`` its output."""

    def __init__(self, hidden: int, kernel: int, group: int):
        super().__init__()
        self.kernel, self.group, self.groups = kernel, group, hidden // group
        base = torch.zeros(2, kernel, hidden)
        base[:, 0, :] = 1.0  # identity at init
        self.base_kernel = nn.Parameter(base)
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * self.groups, bias=False)
        nn.init.normal_(self.kernel_projection.weight, std=0.002)

    def prepare(self, x):
        dyn = self.kernel_projection(x).view(*x.shape[:-1], 2, self.kernel, self.groups)
        return grouped_conv(x, dyn[..., 0, :, :], self.base_kernel[0], self.group), dyn[..., 1, :, :]

    def finish(self, y, dyn1):
        return grouped_conv(y, dyn1, self.base_kernel[1], self.group)


def rope(x, pos, inv_freq):
    """x [..., T, hd] with pos [..., T] (rotate-half, angles in fp32)."""
    hd = x.shape[-1]
    ang = pos.float()[..., None] * inv_freq
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    """Qwen3 attention (q/k norm, then RoPE) of block rows over [context; block] keys (KV injection)."""

    def __init__(self, hp: dict):
        super().__init__()
        H, hd = hp["hidden_size"], hp["head_dim"]
        self.nh, self.nkv, self.hd = hp["num_attention_heads"], hp["num_key_value_heads"], hd
        self.q_proj = nn.Linear(H, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, hp["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, hp["rms_norm_eps"])
        # a plain tensor, not a buffer: the checkpoint holds no rope table
        self.inv_freq = 1.0 / (hp["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def forward(self, x, c, ctx_pos, blk_pos, mask):
        """x [N, L, H] block rows at blk_pos [N, L]; c [N, T, H] context at ctx_pos [N, T]; mask [N, 1, L, T + L]."""
        N, L, _ = x.shape
        T = c.shape[1]
        nh, nkv, hd = self.nh, self.nkv, self.hd
        q = rope(self.q_norm(self.q_proj(x).view(N, L, nh, hd)).transpose(1, 2), blk_pos[:, None], self.inv_freq)
        kb = self.k_norm(self.k_proj(x).view(N, L, nkv, hd)).transpose(1, 2)
        kc = self.k_norm(self.k_proj(c).view(N, T, nkv, hd)).transpose(1, 2)
        k = torch.cat([rope(kc, ctx_pos[:, None], self.inv_freq), rope(kb, blk_pos[:, None], self.inv_freq)], dim=2)
        v = torch.cat([self.v_proj(c).view(N, T, nkv, hd), self.v_proj(x).view(N, L, nkv, hd)], dim=1).transpose(1, 2)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=hd ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(N, L, nh * hd))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    """Pre-norm decoder layer; DFlash 2 wraps both sublayers in a grouped dynamic conv."""

    def __init__(self, hp: dict):
        super().__init__()
        H, eps = hp["hidden_size"], hp["rms_norm_eps"]
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.self_attn = Attention(hp)
        self.mlp = MLP(H, hp["intermediate_size"])
        self.attention_conv = DynamicConv(H, hp["conv_kernel_size"], hp["conv_group_size"])
        self.mlp_conv = DynamicConv(H, hp["conv_kernel_size"], hp["conv_group_size"])

    def forward(self, h, c, ctx_pos, blk_pos, mask, B: int):
        """h [N, nb*B, H] block rows (each conv runs over the B rows of its own block)."""
        N, L, H = h.shape
        x = self.input_layernorm(h)
        x, dyn_a = self.attention_conv.prepare(x.view(N * L // B, B, H))
        o = self.self_attn(x.reshape(N, L, H), c, ctx_pos, blk_pos, mask)
        o = self.attention_conv.finish(o.view(N * L // B, B, H), dyn_a).reshape(N, L, H)
        h = h + o
        x = self.post_attention_layernorm(h)
        x, dyn_m = self.mlp_conv.prepare(x.view(N * L // B, B, H))
        m = self.mlp_conv.finish(self.mlp(x), dyn_m).reshape(N, L, H)
        return h + m


class Selector(nn.Module):
    """The candidate selector's weights (its scores: ``DraftModel.selector_scores``)."""

    def __init__(self, hidden: int, rank: int, vocab: int):
        super().__init__()
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.randn(vocab, rank) * 0.5)
        self.successor_codebook = nn.Parameter(torch.randn(vocab, rank) * 0.5)
        nn.init.normal_(self.hidden_projection.weight, std=0.1 / math.sqrt(hidden))


def block_mask(T: int, anchors, block_len, B: int):
    """[N, 1, nb*B, T + nb*B]: block j of sequence n sees context keys p < anchors[n, j] and the first
    block_len[n, j] rows of its own block (bidirectional)."""
    N, nb = anchors.shape
    row = torch.arange(B)
    ctx_vis = torch.arange(T)[None, None, :] < anchors.repeat_interleave(B, dim=1)[..., None]
    same = torch.eye(nb, dtype=torch.bool).repeat_interleave(B, 0).repeat_interleave(B, 1)  # [nbB, nbB]
    key_ok = (row[None, None, :] < block_len[..., None]).reshape(N, 1, nb * B)  # key row exists
    blk_vis = same[None] & key_ok
    return torch.cat([ctx_vis, blk_vis], dim=-1)[:, None]


class DraftModel(nn.Module):
    """The whole draft; ``hp`` is ``draft_train.draft_hparams`` (the dflash_config of the saved config.json)."""

    def __init__(self, hp: dict, vocab: int):
        super().__init__()
        H = hp["hidden_size"]
        self.top_k = hp["selector_top_k"]
        self.output_multiplier, self.softcap = hp["output_multiplier"], hp["final_logit_softcapping"]
        self.fc = nn.Linear(len(hp["target_layer_ids"]) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, hp["rms_norm_eps"])
        self.layers = nn.ModuleList([Layer(hp) for _ in range(hp["num_hidden_layers"])])
        self.norm = RMSNorm(H, hp["rms_norm_eps"])
        self.candidate_selector = Selector(H, hp["selector_rank"], vocab)
        conv_out = 2 * hp["conv_kernel_size"] * (H // hp["conv_group_size"])
        for mod in [self.fc] + [m for m in self.layers.modules() if isinstance(m, nn.Linear)]:
            if mod.weight.shape[0] != conv_out:  # the kernel projections keep their small init
                nn.init.normal_(mod.weight, std=0.02)

    def forward(self, feats, block_emb, anchors, block_len):
        """feats [N, T, nf*H] (taps of positions 0..T-1); block_emb [N, nb, B, H]; anchors [N, nb] (positions);
        block_len [N, nb] (rows of each block that exist, 2..B). Returns final-normed hidden [N, nb, B, H].

        Block j of sequence n sees context keys p < anchors[n, j] and its own first block_len rows
        (bidirectional: is_causal false), exactly one draft call (docs/draft.md, "What one round computes") per block."""
        N, T, _ = feats.shape
        _, nb, B, H = block_emb.shape
        c = self.hidden_norm(self.fc(feats))  # [N, T, H]
        ctx_pos = torch.arange(T)[None].expand(N, T)
        blk_pos = (anchors[..., None] + torch.arange(B)).reshape(N, nb * B)
        mask = block_mask(T, anchors, block_len, B)
        h = block_emb.reshape(N, nb * B, H)
        for layer in self.layers:
            h = layer(h, c, ctx_pos, blk_pos, mask, B)
        return self.norm(h).view(N, nb, B, H)

    def logits(self, hidden, head_weight):
        z = (hidden @ head_weight.T) * self.output_multiplier
        cap = self.softcap
        if cap:
            z = torch.tanh(z / cap) * cap
        return z

    def selector_scores(self, hidden, logits, prev):
        """hidden [M, H], logits [M, V], prev [M] -> (cand [M, k], score [M, k])."""
        s = self.candidate_selector
        unary, cand = torch.topk(logits, self.top_k, dim=-1)
        hp_ = s.hidden_projection(hidden)
        pair = ((s.predecessor_codebook[prev] * hp_)[:, None, :] * s.successor_codebook[cand]).sum(-1)
        return cand, unary + pair
