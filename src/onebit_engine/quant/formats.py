"""Weight formats: symmetric integer codes with one float32 scale per output channel.

=========  ==========  ====================================  ===============================
format     codes       scale ``sw[n]`` (1.0 for a zero row)  packing of ``data`` (uint8)
=========  ==========  ====================================  ===============================
int8       [-127, 127] ``max|W[n]| / 127``                   ``[N, K]``, the int8 bytes
int4       [-7, 7]     ``max|W[n]| / 7``                     ``[N, ceil(K/2)]``, two's-complement
                                                             nibbles, even k in the low nibble
ternary    {-1, 0, 1}  ``mean|W[n]|`` (absmean, BitNet)      ``[N, ceil(K/4)]``, 2-bit codes
                                                             0=0, 1=+1, 2=-1, k%4 at bits 2*(k%4)
=========  ==========  ====================================  ===============================

Codes are ``clip(rint(W / sw[:, None]), -q, q)`` in float32 (``rint`` = half to even). The group of
a scale is the output channel, so ``y = (acc * sa) * sw`` needs one exact int32 product per call -
the device contract unchanged, for every format. The decoders here are the slow, obviously-correct
twins the fast kernels are tested against.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

FORMATS = ("int8", "int4", "ternary")
QMAX = {"int8": 127, "int4": 7, "ternary": 1}
CODES_PER_BYTE = {"int8": 1, "int4": 2, "ternary": 4}


@dataclass(frozen=True, eq=False)
class QuantWeight:
    """A quantized ``[N, K]`` weight: packed codes ``data`` (uint8) and float32 scales ``scale [N]``."""

    fmt: str
    shape: tuple[int, int]
    data: np.ndarray
    scale: np.ndarray

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"weight format {self.fmt!r} is unknown; choose one of {FORMATS}")
        n, k = self.shape
        want = (n, -(-k // CODES_PER_BYTE[self.fmt]))
        if self.data.dtype != np.uint8 or self.data.shape != want or not self.data.flags.c_contiguous:
            raise ValueError(
                f"{self.fmt} data for shape {self.shape} must be C-contiguous uint8 {want}, got "
                f"{self.data.dtype} {self.data.shape}; build it with quantize_weight()"
            )
        if self.scale.dtype != np.float32 or self.scale.shape != (n,):
            raise ValueError(f"scale must be float32 [{n}], got {self.scale.dtype} {self.scale.shape}")

    @cached_property
    def addresses(self) -> tuple[int, int]:
        """Buffer addresses of ``data`` and ``scale`` (owned by this object) for native kernels,
        computed once: reading ``ndarray.ctypes.data`` costs ~2 us, a large share of a small GEMM."""
        return int(self.data.ctypes.data), int(self.scale.ctypes.data)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.scale.nbytes)

    def codes(self) -> np.ndarray:
        """The integer codes as int8 ``[N, K]`` (slow numpy decoder)."""
        return unpack_codes(self.fmt, self.data, self.shape[1])

    def dequantize(self) -> np.ndarray:
        return self.codes().astype(np.float32) * self.scale[:, None]


def weight_scale(w: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "ternary":
        s = np.mean(np.abs(w), axis=1, dtype=np.float32) if w.shape[1] else np.zeros(w.shape[0], np.float32)
    else:
        s = np.max(np.abs(w), axis=1) / np.float32(QMAX[fmt]) if w.shape[1] else np.zeros(w.shape[0], np.float32)
    return np.where(s > 0, s, np.float32(1.0)).astype(np.float32)


def quantize_weight(weight: np.ndarray, fmt: str = "int8") -> QuantWeight:
    """Quantize a float weight ``[N, K]`` into ``fmt`` (see the module table)."""
    if fmt not in FORMATS:
        raise ValueError(f"weight format {fmt!r} is unknown; choose one of {FORMATS}")
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D [N, K], got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("weight holds NaN or inf; fix the checkpoint before quantizing")
    sw = weight_scale(w, fmt)
    q = np.clip(np.rint(w / sw[:, None]), -QMAX[fmt], QMAX[fmt]).astype(np.int8)
    return QuantWeight(fmt, (int(w.shape[0]), int(w.shape[1])), pack_codes(fmt, q), sw)


def pack_codes(fmt: str, q: np.ndarray) -> np.ndarray:
    """int8 codes ``[N, K]`` -> packed uint8 (zero codes pad K up to a whole byte)."""
    per = CODES_PER_BYTE[fmt]
    n, k = q.shape
    if np.any(np.abs(q.astype(np.int16)) > QMAX[fmt]):
        raise ValueError(f"{fmt} codes must lie in [-{QMAX[fmt]}, {QMAX[fmt]}]")
    if per == 1:
        return np.ascontiguousarray(q.view(np.uint8))
    padded = np.zeros((n, -(-k // per) * per), np.int8)
    padded[:, :k] = q
    if fmt == "int4":
        nib = padded.view(np.uint8) & 0x0F
        return np.ascontiguousarray(nib[:, 0::2] | (nib[:, 1::2] << 4))
    code = np.where(padded == 1, 1, np.where(padded == -1, 2, 0)).astype(np.uint8)
    return np.ascontiguousarray(code[:, 0::4] | (code[:, 1::4] << 2) | (code[:, 2::4] << 4) | (code[:, 3::4] << 6))


def unpack_codes(fmt: str, data: np.ndarray, k: int) -> np.ndarray:
    """Packed uint8 -> int8 codes ``[N, k]``; rejects the unused ternary code 3."""
    if fmt == "int8":
        return data.view(np.int8)[:, :k].copy()
    n = data.shape[0]
    if fmt == "int4":
        nib = np.empty((n, data.shape[1] * 2), np.int16)
        nib[:, 0::2] = data & 0x0F
        nib[:, 1::2] = data >> 4
        vals = np.where(nib >= 8, nib - 16, nib)
        return vals[:, :k].astype(np.int8)
    codes = np.stack([(data >> s) & 3 for s in (0, 2, 4, 6)], axis=-1).reshape(n, -1)[:, :k]
    if np.any(codes == 3):
        raise ValueError("ternary data holds the unused 2-bit code 3; the file is corrupt - re-quantize it")
    return np.where(codes == 1, 1, np.where(codes == 2, -1, 0)).astype(np.int8)


def load_problems(fmt: str, data: np.ndarray, scale: np.ndarray, k: int) -> list[str]:
    """What is wrong with codes and scales read from a file (empty when nothing): scales must be finite
    and > 0 (quantize_weight writes 1.0 for a zero row), codes within the format's range (int8 -128, int4
    -8 and the ternary code 3 are never written), and the padding past K zero codes."""
    out = []
    bad = ~(np.isfinite(scale) & (scale > 0))
    if bad.any():
        out.append(f"{int(bad.sum())} scale(s) are NaN, inf or <= 0 (first at row {int(np.argmax(bad))}: {float(scale[bad][0])})")
    per = CODES_PER_BYTE[fmt]
    if fmt == "int8":
        codes_bad = bool((data == 0x80).any())
        pad_bad = False
    else:
        bits = 8 // per
        fields = [(data >> (bits * j)) & ((1 << bits) - 1) for j in range(per)]  # code j of every byte
        codes_bad = any(bool((f == (8 if fmt == "int4" else 3)).any()) for f in fields)
        pad = data.shape[1] * per - k  # unused codes in the last byte of each row
        pad_bad = pad > 0 and any(bool(f[:, -1].any()) for f in fields[per - pad:])
    if codes_bad:
        out.append(f"{fmt} codes outside [-{QMAX[fmt]}, {QMAX[fmt]}]")
    if pad_bad:
        out.append(f"non-zero padding codes past K={k}")
    return out


def take_rows(w: QuantWeight, rows: np.ndarray) -> QuantWeight:
    """The output channels ``rows`` of ``w`` (codes are packed along K, so rows move whole)."""
    rows = np.asarray(rows, dtype=np.int64)
    return QuantWeight(w.fmt, (len(rows), w.shape[1]), np.ascontiguousarray(w.data[rows]), np.ascontiguousarray(w.scale[rows]))


def concat_rows(weights: "list[QuantWeight]") -> QuantWeight:
    """Stack weights that read the same input (one fused projection). Same format and K required."""
    fmts, ks = {w.fmt for w in weights}, {w.shape[1] for w in weights}
    if len(fmts) != 1 or len(ks) != 1:
        raise ValueError(f"cannot fuse quantized weights of formats {sorted(fmts)} and input sizes {sorted(ks)}; "
                         f"quantize every projection of a layer to one format")
    return QuantWeight(weights[0].fmt, (sum(w.shape[0] for w in weights), ks.pop()),
                       np.ascontiguousarray(np.concatenate([w.data for w in weights])),
                       np.ascontiguousarray(np.concatenate([w.scale for w in weights])))
