"""The native paths' tile layout (gemm/host_int/layout.py): the numpy packer and its inverse, the layout
pinned on a tiny case, and the TiledWeight <-> QuantWeight round trip."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine.gemm.host_int.layout import (TILE_WIDTH, TiledWeight, negative_sums, sign_magnitude, tile_codes,
                                                untile_codes)
from onebit_engine.quant import FORMATS, quantize_weight
from onebit_engine.quant.formats import QMAX


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("width", [8, 16])
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 70), seed=st.integers(0, 2**32 - 1))
def test_tile_untile_round_trip(fmt, width, n, k, seed):
    q = np.random.default_rng(seed).integers(-QMAX[fmt], QMAX[fmt] + 1, (n, k)).astype(np.int8)
    assert np.array_equal(untile_codes(tile_codes(q, fmt, width), fmt, n, k), q)
    if fmt == "int8":
        assert np.array_equal(untile_codes(tile_codes(q, fmt, width, True), fmt, n, k, True), q)


def test_tile_layout_is_pinned():
    q = np.zeros((2, 16), np.int8)
    q[1, 5], q[0, 12] = -3, 1
    t8 = tile_codes(q, "int8", 8)  # [1 tile, 4 steps, 8 channels, 4]
    assert t8.shape == (1, 4, 8, 4) and t8[0, 1, 1, 1] == 125 and t8[0, 3, 0, 0] == 129 and t8[0, 0, 5, 0] == 128
    t4 = tile_codes(np.clip(q, -7, 7), "int4", 16)  # k = 8s + i low nibble, 8s + 4 + i high nibble
    assert t4.shape == (1, 2, 16, 4) and t4[0, 0, 1, 1] == (5 << 4) | 8 and t4[0, 1, 0, 0] == (9 << 4) | 8
    tt = tile_codes(np.clip(q, -1, 1), "ternary", 8)  # k = 16s + 4f + i at bits 2f
    assert tt[0, 0, 1, 1] == 0b01_01_00_01 and tt[0, 0, 0, 0] == 0b10_01_01_01
    sm = tile_codes(q, "int8", 8, True)  # sign and magnitude: |code| + 128 * (code < 0), padding 0
    assert sm[0, 1, 1, 1] == 128 + 3 and sm[0, 3, 0, 0] == 1 and sm[0, 0, 5, 0] == 0 and sm[0, 1, 1, 0] == 0
    edge = tile_codes(np.array([[-127, 127, 0, -1]], np.int8), "int8", 8, True)
    assert edge[0, 0, 0].tolist() == [255, 127, 0, 129]


def test_which_paths_store_sign_and_magnitude():
    assert sign_magnitude("avx2", "int8")
    assert not any(sign_magnitude(p, f) for p in TILE_WIDTH for f in FORMATS if (p, f) != ("avx2", "int8"))


def test_negative_sums():
    q = np.array([[-3, 2, -1], [5, 0, 0]], np.int8)
    assert negative_sums(q, 8).tolist() == [4, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("path", sorted(TILE_WIDTH))
def test_tiled_weight_round_trip_and_size(fmt, path):
    qw = quantize_weight(np.random.default_rng(1).standard_normal((37, 101)).astype(np.float32), fmt)
    tw = TiledWeight.from_quant(qw, path)
    back = tw.to_quant()
    assert np.array_equal(back.data, qw.data) and np.array_equal(back.scale, qw.scale) and back.shape == qw.shape
    assert np.array_equal(tw.dequantize(), qw.dequantize())
    # the tiles replace the file format's codes: the same bytes up to the padding of N and K
    t = TILE_WIDTH[path]
    assert tw.tiles.nbytes == -(-37 // t) * t * tw.tiles.shape[1] * 4
    assert (tw.ccorr is not None) == (path == "avx2" and fmt == "int8")


def test_tiled_weight_refuses_a_wrong_shape():
    qw = quantize_weight(np.ones((3, 5), np.float32), "int8")
    tw = TiledWeight.from_quant(qw, "avx2")
    with pytest.raises(ValueError, match="must be C-contiguous uint8"):
        TiledWeight("int8", (3, 9), tw.scale, tw.tiles, "avx2")
