"""Checkpoint tensors read on demand: the same values as the whole-file reader, the streaming writer's
files read by the safetensors package, and every misuse refused by name."""
from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from onebit_engine.checkpoint.safetensors import file_refs, iter_tensors
from onebit_engine.checkpoint.writer import StreamWriter
from onebit_engine.errors import CheckpointError


def _tensors():
    rng = np.random.default_rng(3)
    return {"f32": rng.standard_normal((70, 5)).astype(np.float32), "f16": rng.standard_normal((3, 4, 5)).astype(np.float16),
            "f64": rng.standard_normal(9), "i8": rng.integers(-5, 5, (4, 4), dtype=np.int8),
            "u8": rng.integers(0, 255, (6,), dtype=np.uint8), "scalar": np.array(2.5, np.float32)}


def test_refs_read_what_iter_tensors_reads(tmp_path):
    path = tmp_path / "a.safetensors"
    save_file(_tensors(), str(path))
    whole = dict(iter_tensors(path))
    refs = file_refs(path)
    for name, arr in whole.items():
        got = refs[name].load()
        assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr), name
    f32 = refs["f32"]
    assert np.array_equal(f32.rows(60, 70), whole["f32"][60:70]) and f32.blocks(100)[0] == (0, 5)
    assert np.array_equal(refs["f16"].rows(1, 3), whole["f16"][1:3].reshape(2, 20).astype(np.float32))


def test_bf16_widens_exactly_and_nonfinite_values_are_counted(tmp_path):
    from onebit_engine.synth.folder import _as

    v = np.array([[1.5, -2.0, np.nan, np.inf], [0.1, -np.inf, 3.0, np.nan]], np.float32)
    path = tmp_path / "b.safetensors"
    with StreamWriter(path, [("b", "BF16", v.shape), ("f", "F32", v.shape)]) as w:
        w.write("b", _as(v, "BF16"))
        w.write("f", v)
    refs = file_refs(path)
    assert np.array_equal(refs["b"].load(), dict(iter_tensors(path))["b"], equal_nan=True)
    assert refs["b"].count_nonfinite() == (2, 2) == refs["f"].count_nonfinite()


def test_the_streaming_writer_writes_what_safetensors_reads(tmp_path):
    t = {k: v for k, v in _tensors().items() if k != "scalar"}
    path = tmp_path / "w.safetensors"
    with StreamWriter(path, [(n, {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
                                  np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8"}[a.dtype], a.shape) for n, a in t.items()],
                      metadata={"k": "v"}) as w:
        for n, a in t.items():
            if n == "f32":
                w.write(n, a[:40], partial=True)
                w.write(n, a[40:], partial=True)
            else:
                w.write(n, a)
    back = load_file(str(path))
    assert set(back) == set(t) and all(np.array_equal(back[n], t[n]) for n in t)


def test_the_streaming_writer_refuses_misuse(tmp_path):
    with pytest.raises(CheckpointError, match="comes next"):
        with StreamWriter(tmp_path / "x", [("a", "F32", (2,)), ("b", "F32", (2,))]) as w:
            w.write("b", np.zeros(2, np.float32))
    with pytest.raises(CheckpointError, match="declared F32"):
        with StreamWriter(tmp_path / "y", [("a", "F32", (2,))]) as w:
            w.write("a", np.zeros(2, np.float64))
    with pytest.raises(CheckpointError, match="never written"):
        with StreamWriter(tmp_path / "z", [("a", "F32", (2,))]):
            pass
    with pytest.raises(CheckpointError, match="declared twice"):
        StreamWriter(tmp_path / "d", [("a", "F32", (2,)), ("a", "F32", (2,))])
