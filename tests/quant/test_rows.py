"""Row sources and lookup tables: block by block is the whole weight, bitwise."""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.checkpoint.safetensors import file_refs
from onebit_engine.quant import quantize_weight
from onebit_engine.quant.formats import QuantWeight
from onebit_engine.quant.rows import FloatRows, Picked, QuantRows, Stacked, as_rows, blocks, load, quantize_source, quantized_blocks
from onebit_engine.quant.table import RowTable

FORMATS = ["int8", "int4", "ternary"]


def _w(n, k, seed=0):
    return np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n, k", [(1, 1), (63, 5), (64, 33), (130, 17), (257, 64)])
def test_quantizing_block_by_block_is_quantizing_whole(fmt, n, k):
    w = _w(n, k)
    whole = quantize_weight(w, fmt)
    got = quantize_source(FloatRows(w), fmt)
    parts = list(quantized_blocks(FloatRows(w), fmt, block_bytes=1))  # 64 rows a block
    assert [lo for lo, _ in parts] == list(range(0, n, 64))
    assert np.array_equal(got.data, whole.data) and np.array_equal(got.scale, whole.scale)


def test_stacked_and_picked_rows_are_concatenation_and_indexing():
    a, b = _w(70, 9, 1), _w(5, 9, 2)
    st = Stacked((as_rows(a), as_rows(b)))
    assert st.shape == (75, 9) and np.array_equal(load(st), np.concatenate([a, b]))
    for lo, hi in [(0, 75), (60, 72), (70, 75), (3, 4)]:
        assert np.array_equal(st.block(lo, hi), np.concatenate([a, b])[lo:hi])
    idx = np.array([5, 6, 7, 2, 70, 71, 0])
    pk = Picked(st, idx)
    assert np.array_equal(load(pk), np.concatenate([a, b])[idx])
    qa, qb = quantize_weight(a, "int4"), quantize_weight(b, "int4")
    qs = load(Stacked((as_rows(qa), as_rows(qb))))
    assert isinstance(qs, QuantWeight) and np.array_equal(qs.codes(), np.concatenate([qa.codes(), qb.codes()]))
    with pytest.raises(ValueError, match="one K and one format"):
        Stacked((as_rows(a), as_rows(qb)))
    with pytest.raises(ValueError, match="2-D"):
        as_rows(np.zeros(3, np.float32))


def test_blocks_cover_every_row_once_from_aligned_starts():
    for n in (0, 1, 64, 65, 1000):
        bl = blocks(FloatRows(np.zeros((n, 3), np.float32)), block_bytes=1)
        assert [r for lo, hi in bl for r in range(lo, hi)] == list(range(n))
        assert all(lo % 64 == 0 for lo, _ in bl)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_quantized_file_read_lazily_checks_its_codes(tmp_path, fmt):
    from onebit_engine.quant import save_quantized
    from onebit_engine.quant.io import open_quantized

    qw = quantize_weight(_w(130, 11), fmt)
    save_quantized(tmp_path / "q.safetensors", {"w": qw})
    lazy = open_quantized(tmp_path / "q.safetensors")["w"]
    assert isinstance(lazy, QuantRows) and np.array_equal(load(lazy).data, qw.data) and lazy.problems() == []
    bad = QuantRows(fmt, qw.shape, np.full_like(qw.data, {"int8": 0x80, "int4": 0x88, "ternary": 0xFF}[fmt]), qw.scale)
    assert any("codes outside" in p for p in bad.problems())


@pytest.mark.parametrize("kind", ["array", "f16-file", "bf16-file", "f64-file", "int8", "int4", "ternary"])
def test_a_lookup_table_gives_the_rows_of_the_whole_table(tmp_path, kind):
    from onebit_engine.checkpoint.writer import StreamWriter
    from onebit_engine.synth.folder import _as

    w = _w(300, 24, 5)
    if kind == "array":
        table, want = RowTable(w), w
    elif kind.endswith("-file"):
        dt = {"f16-file": "F16", "bf16-file": "BF16", "f64-file": "F64"}[kind]
        raw = _as(w, dt) if dt == "BF16" else w.astype({"F16": np.float16, "F64": np.float64}[dt])
        with StreamWriter(tmp_path / "t.safetensors", [("e", dt, raw.shape)]) as sw:
            sw.write("e", raw)
        ref = file_refs(tmp_path / "t.safetensors")["e"]
        table, want = RowTable(ref), np.asarray(ref.load(), np.float32)
        assert table.resident_bytes == 0  # mapped: nothing held until a row is read
    else:
        qw = quantize_weight(w, kind)
        table, want = RowTable(qw), qw.dequantize()
    for ids in (7, -2, [3, 3, 299], np.array([[0, 1], [2, 3]]), slice(10, 40, 7)):
        assert np.array_equal(table[ids], want[ids])
    assert np.array_equal(np.asarray(table), want)
