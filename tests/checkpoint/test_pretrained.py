"""The shipped trained pair (src/onebit_engine/data/builtin): it loads, its tokenizer round-trips, its
greedy output on a held-out prompt is varied text (not a loop), and its draft really speculates."""
from __future__ import annotations

import json

import pytest

from onebit_engine import load_target
from onebit_engine.default_model import (
    BUILTIN_DIR, builtin_paths, default_code_prompt, default_prompts, training_info,
)

tokenizers = pytest.importorskip("tokenizers")

from onebit_engine.default_model import load_tokenizer  # noqa: E402

MIN_DISTINCT4 = 0.5  # share of distinct 4-grams in 64 greedy tokens; a repetition loop scores far lower


def distinct4(tokens) -> float:
    grams = [tuple(tokens[i: i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / max(1, len(grams))


@pytest.fixture(scope="module")
def target():
    return load_target(builtin_paths()[0])


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def test_builtin_files_are_small_and_float16():
    target_dir, draft_dir, tok_path = builtin_paths()
    total = sum(f.stat().st_size for d in (target_dir, draft_dir) for f in d.iterdir()) + tok_path.stat().st_size
    assert total < 12_000_000, f"the shipped pair is {total / 1e6:.1f} MB; it should stay a few MB"
    for d in (target_dir, draft_dir):
        header_len = int.from_bytes((d / "model.safetensors").read_bytes()[:8], "little")
        header = json.loads((d / "model.safetensors").read_bytes()[8: 8 + header_len])
        dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
        assert dtypes == {"F16"}, f"{d.name}: tensors stored as {dtypes}, expected float16 only"


def test_target_loads_with_the_real_architecture(target):
    cfg = target.config
    assert cfg.model_type == "qwen3_5_text"
    assert cfg.layer_types.count("linear_attention") == 3 * cfg.layer_types.count("full_attention")
    assert cfg.vocab_size == load_tokenizer().vocab_size


def test_tokenizer_round_trips(tok):
    texts = [p["text"] for p in default_prompts()]
    texts += ["def f(x):\n\treturn x ** 2  # café ünïcode ✓\n", "", "   \n\n  trailing  "]
    for text in texts:
        ids = tok.encode(text)
        assert all(0 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == text
    assert tok.mask_token_id is not None and tok.eos_token_id is not None
    code = default_code_prompt()
    assert len(tok.encode(code)) < len(code.encode()) / 2, "BPE should compress Python source well below 2 bytes/token"


def test_default_prompts_are_held_out():
    info = training_info()
    held_files = {f["path"] for f in info["data_manifest"]["code_files"] if f["held_out"]}
    train_files = {f["path"] for f in info["data_manifest"]["code_files"] if not f["held_out"]}
    prompts = default_prompts()
    assert len(default_prompts("code")) >= 8 and len(default_prompts("prose")) >= 4
    for p in prompts:
        if p["kind"] == "code":
            path = p["source"].rsplit(":", 1)[0]
            assert path in held_files and path not in train_files, p["source"]
        else:
            src = p["source"].split("#", 1)[0]
            kind, name = src.split(":", 1)
            items = info["data_manifest"]["prose_items"]
            want = (lambda s: s.endswith(f"[{name!r}]")) if kind == "topic" else (lambda s: s.endswith("/" + name))
            match = [i for i in items if want(i["source"])]
            assert match and all(i["held_out"] for i in match), p["source"]


@pytest.mark.parametrize("kind", ["code", "prose"])
def test_greedy_output_on_every_default_prompt_is_varied(target, tok, kind):
    """Repetition loops inflate acceptance while the text is garbage: every default prompt's greedy
    continuation must stay varied, on code and on prose."""
    from onebit_engine.loop.generate import generate

    for p in default_prompts(kind):
        res = generate(target, tok.encode(p["text"]), max_new_tokens=64, stop_tokens=[])
        d4 = distinct4(res.tokens)
        assert d4 >= MIN_DISTINCT4, (f"{p['source']}: greedy output is a loop (distinct 4-grams {d4:.2f}):\n"
                                     f"{tok.decode(res.tokens)}")


def test_default_prompts_end_on_a_token_boundary_the_tokenizer_produces(tok):
    """No prompt ends in a bare newline: the byte-level BPE merges a newline with the indentation that
    follows it, so a trailing "\n" token tells the model "column 0" (tools/trainpair/data.py code_prompts)."""
    for p in default_prompts():
        assert not p["text"].endswith(("\n", " ")), p["source"]


def test_draft_loads_and_speculates(target, tok):
    """The shipped draft's greedy rounds on held-out code prompts: drafted tokens really are the
    target's (a draft of this vocabulary that never matches gives 1 token per round)."""
    from onebit_engine.draft import load_draft
    from onebit_engine.loop.speculative import speculative_generate

    draft = load_draft(builtin_paths()[1], target)
    assert draft.config.version == 2 and draft.config.mask_token_id == tok.mask_token_id
    rounds = []
    for p in default_prompts("code")[:3]:
        rounds += speculative_generate(target, draft, tok.encode(p["text"]), max_new_tokens=48, k=7).rounds
    accepted = [r.accepted for r in rounds]
    assert sum(accepted) >= len(accepted) // 3, f"the draft accepted {accepted} tokens per round"


def test_training_record_is_complete():
    info = training_info()
    for key in ("recipe", "data_manifest", "target", "draft", "eval", "times_s"):
        assert key in info
    assert info["data_manifest"]["python_version"].count(".") == 2
    assert (BUILTIN_DIR / "tokenizer.json").exists()
