"""The target's compiled path (``ops="numba"``: ops/*_fast.py) against its numpy reference twin.

Within the compiled path the exact claims (verify == single steps, every commit path == the sequential
reference) are tested bitwise by ``test_batch_invariance.py`` and ``test_commit_equivalence.py``; here
the two paths are pinned together to rounding, on configs that stress each compiled op.
"""
import numpy as np
import pytest

from onebit_engine.ops.gated_delta_fast import gdn_mixer_rows
from onebit_engine.ops.norm import rms_norm, rms_norm_zc, silu
from onebit_engine.ops.norm_fast import rms_norm_rows, silu_mul
from onebit_engine.hybrid.synthetic import random_target, tiny_config

pytestmark = pytest.mark.skipif(gdn_mixer_rows is None, reason="numba is not installed (the fast extra)")

NORM_TWIN_RTOL = 1e-6  # float32 sequential sum vs numpy's pairwise sum over D <= 256, then one division
SILU_TWIN_RTOL = 5e-7  # the compiled exp is within 1.5 ulp of exp; numpy's within ~1 ulp
MODEL_TWIN_RTOL = 1e-4  # the same rounding carried through tens of tokens and several layers


@pytest.mark.parametrize("d", [1, 7, 64, 256])
def test_norm_and_silu_twins(d):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((8, d)).astype(np.float32) * 3
    w = rng.standard_normal(d).astype(np.float32)
    got = np.empty_like(x)
    for centred, twin in ((True, rms_norm_zc), (False, rms_norm)):
        rms_norm_rows(x, w, np.float32(1e-6), centred, got)
        want = twin(x, w, 1e-6)
        assert np.max(np.abs(got - want)) <= NORM_TWIN_RTOL * np.max(np.abs(want))
    y = rng.standard_normal((8, 2 * d)).astype(np.float32) * 4
    g = np.empty((8, d), np.float32)
    silu_mul(y, g)
    ref = silu(y[:, :d]) * y[:, d:]
    assert np.max(np.abs(g - ref)) <= SILU_TWIN_RTOL * np.max(np.abs(ref))


def test_targets_on_either_op_table_agree_closely():
    cfg = tiny_config()
    slow, fast = random_target(cfg, 3, ops="numpy"), random_target(cfg, 3, ops="numba")
    toks = list(range(1, 30))
    a = slow.forward(toks, slow.new_state()).logits
    b = fast.forward(toks, fast.new_state()).logits
    assert np.max(np.abs(a - b)) <= MODEL_TWIN_RTOL * np.max(np.abs(a))
    assert slow.ops.name == "numpy" and fast.ops.name == "numba"


@pytest.mark.parametrize("cfg", [
    dict(),  # the default tiny hybrid: 3 delta-net : 1 attention
    dict(full_attention_interval=1, num_key_value_heads=1),  # attention only, GQA 4:1
    dict(full_attention_interval=2, head_dim=16, num_key_value_heads=2, linear_conv_kernel_dim=2),
])
def test_compiled_target_follows_the_numpy_twin_over_a_long_context(cfg):
    """150 tokens: past the KV cache's first growth (64 rows), several row sets, decode steps too."""
    c = tiny_config(**cfg)
    slow, fast = random_target(c, 5, ops="numpy"), random_target(c, 5, ops="numba")
    toks = [int(t) for t in np.random.default_rng(2).integers(0, c.vocab_size, 150)]
    sa, sb = slow.new_state(), fast.new_state()
    a = [slow.forward(toks[:140], sa).logits] + [slow.forward([t], sa).logits for t in toks[140:]]
    b = [fast.forward(toks[:140], sb).logits] + [fast.forward([t], sb).logits for t in toks[140:]]
    a, b = np.concatenate(a), np.concatenate(b)
    assert np.max(np.abs(a - b)) <= MODEL_TWIN_RTOL * np.max(np.abs(a))
    for name, arr in sa.arrays().items():
        ref = sb.arrays()[name]
        assert arr.shape == ref.shape
        assert np.max(np.abs(arr - ref)) <= MODEL_TWIN_RTOL * max(np.max(np.abs(arr)), 1.0), name


def test_compiled_state_updates_never_reach_an_array_the_state_does_not_own():
    """The compiled path updates the delta-net state in place: a state holding views of another array
    (say, a verify's per-row checkpoints) must be copied first, never written through."""
    from onebit_engine.hybrid.state import GDNLayerState

    c = tiny_config()
    t = random_target(c, 7, ops="numba")
    st = t.new_state()
    t.forward([1, 2, 3], st)
    ref = st.copy()
    i = next(j for j, layer in enumerate(st.layers) if isinstance(layer, GDNLayerState))
    conv_base, rec_base = np.stack([st.layers[i].conv] * 2), np.stack([st.layers[i].recurrent] * 2)
    st.layers[i] = GDNLayerState(conv_base[0], rec_base[0])  # views, not owners
    before = conv_base.copy(), rec_base.copy()
    got, want = t.forward([4, 5], st).logits, t.forward([4, 5], ref).logits
    assert np.array_equal(conv_base, before[0]) and np.array_equal(rec_base, before[1])
    assert np.array_equal(got, want)
    assert np.array_equal(st.layers[i].recurrent, ref.layers[i].recurrent)
