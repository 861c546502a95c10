"""Stage 3: the target (HF ``Qwen3_5ForCausalLM``): config, CE training on random windows, sequence-level
unlikelihood fine-tuning, float16 save / load, held-out loss and greedy continuation. torch is imported
inside the functions so the pieces without it (``repeated_ngram_mask``) load without torch."""
from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import numpy as np

from .common import EOT_ID, PAD_ID, SEED, VOCAB, every25, lr_at


def target_config(vocab: int):
    from transformers import Qwen3_5TextConfig

    n_layers = 4
    return Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=192, intermediate_size=512, num_hidden_layers=n_layers,
        layer_types=["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(n_layers)],
        num_attention_heads=4, num_key_value_heads=2, head_dim=48,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=48, linear_value_head_dim=48,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        bos_token_id=EOT_ID, eos_token_id=EOT_ID, pad_token_id=PAD_ID, initializer_range=0.02,
    )


def draw_windows(rng, stream: np.ndarray, prose_stream: np.ndarray | None, prose_share: float, n: int,
                 length: int) -> np.ndarray:
    """n random windows [n, length] of the training stream; each comes from the prose-only stream with
    probability prose_share (prose is ~7% of the mixed stream)."""
    src = [prose_stream if (prose_stream is not None and u < prose_share) else stream for u in rng.random(n)]
    return np.stack([s_[o: o + length] for s_, o in ((s_, rng.integers(0, len(s_) - length)) for s_ in src)])


def train_target(stream: np.ndarray, args, log, prose_stream: np.ndarray | None = None) -> tuple:
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(SEED)
    model = Qwen3_5ForCausalLM(target_config(VOCAB)).float()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"target: {n_params:,} parameters")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.target_lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(SEED + 1)
    T, B = args.seq_len, args.target_batch
    losses = []
    t0 = time.time()
    model.train()
    for step in range(args.target_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.target_steps, args.target_lr, args.warmup)
        x = torch.from_numpy(draw_windows(rng, stream, prose_stream, args.prose_share, B, T + 1).astype(np.int64))
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if step % 25 == 0 or step == args.target_steps - 1:
            log(f"target step {step:4d}/{args.target_steps} loss {np.mean(losses[-25:]):.3f} "
                f"lr {opt.param_groups[0]['lr']:.2e} {time.time() - t0:.0f}s")
    model.eval()
    return model, losses, time.time() - t0, n_params


def repeated_ngram_mask(seq: np.ndarray, start: int, n: int = 4) -> np.ndarray:
    """mask[t] = True for every token t >= start that belongs to an n-gram already seen earlier in seq
    (the candidates of sequence-level unlikelihood, Welleck et al. 2019)."""
    mask = np.zeros(len(seq), dtype=bool)
    seen: set[tuple] = set()
    for i in range(len(seq) - n + 1):
        g = tuple(int(v) for v in seq[i: i + n])
        if g in seen and i + n > start:
            mask[max(i, start): i + n] = True
        seen.add(g)
    return mask


def unlikelihood_finetune(model, stream: np.ndarray, args, log, prose_stream: np.ndarray | None = None) -> dict:
    """Sequence-level unlikelihood fine-tuning (Welleck et al. 2019, "Neural text generation with
    unlikelihood training"): greedy-continue short training windows, then lower the probability of every
    token that lies in a repeated 4-gram (-log(1 - p)), together with an ordinary next-token CE step on
    fresh windows so the language model is kept. This is what keeps greedy output of a tiny model varied."""
    import torch

    rng = np.random.default_rng(SEED + 5)
    opt = torch.optim.AdamW(model.parameters(), lr=args.ul_lr, betas=(0.9, 0.95), weight_decay=0.0)
    P, L, B, T = args.ul_prompt_len, args.ul_gen_len, args.ul_batch, args.seq_len
    ul_curve, ce_curve, rep_curve = [], [], []
    t0 = time.time()

    for step in range(args.ul_steps):
        prompts = draw_windows(rng, stream, prose_stream, args.prose_share, B, P)
        model.eval()
        cont = np.asarray(greedy_batch(model, prompts.tolist(), L), dtype=np.int64)
        seq = np.concatenate([prompts.astype(np.int64), cont], axis=1)  # [B, P + L]
        mask = np.stack([repeated_ngram_mask(s_, P) for s_ in seq])[:, 1:]  # targets 1..P+L-1
        model.train()
        x = torch.from_numpy(seq)
        logits = model(input_ids=x[:, :-1]).logits.float()
        p_tok = torch.softmax(logits, -1).gather(-1, x[:, 1:, None])[..., 0]
        m = torch.from_numpy(mask)
        ul = -(torch.log(torch.clamp(1.0 - p_tok, min=1e-5)) * m).sum() / max(1, int(m.sum()))
        d = torch.from_numpy(draw_windows(rng, stream, prose_stream, args.prose_share, args.target_batch,
                                          T + 1).astype(np.int64))
        dl = model(input_ids=d[:, :-1]).logits
        ce = torch.nn.functional.cross_entropy(dl.reshape(-1, dl.shape[-1]), d[:, 1:].reshape(-1))
        (ce + args.ul_weight * ul).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ul_curve.append(float(ul.detach()))
        ce_curve.append(float(ce.detach()))
        rep_curve.append(float(mask[:, P - 1:].mean()))
        if step % 25 == 0 or step == args.ul_steps - 1:
            log(f"unlikelihood step {step:4d}/{args.ul_steps} repeated share {np.mean(rep_curve[-25:]):.3f} "
                f"UL {np.mean(ul_curve[-25:]):.3f} CE {np.mean(ce_curve[-25:]):.3f} {time.time() - t0:.0f}s")
    model.eval()
    return {"seconds": time.time() - t0, "ul_curve": every25(ul_curve), "ce_curve": every25(ce_curve),
            "repeated_share_curve": every25(rep_curve)}


def save_target(model, folder: Path) -> None:
    """save_pretrained, then every tensor to float16 (our loader reads F16)."""
    import torch
    from safetensors.torch import load_file, save_file

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tensors = {}
    for f in sorted(tmp.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    tensors = {k: v.to(torch.float16).contiguous() for k, v in sorted(tensors.items())}
    cfg = json.loads((tmp / "config.json").read_text())
    cfg["dtype"] = "float16"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(tmp)


def load_target_torch(folder: Path):
    import torch
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    return model.eval()


def heldout_loss(model, stream: np.ndarray, seq_len: int, max_windows: int) -> dict:
    """Mean next-token CE over non-overlapping windows of the held-out stream (each token scored once)."""
    import torch

    n = min(max_windows, (len(stream) - 1) // seq_len)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, 8):
            rows = [stream[j * seq_len: j * seq_len + seq_len + 1] for j in range(i, min(n, i + 8))]
            x = torch.from_numpy(np.stack(rows).astype(np.int64))
            logits = model(input_ids=x[:, :-1]).logits
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
            total += float(ce)
            count += x[:, 1:].numel()
    loss = total / max(count, 1)
    return {"loss": loss, "perplexity": math.exp(loss), "tokens": count}


def greedy_batch(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy continuation of equal-length prompts (HF forward with cache, one token a step; never stops at EOS)."""
    import torch

    lens = {len(p) for p in prompts}
    assert len(lens) == 1, "greedy_batch needs equal-length prompts"
    cur = torch.tensor(prompts, dtype=torch.long)
    past, out = None, []
    with torch.no_grad():
        for _ in range(new_tokens):
            o = model(input_ids=cur, past_key_values=past, use_cache=True, logits_to_keep=1)
            past = o.past_key_values
            cur = o.logits[:, -1].argmax(-1, keepdim=True)
            out.append(cur)
    return torch.cat(out, dim=1).tolist()


def greedy_one(model, prompt: list[int], new_tokens: int) -> list[int]:
    return greedy_batch(model, [prompt], new_tokens)[0]
