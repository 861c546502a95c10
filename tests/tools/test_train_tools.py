"""Pieces of tools/trainpair/ that decide the shipped pair's quality, tested without torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from trainpair import data, target_train  # on sys.path by tests/tools/conftest.py

TOOLS = Path(__file__).resolve().parents[2] / "tools"


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
    rng = np.random.default_rng(0)
    for _ in range(300):
        seq = rng.integers(0, 4, size=int(rng.integers(1, 40)))
        start = int(rng.integers(0, len(seq) + 1))
        assert target_train.repeated_ngram_mask(seq, start).tolist() == _mask_by_definition(seq.tolist(), start)


def test_repeated_ngram_mask_marks_a_loop_and_spares_varied_text():
    loop = np.array([5, 6, 7, 8] * 6)
    m = target_train.repeated_ngram_mask(loop, 8)
    assert not m[:8].any() and m[8:].all()  # the prompt is never a candidate; the loop is, all of it
    assert not target_train.repeated_ngram_mask(np.arange(30), 0).any()


def test_prompts_do_not_end_on_a_bare_newline():
    """A prompt ending in "\\n" sits on a token boundary the byte-level BPE never produces before
    indented code (it merges the newline with the indentation); the model would continue at column 0."""
    code = ("def f(x):\n    \"\"\"Return x twice, as documented at some length here\n    for the"
            " length rule.\"\"\"\n    return 2 * x\n")
    prompts = data.code_prompts([("m.py", code)], 4)
    assert prompts and all(not p["text"].endswith("\n") for p in prompts)
    assert prompts[0]["text"].endswith('"""')
    prose = "A paragraph that is long enough to be a prompt. " * 4 + "\n\nshort\n"
    assert all(not p["text"].endswith("\n") for p in data.prose_prompts([("doc", prose)], 4))


def test_the_entry_script_runs_the_package():
    """``python tools/train_pair.py`` (what nox -s train and the docs run) reaches trainpair's parser."""
    out = subprocess.run([sys.executable, str(TOOLS / "train_pair.py"), "--help"], capture_output=True, text=True,
                         check=True)
    assert "--reuse-target" in out.stdout and "tools/trainpair/" in out.stdout
