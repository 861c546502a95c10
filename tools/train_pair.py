#!/usr/bin/env python
"""Train the built-in target + DFlash 2 draft pair that ships in ``src/onebit_engine/data/builtin/``.

One command, CPU torch, seeded (see docs/trained-pair.md)::

    /work/venv/bin/python tools/train_pair.py            # everything: data, tokenizer, target, draft, eval
    /work/venv/bin/python tools/train_pair.py --quick    # a smoke run into a scratch folder (minutes)

Stages (all in this file, in order):

1. data       Python standard library source of *this* interpreter (rule + per-file sha256 in
              TRAINING.json) and prose (the ``pydoc_data.topics`` reference texts of the same stdlib,
              and Debian's /usr/share/common-licenses). A fixed hash rule holds files out (never trained on).
2. tokenizer  byte-level BPE (``tokenizers``), 4096 ids, specials <|endoftext|>=0 <|pad|>=1 <|mask|>=2.
              By default the shipped data/builtin/tokenizer.json is reused (prompts and tests depend on its
              ids); --retrain-tokenizer trains it again from the training documents.
3. target     HF transformers ``Qwen3_5ForCausalLM`` (Gated DeltaNet x3 + gated attention x1), trained
              on random 256-token windows, then rounded to float16 (what ships).
4. draft data the float16-rounded target greedily continues prompts cut from the training text; its
              residual taps (after layers ``target_layer_ids``) are recorded (DFlash training data).
5. draft      DFlash 2 (z-lab layout): block CE on [anchor, MASK x (B-1)] against the target's greedy
              continuation + selector CE over the top-k candidates given the true predecessor.
6. eval       held-out loss / perplexity; greedy continuations of held-out prompts (distinct 4-grams);
              teacher-forced acceptance at k = 3, 7, 15 (torch); all written to TRAINING.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BUILTIN = REPO / "src" / "onebit_engine" / "data" / "builtin"
PROMPTS_JSON = REPO / "src" / "onebit_engine" / "data" / "prompts" / "default.json"

SEED = 20261130
SPECIALS = ["<|endoftext|>", "<|pad|>", "<|mask|>"]
EOT_ID, PAD_ID, MASK_ID = 0, 1, 2
VOCAB = 4096

# ---- data rule -------------------------------------------------------------------------------------
EXCLUDED_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__", "lib-dynload", "encodings"}
EXCLUDED_PREFIXES = ("config-", "_sysconfigdata")
PROSE_TOPICS_FILE = "pydoc_data/topics.py"  # prose, not code
LICENSES_DIR = Path("/usr/share/common-licenses")
HELDOUT_LICENSES = ("Artistic", "CC0-1.0")
HELDOUT_MOD = 10  # a file / topic is held out iff int(sha256(name)) % 10 == 0


def held_out(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % HELDOUT_MOD == 0


def sha256_text(t: str) -> str:
    return hashlib.sha256(t.encode("utf-8")).hexdigest()


def collect_data() -> dict:
    """Every document, split into train / held-out, with the manifest that pins them."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code_train, code_held = [], []
    files = []
    for p in sorted(stdlib.rglob("*.py")):
        rel = p.relative_to(stdlib).as_posix()
        parts = rel.split("/")
        if any(d in EXCLUDED_DIRS for d in parts[:-1]) or parts[0].startswith(EXCLUDED_PREFIXES):
            continue
        if parts[-1].startswith(EXCLUDED_PREFIXES) or rel == PROSE_TOPICS_FILE:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if not text.strip():
            continue
        h = held_out(rel)
        files.append({"path": rel, "sha256": sha256_text(text), "chars": len(text), "held_out": h})
        (code_held if h else code_train).append((rel, text))
    ns: dict = {}
    exec(compile((stdlib / PROSE_TOPICS_FILE).read_text(encoding="utf-8"), PROSE_TOPICS_FILE, "exec"), ns)
    topics = ns["topics"]
    prose_train, prose_held, prose_items = [], [], []
    for key in sorted(topics):
        text = topics[key].strip() + "\n"
        h = held_out("topic:" + key)
        prose_items.append({"source": f"pydoc_data.topics[{key!r}]", "sha256": sha256_text(text), "chars": len(text), "held_out": h})
        (prose_held if h else prose_train).append((f"topic:{key}", text))
    seen = set()
    for p in sorted(LICENSES_DIR.iterdir()) if LICENSES_DIR.is_dir() else []:
        real = p.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        text = real.read_text(encoding="utf-8", errors="replace")
        h = p.name in HELDOUT_LICENSES
        prose_items.append({"source": str(real), "sha256": sha256_text(text), "chars": len(text), "held_out": h})
        (prose_held if h else prose_train).append((f"license:{p.name}", text))
    manifest_hash = hashlib.sha256("".join(f["path"] + f["sha256"] for f in files).encode()).hexdigest()
    manifest = {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "stdlib_dir": str(stdlib),
        "code_rule": (
            "every *.py under the stdlib dir, sorted, excluding any file under a directory named "
            f"{sorted(EXCLUDED_DIRS)}, paths starting with {list(EXCLUDED_PREFIXES)}, {PROSE_TOPICS_FILE} "
            "(used as prose) and empty / non-UTF-8 files"
        ),
        "held_out_rule": f"int(sha256(relative_path).hexdigest(), 16) % {HELDOUT_MOD} == 0 "
                         f"(topics: sha256('topic:' + key)); licenses held out: {list(HELDOUT_LICENSES)}",
        "prose_sources": [f"{PROSE_TOPICS_FILE} (topics dict: the Python reference's pydoc texts)",
                          f"{LICENSES_DIR}/* (Debian common-licenses, symlinks de-duplicated)"],
        "code_files": files,
        "code_manifest_sha256": manifest_hash,
        "prose_items": prose_items,
        "counts": {
            "code_train_files": len(code_train), "code_held_files": len(code_held),
            "code_train_chars": sum(len(t) for _, t in code_train),
            "code_held_chars": sum(len(t) for _, t in code_held),
            "prose_train_docs": len(prose_train), "prose_held_docs": len(prose_held),
            "prose_train_chars": sum(len(t) for _, t in prose_train),
            "prose_held_chars": sum(len(t) for _, t in prose_held),
        },
    }
    return {"code_train": code_train, "code_held": code_held, "prose_train": prose_train,
            "prose_held": prose_held, "manifest": manifest}


# ---- tokenizer -------------------------------------------------------------------------------------
def train_tokenizer(docs: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, min_frequency=2, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    assert [tok.token_to_id(s) for s in SPECIALS] == [EOT_ID, PAD_ID, MASK_ID]
    return tok


def encode_docs(tok, docs: list[str]) -> np.ndarray:
    """All documents as one stream, each followed by <|endoftext|>."""
    out = []
    for enc in tok.encode_batch(docs):
        out.extend(enc.ids)
        out.append(EOT_ID)
    return np.asarray(out, dtype=np.int32)


# ---- prompts ---------------------------------------------------------------------------------------
def code_prompts(code_held: list[tuple[str, str]], n: int) -> list[dict]:
    """Starts of documented top-level functions / methods of held-out files (signature + docstring)."""
    import ast

    out = []
    for rel, text in code_held:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        cands = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) and node.body:
                doc = node.body[0]
                body_after = node.body[1] if len(node.body) > 1 else None
                if body_after is None or doc.end_lineno - node.lineno > 12:
                    continue
                start = node.lineno - 1 - len(node.decorator_list)
                seg = "".join(lines[start: doc.end_lineno])
                # end right after the closing quotes: a prompt ending in a bare "\n" token would sit on a
                # token boundary the tokenizer never produces before indented code (it merges "\n" with
                # the indentation), and the model would continue at column 0
                seg = seg.rstrip("\n")
                if 80 <= len(seg) <= 600:
                    cands.append((node.lineno, seg))
        if cands:
            cands.sort()
            lineno, seg = cands[len(cands) // 2]
            out.append({"kind": "code", "source": f"{rel}:{lineno}", "text": seg})
    # a deterministic, varied pick: spread over the sorted file list
    if len(out) > n:
        idx = np.linspace(0, len(out) - 1, n).round().astype(int)
        out = [out[i] for i in idx]
    return out


def prose_prompts(prose_held: list[tuple[str, str]], n: int) -> list[dict]:
    """Opening paragraphs (120-500 chars) of held-out prose documents."""
    out = []
    for name, text in prose_held:
        paras = [p.strip() for p in text.split("\n\n") if len(p.strip()) >= 120 and "***" not in p]
        for j, p in enumerate(paras[:6]):
            if len(p) <= 500:
                out.append({"kind": "prose", "source": f"{name}#p{j}", "text": p})  # no trailing "\n" (see code_prompts)
    if len(out) > n:
        idx = np.linspace(0, len(out) - 1, n).round().astype(int)
        out = [out[i] for i in idx]
    return out


# ---- target ----------------------------------------------------------------------------------------
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


def lr_at(step: int, steps: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def draw_windows(rng, stream: np.ndarray, prose_stream: np.ndarray | None, prose_share: float, n: int,
                 length: int) -> np.ndarray:
    """n random windows [n, length] of the training stream; each comes from the prose-only stream with
    probability prose_share (prose is ~7% of the mixed stream)."""
    src = [prose_stream if (prose_stream is not None and u < prose_share) else stream for u in rng.random(n)]
    return np.stack([s_[o: o + length] for s_, o in ((s_, rng.integers(0, len(s_) - length)) for s_ in src)])


def every25(values) -> list[float]:
    """A curve for TRAINING.json: the mean of every 25 steps."""
    return [float(np.mean(values[i: i + 25])) for i in range(0, len(values), 25)]


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


def round_to_f16_(model) -> None:
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


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


def distinct4(tokens: list[int]) -> float:
    grams = [tuple(tokens[i: i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / max(1, len(grams))


# ---- draft (torch, z-lab DFlash 2 layout) ----------------------------------------------------------
def draft_hparams(target_cfg) -> dict:
    return {
        "hidden_size": target_cfg.hidden_size, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 48, "intermediate_size": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "target_layer_ids": [0, 1, 2], "block_size": 16, "mask_token_id": MASK_ID,
        "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 32, "selector_top_k": 8,
        "output_multiplier": 1.0, "final_logit_softcapping": 30.0,
    }


def build_draft_module(hp: dict, vocab: int):
    import torch
    from torch import nn
    import torch.nn.functional as F

    H, hd, nh, nkv = hp["hidden_size"], hp["head_dim"], hp["num_attention_heads"], hp["num_key_value_heads"]
    eps = hp["rms_norm_eps"]
    K, g = hp["conv_kernel_size"], hp["conv_group_size"]
    G = H // g

    class RMSNorm(nn.Module):  # Qwen3RMSNorm: w * (x / rms(x)), fp32 inside
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            x32 = x.float()
            return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    def conv(y, dyn, base):
        """y [M, B, H] (rows of one block, causal over rows, row 0 zero-padded); dyn [M, B, K, G]; base [K, H]."""
        out = torch.zeros_like(y)
        for o in range(K):
            shifted = y if o == 0 else F.pad(y[:, :-o], (0, 0, o, 0))
            out = out + base[o] * shifted + dyn[:, :, o].repeat_interleave(g, dim=-1) * shifted
        return out

    class Conv(nn.Module):  # GroupedDynamicCausalConv
        def __init__(self):
            super().__init__()
            base = torch.zeros(2, K, H)
            base[:, 0, :] = 1.0  # identity at init
            self.base_kernel = nn.Parameter(base)
            self.kernel_projection = nn.Linear(H, 2 * K * G, bias=False)
            nn.init.normal_(self.kernel_projection.weight, std=0.002)

        def prepare(self, x):
            dyn = self.kernel_projection(x).view(*x.shape[:-1], 2, K, G)
            return conv(x, dyn[..., 0, :, :], self.base_kernel[0]), dyn[..., 1, :, :]

        def finish(self, y, dyn1):
            return conv(y, dyn1, self.base_kernel[1])

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, nh * hd, bias=False)
            self.k_proj = nn.Linear(H, nkv * hd, bias=False)
            self.v_proj = nn.Linear(H, nkv * hd, bias=False)
            self.o_proj = nn.Linear(nh * hd, H, bias=False)
            self.q_norm = RMSNorm(hd)
            self.k_norm = RMSNorm(hd)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            I = hp["intermediate_size"]
            self.gate_proj = nn.Linear(H, I, bias=False)
            self.up_proj = nn.Linear(H, I, bias=False)
            self.down_proj = nn.Linear(I, H, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(H)
            self.post_attention_layernorm = RMSNorm(H)
            self.self_attn = Attn()
            self.mlp = MLP()
            self.attention_conv = Conv()
            self.mlp_conv = Conv()

    class Selector(nn.Module):
        def __init__(self):
            super().__init__()
            r = hp["selector_rank"]
            self.hidden_projection = nn.Linear(H, r, bias=False)
            self.predecessor_codebook = nn.Parameter(torch.randn(vocab, r) * 0.5)
            self.successor_codebook = nn.Parameter(torch.randn(vocab, r) * 0.5)
            nn.init.normal_(self.hidden_projection.weight, std=0.1 / math.sqrt(H))

    inv_freq = 1.0 / (hp["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def rope(x, pos):
        """x [..., T, hd] with pos [..., T] (rotate-half, angles in fp32)."""
        ang = pos.float()[..., None] * inv_freq
        emb = torch.cat([ang, ang], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    class Draft(nn.Module):
        def __init__(self):
            super().__init__()
            nf = len(hp["target_layer_ids"])
            self.fc = nn.Linear(nf * H, H, bias=False)
            self.hidden_norm = RMSNorm(H)
            self.layers = nn.ModuleList([Layer() for _ in range(hp["num_hidden_layers"])])
            self.norm = RMSNorm(H)
            self.candidate_selector = Selector()
            for mod in [self.fc] + [m for m in self.layers.modules() if isinstance(m, nn.Linear)]:
                if mod.weight.shape[0] != 2 * K * G:
                    nn.init.normal_(mod.weight, std=0.02)

        def forward(self, feats, block_emb, anchors, block_len):
            """feats [N, T, nf*H] (taps of positions 0..T-1); block_emb [N, nb, B, H]; anchors [N, nb] (positions);
            block_len [N, nb] (rows of each block that exist, 2..B). Returns final-normed hidden [N, nb, B, H].

            Block j of sequence n sees context keys p < anchors[n, j] and its own first block_len rows
            (bidirectional: is_causal false), exactly one draft call of dflash.md 2.3 per block."""
            N, T, _ = feats.shape
            _, nb, B, _ = block_emb.shape
            c = self.hidden_norm(self.fc(feats))  # [N, T, H]
            ctx_pos = torch.arange(T)[None].expand(N, T)
            blk_pos = (anchors[..., None] + torch.arange(B)).reshape(N, nb * B)
            row = torch.arange(B)
            # mask [N, 1, nb*B, T + nb*B]
            ctx_vis = torch.arange(T)[None, None, :] < anchors.repeat_interleave(B, dim=1)[..., None]
            same = torch.eye(nb, dtype=torch.bool).repeat_interleave(B, 0).repeat_interleave(B, 1)  # [nbB, nbB]
            key_ok = (row[None, None, :] < block_len[..., None]).reshape(N, 1, nb * B)  # key row exists
            blk_vis = same[None] & key_ok
            mask = torch.cat([ctx_vis, blk_vis], dim=-1)[:, None]
            h = block_emb.reshape(N, nb * B, H)
            for layer in self.layers:
                x = layer.input_layernorm(h)
                x, dyn_a = layer.attention_conv.prepare(x.view(N * nb, B, H))
                x = x.reshape(N, nb * B, H)
                a = layer.self_attn
                q = rope(a.q_norm(a.q_proj(x).view(N, nb * B, nh, hd)).transpose(1, 2), blk_pos[:, None])
                kb = a.k_norm(a.k_proj(x).view(N, nb * B, nkv, hd)).transpose(1, 2)
                kc = a.k_norm(a.k_proj(c).view(N, T, nkv, hd)).transpose(1, 2)
                k = torch.cat([rope(kc, ctx_pos[:, None]), rope(kb, blk_pos[:, None])], dim=2)
                v = torch.cat([a.v_proj(c).view(N, T, nkv, hd), a.v_proj(x).view(N, nb * B, nkv, hd)], dim=1).transpose(1, 2)
                k = k.repeat_interleave(nh // nkv, dim=1)
                v = v.repeat_interleave(nh // nkv, dim=1)
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=hd ** -0.5)
                o = a.o_proj(o.transpose(1, 2).reshape(N, nb * B, nh * hd))
                o = layer.attention_conv.finish(o.view(N * nb, B, H), dyn_a).reshape(N, nb * B, H)
                h = h + o
                x = layer.post_attention_layernorm(h)
                x, dyn_m = layer.mlp_conv.prepare(x.view(N * nb, B, H))
                m = layer.mlp_conv.finish(layer.mlp(x), dyn_m).reshape(N, nb * B, H)
                h = h + m
            return self.norm(h).view(N, nb, B, H)

        def logits(self, hidden, head_weight):
            z = (hidden @ head_weight.T) * hp["output_multiplier"]
            cap = hp["final_logit_softcapping"]
            if cap:
                z = torch.tanh(z / cap) * cap
            return z

        def selector_scores(self, hidden, logits, prev):
            """hidden [M, H], logits [M, V], prev [M] -> (cand [M, k], score [M, k])."""
            s = self.candidate_selector
            unary, cand = torch.topk(logits, hp["selector_top_k"], dim=-1)
            hp_ = s.hidden_projection(hidden)
            pair = ((s.predecessor_codebook[prev] * hp_)[:, None, :] * s.successor_codebook[cand]).sum(-1)
            return cand, unary + pair

    return Draft()


def draft_state_dict_for_file(draft) -> dict:
    """z-lab names (dflash.md 1.2), codebooks without '.weight', float16."""
    import torch

    return {k: v.detach().to(torch.float16).contiguous() for k, v in draft.state_dict().items()}


def save_draft(draft, hp: dict, target_cfg, folder: Path) -> None:
    from safetensors.torch import save_file

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    save_file(draft_state_dict_for_file(draft), str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = {
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
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


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
    import torch.nn.functional as F

    torch.manual_seed(SEED + 3)
    draft = build_draft_module(hp, VOCAB)
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
        toks = torch.from_numpy(seqs[idx].astype(np.int64))
        feats = torch.from_numpy(taps[idx].astype(np.float32))
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
        # selector: candidates from the (detached) logits, the true predecessor, target = true token
        m = valid.bool().reshape(-1)
        hid = hidden[:, :, 1:].reshape(-1, hidden.shape[-1])[m]
        lg = logits.detach().reshape(-1, VOCAB)[m]
        prev = labels[:, :, :-1].reshape(-1)[m]
        true = labels[:, :, 1:].reshape(-1)[m]
        cand, score = draft.selector_scores(hid, lg, prev)
        hit = cand == true[:, None]
        has = hit.any(-1)
        sel_loss = F.cross_entropy(score[has], hit[has].float().argmax(-1)) if has.any() else score.sum() * 0
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


def round_module_f16_(module) -> None:
    import torch

    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.half().float())


def draft_walk(draft, hidden_rows, logits_rows, anchor: int) -> list[int]:
    """Greedy selector walk (dflash.md 2.6) for one block: hidden [n, H], logits [n, V]."""
    import torch

    s = draft.candidate_selector
    k = draft_walk.top_k
    unary, cand = torch.topk(logits_rows, k, dim=-1)
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
    import torch.nn.functional as F

    draft_walk.top_k = hp["selector_top_k"]
    embed = target.get_input_embeddings().weight.detach()
    head = target.lm_head.weight.detach()
    res = {}
    with torch.no_grad():
        for k in ks:
            acc = []
            for p, c in zip(prompts, conts):
                seq = p + c
                taps = torch.from_numpy(target_taps(target, np.asarray([seq], np.int32), hp["target_layer_ids"]).astype(np.float32))
                anchors = list(range(len(p) - 1, len(seq) - k))
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
            acc = np.asarray(acc)
            res[str(k)] = {
                "anchors": int(len(acc)),
                "mean_accepted": float(acc.mean()),
                "tokens_per_round": float(1 + acc.mean()),
                "acceptance_by_position": [float((acc >= i).mean()) for i in range(1, k + 1)],
            }
    return res


# ---- main ------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=BUILTIN, help="output folder (default: the package's data/builtin)")
    ap.add_argument("--prompts-out", type=Path, default=PROMPTS_JSON)
    ap.add_argument("--quick", action="store_true", help="smoke run: few steps, into /tmp/onebit-train-quick")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads; the shipped pair used 2 (bits depend on it). On a busy 2-core machine "
                         "2 OpenMP threads can run 3x slower than 1")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--target-steps", type=int, default=1200)
    ap.add_argument("--target-batch", type=int, default=8)
    ap.add_argument("--target-lr", type=float, default=4e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--prose-share", type=float, default=0.12,
                    help="probability that a target training window is drawn from the prose-only stream "
                         "(0: uniform windows of the mixed stream, where prose is ~7%%)")
    ap.add_argument("--tokenizer", type=Path, default=BUILTIN / "tokenizer.json",
                    help="reuse this tokenizer (default: the shipped one; the default prompts and tests depend "
                         "on its ids); retrained only with --retrain-tokenizer or when the file is missing")
    ap.add_argument("--retrain-tokenizer", action="store_true")
    ap.add_argument("--ul-steps", type=int, default=150,
                    help="sequence-level unlikelihood fine-tuning steps after the target's CE training (0: off)")
    ap.add_argument("--ul-lr", type=float, default=3e-4)
    ap.add_argument("--ul-batch", type=int, default=8)
    ap.add_argument("--ul-prompt-len", type=int, default=32)
    ap.add_argument("--ul-gen-len", type=int, default=64)
    ap.add_argument("--ul-weight", type=float, default=1.0)
    ap.add_argument("--draft-seqs", type=int, default=1536)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--draft-steps", type=int, default=2400)
    ap.add_argument("--draft-batch", type=int, default=16)
    ap.add_argument("--blocks-per-seq", type=int, default=8)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--loss-gamma", type=float, default=7.0, help="block CE weight of row j: exp(-(j-1)/gamma)")
    ap.add_argument("--selector-weight", type=float, default=1.0)
    ap.add_argument("--eval-code", type=int, default=24)
    ap.add_argument("--eval-prose", type=int, default=12)
    ap.add_argument("--reuse-target", action="store_true", help="skip stages 2-3 when --out already holds them")
    args = ap.parse_args(argv)
    if args.quick:
        args.out = Path("/tmp/onebit-train-quick/builtin")
        args.prompts_out = Path("/tmp/onebit-train-quick/default.json")
        args.target_steps, args.draft_steps, args.draft_seqs = 20, 20, 64
        args.ul_steps = min(args.ul_steps, 5)
        args.eval_code, args.eval_prose = 4, 2

    import torch

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    t_start = time.time()
    log_lines: list[str] = []

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:7.1f}s] {msg}"
        print(line, flush=True)
        log_lines.append(line)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    times = {}

    # 1. data
    t = time.time()
    data = collect_data()
    c = data["manifest"]["counts"]
    log(f"data: {c}")
    train_docs = [t_ for _, t_ in data["code_train"]] + [t_ for _, t_ in data["prose_train"]]
    times["data_s"] = time.time() - t

    # 2. tokenizer
    t = time.time()
    from tokenizers import Tokenizer

    if args.reuse_target and (out / "tokenizer.json").exists():
        tok = Tokenizer.from_file(str(out / "tokenizer.json"))
        log(f"tokenizer: reusing {out / 'tokenizer.json'} (--reuse-target)")
    elif not args.retrain_tokenizer and args.tokenizer.exists():
        tok = Tokenizer.from_file(str(args.tokenizer))
        if args.tokenizer.resolve() != (out / "tokenizer.json").resolve():
            shutil.copyfile(args.tokenizer, out / "tokenizer.json")
        log(f"tokenizer: reusing {args.tokenizer} (sha256 {hashlib.sha256(args.tokenizer.read_bytes()).hexdigest()[:16]})")
    else:
        tok = train_tokenizer(train_docs, VOCAB)
        tok.save(str(out / "tokenizer.json"))
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(train_docs))
    stream = encode_docs(tok, [train_docs[i] for i in order])
    prose_docs = [t_ for _, t_ in data["prose_train"]]
    prose_stream = encode_docs(tok, [prose_docs[i] for i in rng.permutation(len(prose_docs))])
    held_code = encode_docs(tok, [t_ for _, t_ in data["code_held"]])
    held_prose = encode_docs(tok, [t_ for _, t_ in data["prose_held"]])
    times["tokenizer_s"] = time.time() - t
    log(f"tokenizer: {tok.get_vocab_size()} ids; train stream {len(stream):,} tokens; held-out code "
        f"{len(held_code):,} / prose {len(held_prose):,} tokens ({times['tokenizer_s']:.0f}s)")

    # prompts (held out)
    cp = code_prompts(data["code_held"], args.eval_code)
    pp = prose_prompts(data["prose_held"], args.eval_prose)
    n_code_default, n_prose_default = (10, 6) if not args.quick else (2, 1)
    default_prompts = ([cp[i] for i in np.linspace(0, len(cp) - 1, n_code_default).round().astype(int)]
                       + [pp[i] for i in np.linspace(0, len(pp) - 1, n_prose_default).round().astype(int)])
    args.prompts_out.parent.mkdir(parents=True, exist_ok=True)
    args.prompts_out.write_text(json.dumps({
        "description": "Default prompts of the built-in pair: held-out Python stdlib code (documented function / "
                       "class openings) and held-out prose (pydoc topics, licenses); none was trained on. "
                       "See docs/trained-pair.md.",
        "python_version": platform.python_version(),
        "prompts": default_prompts,
    }, indent=2) + "\n")

    # 3. target
    t = time.time()
    tdir = out / "target"
    stats_file = out / "target" / "train_stats.json"
    if args.reuse_target and (tdir / "model.safetensors").exists() and stats_file.exists():
        prev = json.loads(stats_file.read_text())
        t_losses, t_time, t_params = prev["loss_curve"], prev["seconds"], prev["parameters"]
        log("target: reusing the saved target (--reuse-target)")
    else:
        model, t_losses, t_time, t_params = train_target(stream, args, log, prose_stream)
        ul_stats = unlikelihood_finetune(model, stream, args, log, prose_stream) if args.ul_steps > 0 else None
        round_to_f16_(model)
        save_target(model, tdir)
        t_losses = every25(t_losses)
        stats_file.write_text(json.dumps({"loss_curve": t_losses, "seconds": t_time, "parameters": t_params,
                                          "steps": args.target_steps, "unlikelihood": ul_stats}) + "\n")
    target = load_target_torch(tdir)
    times["target_s"] = time.time() - t
    ev = {"code": heldout_loss(target, held_code, args.seq_len, 64 if not args.quick else 4),
          "prose": heldout_loss(target, held_prose, args.seq_len, 32 if not args.quick else 4)}
    log(f"target held-out: {ev}")

    # greedy continuations of the held-out prompts
    def enc(p):
        return tok.encode(p["text"]).ids

    eval_prompts = {"code": cp, "prose": pp}
    greedy = {}
    for kind, plist in eval_prompts.items():
        greedy[kind] = [(enc(p), greedy_one(target, enc(p), 128)) for p in plist]
        d4 = [distinct4(g) for _, g in greedy[kind]]
        log(f"greedy {kind}: distinct-4-gram share mean {np.mean(d4):.3f} min {np.min(d4):.3f}")
    sample = {kind: tok.decode(greedy[kind][0][1]) for kind in greedy}

    # 4. draft data, 5. draft
    hp = draft_hparams(target.config)
    t = time.time()
    seqs = make_draft_data(target, stream, args.draft_seqs, args.prompt_len, args.gen_len, log)
    taps = target_taps(target, seqs, hp["target_layer_ids"])
    times["draft_data_s"] = time.time() - t
    d4_train = float(np.mean([distinct4(s[args.prompt_len:].tolist()) for s in seqs]))
    log(f"draft data: {seqs.shape} tokens, taps {taps.shape} ({times['draft_data_s']:.0f}s); "
        f"distinct-4 of the continuations {d4_train:.3f}")
    t = time.time()
    draft, d_losses, s_losses, d_time, d_params = train_draft(target, seqs, taps, args.prompt_len, hp, args, log)
    round_module_f16_(draft)
    save_draft(draft, hp, target.config, out / "draft")
    times["draft_s"] = time.time() - t
    del taps

    # 6. eval
    t = time.time()
    acc = {}
    for kind in ("code", "prose"):
        ps = [g[0] for g in greedy[kind]]
        cs = [g[1] for g in greedy[kind]]
        acc[kind] = teacher_forced_acceptance(target, draft, hp, ps, cs, (3, 7, 15))
        acc[kind]["distinct4_mean"] = float(np.mean([distinct4(c_) for c_ in cs]))
        acc[kind]["prompts"] = len(ps)
        log(f"acceptance {kind}: " + ", ".join(f"k={k}: tau {acc[kind][k]['tokens_per_round']:.2f}" for k in ("3", "7", "15"))
            + f" (distinct-4 {acc[kind]['distinct4_mean']:.3f})")
    times["eval_s"] = time.time() - t
    times["total_s"] = time.time() - t_start

    def size(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.iterdir())

    report = {
        "recipe": {
            "command": "python tools/train_pair.py" + (" --quick" if args.quick else ""),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "seed": SEED,
            "seeds": {"torch_target_init": SEED, "target_windows": SEED + 1, "draft_prompts": SEED + 2,
                      "torch_draft_init": SEED + 3, "draft_batches": SEED + 4, "doc_order": SEED},
            "tokenizer": {"type": "byte-level BPE (tokenizers)", "vocab_size": tok.get_vocab_size(),
                          "specials": dict(zip(SPECIALS, [EOT_ID, PAD_ID, MASK_ID])), "min_frequency": 2},
            "target": {"class": "transformers Qwen3_5ForCausalLM", "config": target.config.to_dict() if hasattr(target.config, "to_dict") else {},
                       "objective": "next-token CE on random windows of the training stream (a share "
                                    "prose_share of them from the prose-only stream)", "optimizer":
                       "AdamW(0.9, 0.95), wd 0.1 on matrices, clip 1.0, warmup + cosine to 10%",
                       "stored": "float16 (trained in float32, rounded before the draft sees it)"},
            "draft": {"hparams": hp, "objective": "block CE rows 1..B-1 weighted exp(-(j-1)/gamma) against the "
                      "target's greedy continuation of the anchor (blocks of 4, 8 or 16 rows) + selector CE over the "
                      "top-k candidates given the true predecessor", "data":
                      f"{args.draft_seqs} prompts of {args.prompt_len} tokens from the training stream, "
                      f"{args.gen_len} greedy tokens each by the float16 target; taps after target layers "
                      f"{hp['target_layer_ids']}", "stored": "float16"},
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": __import__("transformers").__version__,
                         "tokenizers": __import__("tokenizers").__version__, "numpy": np.__version__},
            "threads": args.threads,
        },
        "data_manifest": data["manifest"],
        "target": {"parameters": t_params, "train_seconds": t_time, "train_loss_curve": t_losses,
                   "final_train_loss": t_losses[-1], "heldout": ev, "file_bytes": size(tdir)},
        "draft": {"parameters": d_params, "train_seconds": d_time,
                  "block_ce_curve": every25(d_losses),
                  "selector_ce_curve": every25(s_losses),
                  "train_continuation_distinct4": d4_train, "file_bytes": size(out / "draft")},
        "eval": {"greedy_new_tokens": 128, "teacher_forced_acceptance": acc,
                 "sample_greedy_text": sample,
                 "note": "teacher-forced: every anchor of the target's greedy continuation of a held-out prompt; "
                         "tokens_per_round = 1 + mean accepted (capped at k)"},
        "times_s": times,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
    }
    (out / "TRAINING.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"done in {times['total_s']:.0f}s; target {size(tdir) / 1e6:.2f} MB, draft {size(out / 'draft') / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
