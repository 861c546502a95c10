"""The target against committed HF transformers goldens (tests/golden/, written by tools/make_golden.py),
without torch: a wrong formula fails plain ``pytest`` even where the HF oracle (tests/oracle) skips.

Each golden holds a seeded tiny checkpoint (float16 weights) and what HF computed on it in float32: the
prefill's logits, the logits of single cached steps after it, and the cache after the prefill. The
engine runs the same prompt and steps on the reference backend (host-int quantizes, so its logits are
not HF's; it is tied to the reference by its own tests), with each op table.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onebit_engine import TargetConfig, load_target
from onebit_engine.ops import gated_delta
from onebit_engine.ops.gated_delta_fast import gdn_mixer_rows
from onebit_engine.hybrid.config import SUPPORTED_MODEL_TYPES

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
NAMES = sorted(d.name for d in GOLDEN.iterdir() if (d / "meta.json").is_file())
# The oracle's bound (HF_RTOL in tests/oracle/test_hf_target.py), for the same reason: both sides are
# float32 but sum in other orders (BLAS vs torch, HF's chunked prefill vs the engine's per-token delta
# rule, the compiled path's float32 loops), so they agree to ~1e-6 relative, not bitwise.
GOLDEN_RTOL = 2e-5  # max |diff| / max |reference|, per array
OPS_NAMES = ["numpy"] + (["numba"] if gdn_mixer_rows is not None else [])


def meta(name: str) -> dict:
    return json.loads((GOLDEN / name / "meta.json").read_text())


def golden(name: str) -> dict[str, np.ndarray]:
    with np.load(GOLDEN / name / "golden.npz") as z:
        return {k: z[k] for k in z.files}


def engine_arrays(name: str, ops: str = "numpy") -> dict[str, np.ndarray]:
    """The engine's counterpart of every golden array, under the golden's names."""
    m = meta(name)
    target = load_target(GOLDEN / name / "checkpoint", backend="reference", row_set=8, ops=ops)
    st = target.new_state()
    out = {"prefill_logits": target.forward(m["prompt"], st).logits}
    for i, layer in enumerate(st.layers):
        if hasattr(layer, "conv"):
            out[f"cache.{i}.conv"] = layer.conv.copy()  # the last K-1 columns; HF keeps K (see errors())
            out[f"cache.{i}.recurrent"] = layer.recurrent.copy()  # copies: the compiled path updates in place
        else:
            out[f"cache.{i}.keys"], out[f"cache.{i}.values"] = layer.prefix(layer.length)
    out["step_logits"] = np.stack([target.forward([t], st).logits[0] for t in m["steps"]])
    return out


def errors(got: dict, want: dict) -> dict[str, float]:
    """max |diff| / max |golden| per array."""
    assert sorted(got) == sorted(want)
    out = {}
    for k, ref in want.items():
        if k.endswith(".conv"):
            ref = ref[:, 1:]  # HF's conv window holds the current column too; the engine keeps K-1
        out[k] = float(np.max(np.abs(got[k] - ref)) / np.max(np.abs(ref)))
    return out


def test_goldens_cover_every_supported_model_type():
    types = {meta(n)["model_type"] for n in NAMES}
    assert types == set(SUPPORTED_MODEL_TYPES), types
    assert any(meta(n)["model_type"] == "qwen3_next" and meta(n)["builder"] == "build_moe" for n in NAMES)


@pytest.mark.parametrize("ops", OPS_NAMES)
@pytest.mark.parametrize("name", NAMES)
def test_engine_matches_hf_golden(name, ops):
    err = errors(engine_arrays(name, ops), golden(name))
    print(f"\n{name} {ops} max rel err vs HF: {max(err.values()):.2e} ({max(err, key=err.get)})")
    assert max(err.values()) < GOLDEN_RTOL, err


@pytest.mark.parametrize("name", NAMES)
def test_verify_rows_match_hf_steps(name):
    """A verify of the step tokens gives, row for row, HF's cached single steps."""
    m = meta(name)
    target = load_target(GOLDEN / name / "checkpoint", row_set=8, ops="numpy")
    st = target.new_state()
    target.forward(m["prompt"], st)
    rows = target.verify(m["steps"], st).logits
    want = golden(name)["step_logits"]
    assert float(np.max(np.abs(rows - want)) / np.max(np.abs(want))) < GOLDEN_RTOL


def _negated_update(S, q, k, v, alpha, beta):
    """The delta rule with the sign of its write flipped: S + k (v - kS) b  ->  S - k (v - kS) b."""
    return _DELTA_RULE_STEP(S, q, k, v, alpha, -beta)


_DELTA_RULE_STEP = gated_delta.delta_rule_step
_TargetConfig_rot_dim = TargetConfig.rot_dim


def _mutate(mp: pytest.MonkeyPatch, mutation: str) -> None:
    import dataclasses

    import onebit_engine.hybrid.ops as target_ops
    from onebit_engine.ops.moe import route_rows_numpy
    from onebit_engine.ops.norm import rms_norm_zc

    if mutation == "delta-rule-sign":
        mp.setattr(gated_delta, "delta_rule_step", _negated_update)
    elif mutation == "rmsnorm-no-centring":  # x / rms(x) * w instead of * (1 + w)
        uncentred = lambda x, w, eps, threads=1: rms_norm_zc(x, w - np.float32(1.0), eps)  # noqa: E731
        mp.setattr(target_ops, "rms_norm_zc", uncentred)  # the q/k norms of the numpy attention
        mp.setattr(target_ops, "NUMPY_OPS", dataclasses.replace(target_ops.NUMPY_OPS, norm=uncentred))  # layer + final
    elif mutation == "rope-full-rotary":  # partial_rotary_factor ignored: every dim rotated
        mp.setattr(TargetConfig, "rot_dim", property(lambda self: self.head_dim))
    elif mutation == "moe-no-renormalise":  # top-k weights left as softmax probabilities
        unnormed = lambda logits, n, k, norm: route_rows_numpy(logits, n, k, False)  # noqa: E731
        mp.setattr(target_ops, "NUMPY_OPS", dataclasses.replace(target_ops.NUMPY_OPS, moe_route=unnormed))
    else:
        raise AssertionError(mutation)


MUTATIONS = ["delta-rule-sign", "rmsnorm-no-centring", "rope-full-rotary", "moe-no-renormalise"]


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_a_wrong_formula_fails_the_goldens(mutation, monkeypatch):
    """The goldens have power: each classic mistake, made in the numpy reference, moves the logits of
    every golden that has the feature far past GOLDEN_RTOL (measured: >= 1.8e-3, 90x; the states
    move more), so even the logits alone catch it."""
    names = [n for n in NAMES if mutation != "moe-no-renormalise" or meta(n)["builder"] == "build_moe"]
    assert names
    with monkeypatch.context() as mp:
        _mutate(mp, mutation)
        errs = {n: errors(engine_arrays(n, "numpy"), golden(n)) for n in names}
    logits = {n: max(e["prefill_logits"], e["step_logits"]) for n, e in errs.items()}
    print(f"\n{mutation} logits: " + ", ".join(f"{n} {e:.1e}" for n, e in logits.items()))
    assert all(e > 50 * GOLDEN_RTOL for e in logits.values()), logits
    assert TargetConfig.rot_dim is _TargetConfig_rot_dim and gated_delta.delta_rule_step is _DELTA_RULE_STEP


def test_goldens_run_without_torch():
    """The comparison needs neither torch nor transformers: run it with both blocked from importing."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "import pytest\n"
            f"rc = pytest.main([{__file__!r}, '-q', '-p', 'no:cacheprovider', '-p', 'no:xdist', '-k', 'matches or cover'])\n"
            "assert all(m is None for k, m in sys.modules.items() if k.split('.')[0] in ('torch', 'transformers'))\n"
            "sys.exit(int(rc))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                       cwd=str(GOLDEN.parent.parent), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]
