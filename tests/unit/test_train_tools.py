"""Pieces of tools/train_pair.py that decide the shipped pair's quality, tested without torch."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _train_pair():
    spec = importlib.util.spec_from_file_location("train_pair", TOOLS / "train_pair.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mask_by_definition(seq, start, n=4):
    """Slow twin: token t >= start is marked iff some n-gram containing it occurred earlier in seq."""
    grams = [tuple(seq[i: i + n]) for i in range(len(seq) - n + 1)]
    mask = [False] * len(seq)
    for i, g in enumerate(grams):
        if g in grams[:i]:
            for t in range(i, i + n):
                if t >= start:
                    mask[t] = True
    return mask


def test_repeated_ngram_mask_matches_its_definition():
    tp = _train_pair()
    rng = np.random.default_rng(0)
    for _ in range(300):
        seq = rng.integers(0, 4, size=int(rng.integers(1, 40)))
        start = int(rng.integers(0, len(seq) + 1))
        assert tp.repeated_ngram_mask(seq, start).tolist() == _mask_by_definition(seq.tolist(), start)


def test_repeated_ngram_mask_marks_a_loop_and_spares_varied_text():
    tp = _train_pair()
    loop = np.array([5, 6, 7, 8] * 6)
    m = tp.repeated_ngram_mask(loop, 8)
    assert not m[:8].any() and m[8:].all()  # the prompt is never a candidate; the loop is, all of it
    assert not tp.repeated_ngram_mask(np.arange(30), 0).any()


def test_prompts_do_not_end_on_a_bare_newline():
    """A prompt ending in "\\n" sits on a token boundary the byte-level BPE never produces before
    indented code (it merges the newline with the indentation); the model would continue at column 0."""
    tp = _train_pair()
    code = ("def f(x):\n    \"\"\"Return x twice, as documented at some length here\n    for the"
            " length rule.\"\"\"\n    return 2 * x\n")
    prompts = tp.code_prompts([("m.py", code)], 4)
    assert prompts and all(not p["text"].endswith("\n") for p in prompts)
    assert prompts[0]["text"].endswith('"""')
    prose = "A paragraph that is long enough to be a prompt. " * 4 + "\n\nshort\n"
    assert all(not p["text"].endswith("\n") for p in tp.prose_prompts([("doc", prose)], 4))
