"""``ops.kv_cache.KVCache``, the one KV cache of the target's attention layers and the draft's layers:
append / view / prefix / truncate / growth in both layouts, and bits that do not depend on capacity."""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.errors import StateError
from onebit_engine.ops.kv_cache import MIN_CAPACITY, KVCache, grown_capacity

H, HD = 2, 5
LAYOUTS = [False, True]


def rows(rng, t):
    k = rng.standard_normal((H, t, HD)).astype(np.float32)
    v = rng.standard_normal((H, t, HD)).astype(np.float32)
    return k, v


@pytest.mark.parametrize("keys_last", LAYOUTS)
def test_append_view_prefix(keys_last):
    rng = np.random.default_rng(0)
    c = KVCache(H, HD, keys_last=keys_last)
    assert c.length == 0 and c.capacity == 0
    k1, v1 = rows(rng, 3)
    k2, v2 = rows(rng, 1)
    c.append(k1, v1)
    c.append(k2[:, 0], v2[:, 0])  # [H, hd]: one row
    want_k, want_v = np.concatenate([k1, k2], axis=1), np.concatenate([v1, v2], axis=1)
    assert c.length == 4
    k, v = c.view()
    assert k.shape == v.shape == (H, 4, HD)
    np.testing.assert_array_equal(k, want_k)
    np.testing.assert_array_equal(v, want_v)
    assert np.shares_memory(k, c.keys) and np.shares_memory(v, c.values)
    pk, pv = c.prefix(2)
    assert pk.flags.c_contiguous and pv.flags.c_contiguous and not np.shares_memory(pk, c.keys)
    np.testing.assert_array_equal(pk, want_k[:, :2])
    np.testing.assert_array_equal(pv, want_v[:, :2])
    np.testing.assert_array_equal(c.view(1)[0], want_k[:, :1])
    if keys_last:  # positions last: keys [H, hd, capacity]
        assert c.keys.shape == (H, HD, c.capacity)
        np.testing.assert_array_equal(c.keys[:, :, 3], k2[:, 0])
    else:
        assert c.keys.shape == (H, c.capacity, HD)
        np.testing.assert_array_equal(c.keys[:, 3], k2[:, 0])
    assert c.values.shape == (H, c.capacity, HD)


@pytest.mark.parametrize("keys_last", LAYOUTS)
def test_truncate_shrinks_and_raises_state_error(keys_last):
    rng = np.random.default_rng(1)
    c = KVCache(H, HD, keys_last=keys_last)
    c.append(*rows(rng, 5))
    before = c.prefix(3)
    c.truncate(3)
    assert c.length == 3 and c.view()[0].shape == (H, 3, HD)
    for a, b in zip(before, c.prefix(3)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(StateError) as e:
        c.truncate(4)
    msg = str(e.value)
    assert "holding 3 rows to 4 rows" in msg and "only shrinks" in msg and "0 <= n <= 3" in msg, msg
    with pytest.raises(StateError, match="to -1 rows"):
        c.truncate(-1)
    assert c.length == 3
    c.truncate(0)
    assert c.length == 0 and c.view()[1].shape == (H, 0, HD)


@pytest.mark.parametrize("keys_last", LAYOUTS)
def test_growth_policy_and_live_rows_kept(keys_last):
    rng = np.random.default_rng(2)
    c = KVCache(H, HD, keys_last=keys_last)
    ks, vs, caps = [], [], []
    for t in [1, 70, 3, 100, 200, 1]:
        have = c.capacity
        k, v = rows(rng, t)
        c.append(k, v)
        ks.append(k)
        vs.append(v)
        need = c.length
        caps.append(c.capacity)
        assert c.capacity == (have if need <= have else grown_capacity(have, need))
        np.testing.assert_array_equal(c.view()[0], np.concatenate(ks, axis=1))
        np.testing.assert_array_equal(c.view()[1], np.concatenate(vs, axis=1))
    assert caps[0] == MIN_CAPACITY and len(set(caps)) >= 3  # it grew several times
    assert grown_capacity(0, 1) == MIN_CAPACITY and grown_capacity(64, 65) == 128 and grown_capacity(64, 300) == 300
    c.reserve(c.capacity - 1)  # no-op
    assert c.capacity == caps[-1]


@pytest.mark.parametrize("keys_last", LAYOUTS)
def test_grown_cache_has_the_bits_of_one_allocated_large(keys_last):
    """Same appends and a truncate, once into a cache grown many times, once into one allocated large."""
    rng = np.random.default_rng(3)
    steps = [rows(rng, t) for t in [2, 1, 90, 7, 150, 1, 1]]
    small, large = KVCache(H, HD, keys_last=keys_last), KVCache(H, HD, capacity=1024, keys_last=keys_last)
    for i, (k, v) in enumerate(steps):
        for c in (small, large):
            c.append(k, v)
            if i == 3:
                c.truncate(c.length - 4)  # dead rows are overwritten by the next append
    assert small.capacity < large.capacity and small.length == large.length
    for a, b in zip(small.view(), large.view()):
        assert a.tobytes() == b.tobytes()
    for a, b in zip(small.prefix(small.length), large.prefix(large.length)):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("keys_last", LAYOUTS)
def test_copy_is_independent(keys_last):
    rng = np.random.default_rng(4)
    c = KVCache(H, HD, keys_last=keys_last)
    c.append(*rows(rng, 4))
    d = c.copy()
    assert (d.keys_last, d.length, d.capacity) == (keys_last, 4, c.capacity)
    d.append(*rows(rng, 100))
    d.values[0, 0, 0] += 1.0
    assert c.length == 4 and c.values[0, 0, 0] != d.values[0, 0, 0]


def test_target_bits_do_not_depend_on_kv_capacity():
    """The target's attention (numpy and compiled paths) reads live rows only: steps and a verify on
    caches pre-grown to a large capacity give the bits of the default caches."""
    from onebit_engine.ops.attention_fast import nb
    from onebit_engine.hybrid.synthetic import random_target, tiny_config

    cfg = tiny_config(num_hidden_layers=4, full_attention_interval=2)
    for ops in ["numpy"] + (["numba"] if nb is not None else []):
        target = random_target(cfg, seed=3, ops=ops)
        outs = []
        for big in (False, True):
            st = target.new_state()
            if big:
                for layer in st.layers:
                    if isinstance(layer, KVCache):
                        layer.reserve(700)
            a = target.forward([5, 9, 14, 3, 77], st)
            b = target.verify([21, 60, 2, 33], st)
            target.commit(st, 2, path="replay")
            c = target.forward([8], st)
            outs.append([a.logits, b.logits, c.logits] + list(st.arrays().values()))
        assert any(isinstance(s, KVCache) and s.capacity >= 700 for s in st.layers)
        for x, y in zip(*outs):
            assert x.tobytes() == y.tobytes(), ops


def test_target_truncate_past_length_is_a_state_error():
    from onebit_engine.hybrid.synthetic import random_target, tiny_config

    target = random_target(tiny_config(num_hidden_layers=2, full_attention_interval=2), seed=1)
    st = target.new_state()
    target.forward([1, 2, 3], st)
    kv = [s for s in st.layers if isinstance(s, KVCache)]
    assert kv and all(s.keys_last and s.length == 3 for s in kv)  # the compiled score loop's layout
    with pytest.raises(StateError, match="holding 3 rows to 5 rows: truncate only shrinks"):
        kv[0].truncate(5)


def test_draft_attention_bits_do_not_depend_on_kv_capacity():
    """The draft's attention twins (numpy, numba) read a keys_last cache's live columns only."""
    from onebit_engine.draft.kernels import nb
    from onebit_engine.draft.ops import NUMBA_OPS, NUMPY_OPS
    from onebit_engine.draft.state import DraftState

    rng = np.random.default_rng(5)
    hq, hk, hd, b = 4, 2, 8, 3
    appends = [rng.standard_normal((hk, t, hd)).astype(np.float32) for t in (3, 60, 9)]
    qkv = rng.standard_normal((b, (hq + 2 * hk) * hd)).astype(np.float32)
    qn, kn = (1.0 + 0.1 * rng.standard_normal((2, hd))).astype(np.float32)
    ang = np.arange(72, 72 + b, dtype=np.float32)[:, None] * np.full(hd // 2, 0.1, np.float32)
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))
    for ops in [NUMPY_OPS] + ([NUMBA_OPS] if nb is not None else []):
        outs = []
        for big in (False, True):
            st = DraftState(1, hk, hd)
            if big:
                st.caches[0].reserve(2000)
            for k in appends:
                st.append(0, k, 2.0 * k)
                st.advance(k.shape[1])
            assert (st.capacity >= 2000) == big and st.view(0)[0].shape == (hk, 72, hd)
            outs.append(ops.attention(qkv, hq, hk, qn, kn, cos, sin, 1e-6, st.kt[0], st.v[0], st.length, True, None))
        assert outs[0].tobytes() == outs[1].tobytes(), ops.name


def test_draft_state_append_advance_truncate():
    from onebit_engine.draft.state import DraftState

    rng = np.random.default_rng(6)
    st = DraftState(2, H, HD)
    assert all(c.keys_last for c in st.caches)
    k, v = rows(rng, 4)
    st.append(0, k, v)
    with pytest.raises(StateError, match="layers \\[1\\] hold \\[0\\]"):
        st.advance(4)
    with pytest.raises(StateError, match="append each layer once"):
        st.append(0, k, v)
    st.append(1, k, v)
    st.advance(4)
    np.testing.assert_array_equal(st.view(1)[0], k)
    np.testing.assert_array_equal(st.kt[1][:, :, :4], k.transpose(0, 2, 1))
    st.truncate(1)
    assert st.length == 1 and all(c.length == 1 for c in st.caches)
    with pytest.raises(StateError, match="only shrinks"):
        st.truncate(2)
    d = st.copy()
    d.append(0, k, v)
    assert st.caches[0].length == 1
