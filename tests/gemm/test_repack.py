"""The native re-tiler (repack.c) is bitwise its numpy twin (layout.tile_codes) on every path and format,
including odd K, partial last tiles and tile blocks that start inside a weight."""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine.gemm.host_int import native
from onebit_engine.gemm.host_int.layout import TiledWeight
from onebit_engine.quant import quantize_weight
from onebit_engine.quant.rows import QuantRows

pytestmark = pytest.mark.skipif(not native.available("avx2"), reason="the native host-int library does not build here")


@pytest.mark.parametrize("variant", ["main", "emulated"])
@pytest.mark.parametrize("fmt", ["int8", "int4", "ternary"])
@pytest.mark.parametrize("path", ["avx2", "avx512vnni"])
def test_native_tiles_equal_numpy_tiles(variant, fmt, path):
    lib = native.load(variant)
    rng = np.random.default_rng(7)
    for n, k in [(1, 1), (5, 3), (37, 133), (130, 257), (100, 64), (33, 17), (16, 0)]:
        qw = quantize_weight(rng.standard_normal((n, k)).astype(np.float32), fmt)
        a = TiledWeight.from_rows(QuantRows.of(qw), path, fmt)
        b = TiledWeight.from_rows(QuantRows.of(qw), path, fmt, lib.tile_block)
        assert np.array_equal(a.tiles, b.tiles), (fmt, path, n, k)
        assert (a.ccorr is None) == (b.ccorr is None) and (a.ccorr is None or np.array_equal(a.ccorr, b.ccorr))
        assert np.array_equal(b.codes(), qw.codes())
