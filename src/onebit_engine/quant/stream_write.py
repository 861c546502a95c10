"""Quantize a checkpoint's projections into a file, a block of rows at a time (``onebit quantize``).

Nothing holds a whole weight: each source is read, quantized and written one block at a time
(per-row scales and codes: the bits of quantizing it whole), its scales (4 bytes a row) kept until its
codes are out. The file is the one ``io.save_quantized`` writes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..checkpoint.writer import StreamWriter
from .formats import CODES_PER_BYTE, QuantWeight, quantize_weight
from .io import FORMAT_VERSION, HEADER_KEY
from .rows import RowSource, blocks


@dataclass
class Written:
    """One weight written: its shape and quantized bytes, and the relative Frobenius error of its
    dequantization (accumulated in float64 over the blocks)."""

    name: str
    shape: tuple[int, int]
    bytes: int
    rel_error: float


def write_quantized(path: Path, sources: dict[str, RowSource], fmt: str, tick: Callable[[int], None] = lambda n: None) -> list[Written]:
    entries, header = [], {}
    for name, src in sources.items():
        n, k = src.shape
        entries += [(f"{name}.qdata", "U8", (n, -(-k // CODES_PER_BYTE[fmt]))), (f"{name}.scale", "F32", (n,))]
        header[name] = {"format": fmt, "shape": [n, k]}
    meta = {HEADER_KEY: json.dumps({"version": FORMAT_VERSION, "weights": header}, sort_keys=True)}
    out = []
    with StreamWriter(path, entries, meta) as w:
        for name, src in sources.items():
            scales, err, norm = [], 0.0, 0.0
            for lo, hi in blocks(src):
                block = src.block(lo, hi)
                if isinstance(block, QuantWeight):
                    raise ValueError(f"{name} is already quantized ({block.fmt}); quantize a float checkpoint")
                qw = quantize_weight(block, fmt)
                d = qw.dequantize().astype(np.float64) - block
                err, norm = err + float(np.sum(d * d)), norm + float(np.sum(block.astype(np.float64) ** 2))
                w.write(f"{name}.qdata", qw.data, partial=True)
                scales.append(qw.scale)
                tick(hi - lo)
            scale = np.concatenate(scales) if scales else np.zeros(0, np.float32)
            w.write(f"{name}.scale", scale)
            n, k = src.shape
            out.append(Written(name, (n, k), int(n * (-(-k // CODES_PER_BYTE[fmt])) + 4 * n), (err / max(norm, 1e-300)) ** 0.5))
    return out
