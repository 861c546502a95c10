"""Quantized weight formats: codes, packing, the slow decoders, and the safetensors round trip."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from onebit_engine.errors import CheckpointError
from onebit_engine.quant import FORMATS, QuantWeight, load_quantized, quantize_weight, save_quantized
from onebit_engine.quant.formats import QMAX, pack_codes, unpack_codes
from onebit_engine.quant.io import HEADER_KEY


def _weight(rng, n, k):
    return rng.standard_normal((n, k)).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), k=st.integers(1, 37), seed=st.integers(0, 2**32 - 1))
def test_pack_unpack_round_trip(fmt, n, k, seed):
    q = np.random.default_rng(seed).integers(-QMAX[fmt], QMAX[fmt] + 1, (n, k)).astype(np.int8)
    data = pack_codes(fmt, q)
    assert data.shape == (n, -(-k // {"int8": 1, "int4": 2, "ternary": 4}[fmt]))
    assert np.array_equal(unpack_codes(fmt, data, k), q)


def test_packing_bit_layout_is_pinned():
    q = np.array([[1, -1, 7, -7]], np.int8)
    assert pack_codes("int4", q).tolist() == [[0xF1, 0x97]]  # even k in the low nibble
    t = np.array([[0, 1, -1, 0, 1]], np.int8)
    assert pack_codes("ternary", t).tolist() == [[0b00_10_01_00, 0b01]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_matches_the_written_rule(fmt):
    rng = np.random.default_rng(0)
    w = _weight(rng, 6, 40)
    w[2] = 0.0
    qw = quantize_weight(w, fmt)
    if fmt == "ternary":
        sw = np.mean(np.abs(w), axis=1, dtype=np.float32)
    else:
        sw = np.max(np.abs(w), axis=1) / np.float32(QMAX[fmt])
    sw[2] = 1.0
    assert np.array_equal(qw.scale, sw.astype(np.float32))
    expect = np.clip(np.rint(w / sw[:, None]), -QMAX[fmt], QMAX[fmt]).astype(np.int8)
    assert np.array_equal(qw.codes(), expect)
    assert not qw.codes()[2].any()


def test_int8_is_the_device_contract_weight():
    w = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0]], np.float32)
    qw = quantize_weight(w, "int8")
    assert qw.scale.tolist() == [np.float32(1.0) / np.float32(127), 1.0]
    assert qw.codes().tolist() == [[64, -127, 32], [0, 0, 0]]  # 63.5 rounds half to even


def test_half_way_ties_round_to_even():
    w = np.array([[2.5, 3.5, -2.5, 7.0]], np.float32)  # max|W| = 7 -> int4 scale exactly 1.0
    assert quantize_weight(w, "int4").codes().tolist() == [[2, 4, -2, 7]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_save_load_round_trip(tmp_path, fmt):
    rng = np.random.default_rng(1)
    weights = {"layers.0.q_proj": quantize_weight(_weight(rng, 5, 13), fmt), "lm_head": quantize_weight(_weight(rng, 3, 8), fmt)}
    path = tmp_path / "q.safetensors"
    save_quantized(path, weights)
    back = load_quantized(path)
    assert sorted(back) == sorted(weights)
    for name, qw in weights.items():
        got = back[name]
        assert (got.fmt, got.shape) == (qw.fmt, qw.shape)
        assert np.array_equal(got.data, qw.data) and np.array_equal(got.scale, qw.scale)


def _rewrite_header(path, header):
    from safetensors.numpy import load_file, save_file

    save_file(load_file(str(path)), str(path), metadata={HEADER_KEY: json.dumps(header)})


def test_unknown_version_names_version_and_fix(tmp_path):
    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": quantize_weight(np.ones((2, 4), np.float32), "int4")})
    _rewrite_header(path, {"version": 99, "weights": {"w": {"format": "int4", "shape": [2, 4]}}})
    with pytest.raises(CheckpointError, match=r"version 99 is not supported.*re-quantize"):
        load_quantized(path)


def test_missing_header_and_wrong_shape_are_clear(tmp_path):
    from safetensors.numpy import save_file

    plain = tmp_path / "plain.safetensors"
    save_file({"w": np.zeros((2, 2), np.float32)}, str(plain))
    with pytest.raises(CheckpointError, match="not a quantized weight file"):
        load_quantized(plain)
    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": quantize_weight(np.ones((2, 4), np.float32), "int4")})
    _rewrite_header(path, {"version": 1, "weights": {"w": {"format": "int4", "shape": [2, 9]}}})
    with pytest.raises(CheckpointError, match="'w' is inconsistent"):
        load_quantized(path)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="unknown"):
        quantize_weight(np.ones((2, 2), np.float32), "int3")
    with pytest.raises(ValueError, match="NaN"):
        quantize_weight(np.array([[np.nan]], np.float32))
    with pytest.raises(ValueError, match="uint8"):
        QuantWeight("int4", (2, 5), np.zeros((2, 2), np.uint8), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="code 3"):
        unpack_codes("ternary", np.full((1, 1), 0xFF, np.uint8), 4)
