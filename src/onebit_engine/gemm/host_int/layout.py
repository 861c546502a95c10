"""The tiled weight layout of the native host-int paths (``tiles.h`` is its C side).

A weight ``[N, K]`` is re-packed once, at ``pack``, into tiles of ``T`` output channels (8 for
``avx2``, 16 for ``avx512vnni``): ``tiles [ceil(N/T), S, T, 4]`` uint8, where one step ``s`` is one
vector load of ``T * 4`` bytes and byte ``4 * j + i`` of it holds channel ``j``'s biased codes:

=========  ======================================  =======================
format     byte ``(t, s, j, i)``                     steps ``S``
=========  ======================================  =======================
int8       ``code(4s + i) + 128`` (``avx512vnni``)   ``ceil(K / 4)``
           ``|code| + 128 * (code < 0)`` (``avx2``)
int4       low nibble ``code(8s + i) + 8``,          ``ceil(K / 8)``
           high nibble ``code(8s + 4 + i) + 8``
ternary    bits ``2f`` ``code(16s + 4f + i) + 1``    ``ceil(K / 16)``
=========  ======================================  =======================

(``code(k)`` of channel ``t * T + j``; padding holds code 0). ``avx2`` int8 stores sign and magnitude
(``sign_magnitude``): its kernel needs ``|w|`` and the sign mask, which that form gives in one vector
op each instead of three for the two (4-8% faster at 8 rows, docs/host-int.md).
It replaces the codes of the file format (``QuantWeight.data``), it does not sit beside them: the same bytes up to the padding of N to a multiple
of ``T`` and of K to a whole step, plus, for ``avx2`` int8, one int32 per channel (``ccorr``: the sum
of ``|w|`` over the negative codes, which the kernel's xor form needs). ``to_quant()`` gives the file
format back. ``tile_codes`` / ``untile_codes`` are the slow numpy twins of the C kernels' reading.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...quant.formats import CODES_PER_BYTE, FORMATS, QuantWeight, pack_codes
from ...quant.rows import QuantRows, RowSource, quantized_blocks

TILE_WIDTH = {"avx2": 8, "avx512vnni": 16, "avx512vnni-emulated": 16}
PATH_IDS = {"avx2": 0, "avx512vnni": 1, "avx512vnni-emulated": 1}  # the emulation runs the VNNI layout
FORMAT_IDS = {"int8": 0, "int4": 1, "ternary": 2}
BIAS = {"int8": 128, "int4": 8, "ternary": 1}
FIELD_BITS = {f: 8 // cpb for f, cpb in CODES_PER_BYTE.items()}  # bits of one code in a packed byte


def steps(fmt: str, k: int) -> int:
    """Steps per tile: one step is 4 bytes of each channel, 4 * codes-per-byte values of K."""
    return -(-k // (4 * CODES_PER_BYTE[fmt]))


def sign_magnitude(path: str, fmt: str) -> bool:
    """Whether ``path`` stores ``fmt`` as sign and magnitude (avx2 int8) rather than code + BIAS."""
    return path == "avx2" and fmt == "int8"


def tile_codes(codes: np.ndarray, fmt: str, width: int, signmag: bool = False) -> np.ndarray:
    """int8 codes ``[N, K]`` -> tiles ``[ceil(N / width), S, width, 4]`` uint8 (module table)."""
    n, k = codes.shape
    cpb, s = CODES_PER_BYTE[fmt], steps(fmt, k)
    nt = -(-n // width)
    c = codes.astype(np.int16)
    biased = np.zeros((nt * width, s * 4 * cpb), np.uint16)
    if signmag:  # int8 only; padding: 0 = code 0
        biased[:n, :k] = np.where(c < 0, 128 - c, c)
    else:
        biased[:] = BIAS[fmt]  # padding: code 0
        biased[:n, :k] = c + BIAS[fmt]
    fields = biased.reshape(nt, width, s, cpb, 4)  # [t, j, s, f, i]: k = (s * cpb + f) * 4 + i
    packed = np.zeros((nt, width, s, 4), np.uint16)
    for f in range(cpb):
        packed |= fields[:, :, :, f, :] << (FIELD_BITS[fmt] * f)
    return np.ascontiguousarray(packed.transpose(0, 2, 1, 3).astype(np.uint8))  # [t, s, j, i]


def untile_codes(tiles: np.ndarray, fmt: str, n: int, k: int, signmag: bool = False) -> np.ndarray:
    """The inverse of ``tile_codes``: tiles -> int8 codes ``[n, k]``."""
    nt, s, width, _ = tiles.shape
    cpb, bits = CODES_PER_BYTE[fmt], FIELD_BITS[fmt]
    b = tiles.transpose(0, 2, 1, 3).astype(np.int16)  # [t, j, s, i]
    fields = np.stack([(b >> (bits * f)) & ((1 << bits) - 1) for f in range(cpb)], axis=3)  # [t, j, s, f, i]
    v = fields.reshape(nt * width, s * cpb * 4)
    v = np.where(v & 0x80, -(v & 0x7F), v) if signmag else v - BIAS[fmt]
    return v[:n, :k].astype(np.int8)


def negative_sums(codes: np.ndarray, width: int) -> np.ndarray:
    """``sum(|w| over w < 0)`` per channel, int32, zero padded to whole tiles."""
    n = codes.shape[0]
    out = np.zeros(-(-n // width) * width, np.int32)
    out[:n] = -np.minimum(codes.astype(np.int32), 0).sum(axis=1)
    return out


class _WeightStruct(ctypes.Structure):
    """``hi_weight_t`` of kernel.c."""

    _fields_ = [("path", ctypes.c_int32), ("fmt", ctypes.c_int32), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
                ("steps", ctypes.c_int64), ("tiles", ctypes.c_void_p), ("ccorr", ctypes.c_void_p),
                ("sw", ctypes.c_void_p)]


@dataclass(frozen=True, eq=False)
class TiledWeight:
    """A quantized ``[N, K]`` weight in the tile layout of native path ``path``; float32 ``scale [N]``."""

    fmt: str
    shape: tuple[int, int]
    scale: np.ndarray
    tiles: np.ndarray
    path: str
    ccorr: "np.ndarray | None" = None

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS or self.path not in TILE_WIDTH:
            raise ValueError(f"format {self.fmt!r} / path {self.path!r} unknown; choose from {FORMATS} / {tuple(TILE_WIDTH)}")
        n, k = self.shape
        t = TILE_WIDTH[self.path]
        want = (-(-n // t), steps(self.fmt, k), t, 4)
        if self.tiles.dtype != np.uint8 or self.tiles.shape != want or not self.tiles.flags.c_contiguous:
            raise ValueError(f"tiles for {self.fmt} {self.shape} on {self.path} must be C-contiguous uint8 {want}, got "
                             f"{self.tiles.dtype} {self.tiles.shape}; build them with TiledWeight.from_quant()")
        if self.scale.dtype != np.float32 or self.scale.shape != (n,) or not self.scale.flags.c_contiguous:
            raise ValueError(f"scale must be C-contiguous float32 [{n}], got {self.scale.dtype} {self.scale.shape}")
        if self.ccorr is not None and (self.ccorr.dtype != np.int32 or self.ccorr.shape != (want[0] * t,)):
            raise ValueError(f"ccorr must be int32 [{want[0] * t}], got {self.ccorr.dtype} {self.ccorr.shape}")

    @classmethod
    def from_quant(cls, qw: QuantWeight, path: str) -> "TiledWeight":
        return cls.from_rows(QuantRows.of(qw), path, qw.fmt)

    @classmethod
    def from_rows(cls, src: RowSource, path: str, fmt: str, repack=None, alloc=None) -> "TiledWeight":
        """Tile a weight block by block (whole tiles per block): a float source is quantized to ``fmt``
        as it is read, a quantized one keeps its own format. Every tile depends on its own channels only,
        so the result is that of tiling the whole weight at once; no more than one block's codes (about
        ``BLOCK_BYTES`` of float32 rows) exist beside the tiles. ``repack``: the native re-tiler
        (``NativeKernel.tile_block``, bitwise the numpy ``tile_codes`` used when it is None)."""
        n, k = src.shape
        fmt, t = src.fmt or fmt, TILE_WIDTH[path]
        signmag = sign_magnitude(path, fmt)
        shape = (-(-n // t), steps(fmt, k), t, 4)
        tiles = np.empty(shape, np.uint8) if alloc is None else alloc(shape)
        scale = np.empty(n, np.float32)
        ccorr = np.zeros(tiles.shape[0] * t, np.int32) if (path == "avx2" and fmt == "int8") else None
        for lo, qw in quantized_blocks(src, fmt):
            if qw.fmt != fmt:
                raise ValueError(f"a fused weight mixes formats {fmt} and {qw.fmt}; quantize every projection alike")
            hi = lo + qw.shape[0]
            out = tiles[lo // t : -(-hi // t)]
            if repack is not None:
                repack(qw.data, k, fmt, path, out, None if ccorr is None else ccorr[lo:hi])
            else:
                codes = qw.codes()
                out[:] = tile_codes(codes, fmt, t, signmag)
                if ccorr is not None:
                    ccorr[lo : lo + -(-(hi - lo) // t) * t] = negative_sums(codes, t)
            scale[lo:hi] = qw.scale
        return cls(fmt, (n, k), scale, tiles, path, ccorr)

    @cached_property
    def c_struct(self) -> tuple[_WeightStruct, int]:
        """The C descriptor and its address, made once (this object owns every buffer it points to)."""
        n, k = self.shape
        s = _WeightStruct(PATH_IDS[self.path], FORMAT_IDS[self.fmt], n, k, self.tiles.shape[1], self.tiles.ctypes.data,
                          None if self.ccorr is None else self.ccorr.ctypes.data, self.scale.ctypes.data)
        return s, ctypes.addressof(s)

    @property
    def nbytes(self) -> int:
        return int(self.tiles.nbytes + self.scale.nbytes + (0 if self.ccorr is None else self.ccorr.nbytes))

    def codes(self) -> np.ndarray:
        """The integer codes as int8 ``[N, K]`` (slow numpy decoder)."""
        return untile_codes(self.tiles, self.fmt, *self.shape, sign_magnitude(self.path, self.fmt))

    def dequantize(self) -> np.ndarray:
        return self.codes().astype(np.float32) * self.scale[:, None]

    def to_quant(self) -> QuantWeight:
        """The same weight in the file format (``save_quantized``, ``concat_rows``, the numpy kernels)."""
        return QuantWeight(self.fmt, self.shape, pack_codes(self.fmt, self.codes()), self.scale.copy())
