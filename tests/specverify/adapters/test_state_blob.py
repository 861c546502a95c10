"""helpers.state_blob: the pieces a parser of an opaque engine state is built from (no engine needed)."""
import struct

import numpy as np
import pytest

from pytest_specverify.helpers.state_blob import BlobFormatError, BlobReader, ggml_array, rows_by_position


def test_the_reader_reads_little_endian_scalars_and_fails_on_what_is_missing_or_left():
    rd = BlobReader(struct.pack("<IiQ", 7, -3, 1 << 40) + b"\1\2", what="test blob")
    assert (rd.u32(), rd.i32(), rd.u64()) == (7, -3, 1 << 40)
    with pytest.raises(BlobFormatError, match=r"test blob: the tail needs 4 bytes at offset 16, but only 2 are left of 18"):
        rd.raw(4, "the tail")
    with pytest.raises(BlobFormatError, match="2 bytes left unread at offset 16 of 18"):
        rd.done()
    rd.raw(2)
    rd.done()


def test_expect_names_the_value_and_the_offset():
    rd = BlobReader(struct.pack("<I", 2))
    with pytest.raises(BlobFormatError, match="the stream count is 2 at offset 4, expected 1"):
        rd.expect(1, rd.u32(), "the stream count")


@pytest.mark.parametrize("type_id, raw", [(0, np.array([1.5, -2.25], "<f4").tobytes()),
                                         (1, np.array([1.5, -2.25], "<f2").tobytes()),
                                         (30, (np.array([1.5, -2.25], "<f4").view("<u4") >> 16).astype("<u2").tobytes())])
def test_ggml_types_become_float32(type_id, raw):
    assert ggml_array(raw, type_id, (2,)).tolist() == [1.5, -2.25]


def test_ggml_array_refuses_a_quantized_type_and_a_wrong_size():
    with pytest.raises(BlobFormatError, match="ggml type 8 is not one of"):
        ggml_array(b"\0" * 34, 8, (32,))
    with pytest.raises(BlobFormatError, match="8 bytes of f32 do not fill shape \\(3,\\)"):
        ggml_array(b"\0" * 8, 0, (3,))


def test_rows_by_position_sorts_slots_and_refuses_a_duplicate_position():
    rows = np.array([[30.0], [10.0], [20.0]])
    got, pos = rows_by_position(rows, [3, 1, 2])
    assert got[:, 0].tolist() == [10.0, 20.0, 30.0] and pos.tolist() == [1, 2, 3]
    with pytest.raises(BlobFormatError, match="two rows at position 2"):
        rows_by_position(rows, [2, 1, 2])
