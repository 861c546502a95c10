"""Write the committed HF goldens of tests/golden/: the math pinned without torch.

For each supported model type (and qwen3_next with experts) a seeded tiny random HF transformers model
is built with the oracle's own builders (tests/oracle/hf_models.py, hf_moe_models.py), its weights are
rounded to float16 (the checkpoint is stored as float16 safetensors, so HF runs on exactly the weights
the engine loads), and HF runs in float32 on a fixed prompt: the prefill's logits (every row), the
logits of a few single cached steps after it, and every cache array after the prefill (each delta-net
layer's conv and recurrent state, the attention layer's keys and values). Written per type:

    tests/golden/<name>/checkpoint/   config.json + model.safetensors (float16), as save_pretrained wrote
    tests/golden/<name>/golden.npz    prefill_logits [T, V], step_logits [S, V], cache.<layer>.<array>
    tests/golden/<name>/meta.json     seed, builder arguments, prompt, steps, versions, this command

tests/hybrid/test_golden.py compares the engine with them, without torch. Deterministic (seeded); re-run
after a change of the builders, the prompt or the HF version, then run that test:

    PYTHONPATH=src python tools/make_golden.py            # needs torch + transformers ('.[oracle]')
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.oracle.hf_models import build, torch  # noqa: E402
from tests.oracle.hf_moe_models import MoeCase, build_moe  # noqa: E402

COMMAND = "PYTHONPATH=src python tools/make_golden.py"
# hidden 32, vocab 64, 4 layers (3 delta-net : 1 attention), GQA 2:1, 2 value heads per key head,
# rotary on 4 of 16 dims: small enough to commit, every feature of the math present.
GEOMETRY = dict(vocab_size=64, hidden_size=32, intermediate_size=16, num_attention_heads=2, num_key_value_heads=1,
                head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=8,
                linear_value_head_dim=8)
MOE_GEOMETRY = dict(GEOMETRY, moe_intermediate_size=8)
PROMPT = [1, 17, 42, 5, 63, 9, 28, 3, 50, 11, 36]  # 11 rows: two row sets of 8 in the test, one ragged
STEPS = [7, 44, 21]
# name -> (builder, arguments); the MoE cases renormalise their top-k (so dropping it shows)
CASES = {
    "qwen3_5_text": ("build", dict(model_type="qwen3_5_text", seed=11, tied=False)),
    "qwen3_5": ("build", dict(model_type="qwen3_5", seed=12, tied=True)),
    "qwen3_next": ("build", dict(model_type="qwen3_next", seed=13, tied=False)),
    "qwen3_next_moe": ("build_moe", dict(case=dict(model_type="qwen3_next", experts=4, top_k=2, shared=8,
                                                   norm_topk_prob=True, mlp_only_layers=(1,)), seed=14)),
    "qwen3_5_moe_text": ("build_moe", dict(case=dict(model_type="qwen3_5_moe_text", experts=4, top_k=2, shared=0,
                                                     fused=True, tied=True), seed=15)),
    "qwen3_5_moe": ("build_moe", dict(case=dict(model_type="qwen3_5_moe", experts=4, top_k=2, shared=8), seed=16)),
}


def make_model(builder: str, args: dict, folder: Path):
    if builder == "build":
        return build(args["model_type"], folder, seed=args["seed"], tied=args["tied"], geometry=GEOMETRY)
    return build_moe(MoeCase(**args["case"]), folder, seed=args["seed"], geometry=MOE_GEOMETRY)


def to_float16(model, folder: Path) -> None:
    """Round the HF model's parameters to float16 and store the saved files as float16: the same values
    on both sides (rounding commutes with the re-keying and splitting save_pretrained does)."""
    from safetensors.numpy import load_file, save_file

    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    for f in sorted(folder.glob("*.safetensors")):
        t = load_file(str(f))
        save_file({k: v.astype(np.float16) for k, v in sorted(t.items())}, str(f), metadata={"format": "pt"})


def cache_arrays(cache) -> dict[str, np.ndarray]:
    """HF's cache after the prefill, batch row 0: conv [C, K] (HF keeps K columns, the engine K-1),
    recurrent [HV, dk, dv], keys / values [HKV, T, hd] (post-norm, post-RoPE)."""
    out = {}
    for i, layer in enumerate(cache.layers):
        if hasattr(layer, "conv_states"):
            out[f"cache.{i}.conv"] = layer.conv_states[0][0].numpy().copy()
            out[f"cache.{i}.recurrent"] = layer.recurrent_states[0][0].numpy().copy()
        else:
            out[f"cache.{i}.keys"] = layer.keys[0].numpy().copy()
            out[f"cache.{i}.values"] = layer.values[0].numpy().copy()
    return out


def run_hf(model) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = model(torch.tensor([PROMPT]), use_cache=True)
        cache = out.past_key_values if getattr(out, "cache", None) is None else out.cache
        golden = {"prefill_logits": out.logits[0].float().numpy().copy(), **cache_arrays(cache)}
        steps = []
        for t in STEPS:
            out = model(torch.tensor([[t]]), cache=cache, use_cache=True)
            cache = out.past_key_values if getattr(out, "cache", None) is None else out.cache
            steps.append(out.logits[0, -1].float().numpy().copy())
    golden["step_logits"] = np.stack(steps)
    return golden


def write(name: str, out_root: Path) -> int:
    builder, args = CASES[name]
    dest = out_root / name
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "checkpoint"
        model = make_model(builder, args, ckpt)
        to_float16(model, ckpt)
        golden = run_hf(model)
        dest.mkdir(parents=True)
        shutil.copytree(ckpt, dest / "checkpoint")
    np.savez(dest / "golden.npz", **golden)
    import transformers

    meta = {"name": name, "model_type": json.loads((dest / "checkpoint" / "config.json").read_text())["model_type"],
            "builder": builder, "args": args, "geometry": MOE_GEOMETRY if builder == "build_moe" else GEOMETRY,
            "weights": "float16", "compute": "float32", "prompt": PROMPT, "steps": STEPS,
            "transformers": transformers.__version__, "torch": torch.__version__, "command": COMMAND}
    (dest / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "golden", help="Default: %(default)s")
    p.add_argument("names", nargs="*", default=sorted(CASES), help="cases to write (default: all)")
    a = p.parse_args(argv)
    total = 0
    for name in a.names:
        size = write(name, a.out)
        total += size
        print(f"{name}: {size / 1024:.1f} KB")
    print(f"total: {total / 1024:.1f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
