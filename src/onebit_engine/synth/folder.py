"""Write a servable target + draft pair of any :class:`~.shapes.Shape` with seeded random weights,
directly in its final form: ``DIR/target`` and ``DIR/draft``, each ``config.json``, ``model.safetensors``
(the small float tensors: norms, gates, the conv taps; the draft's selector codebooks in float16) and
``quantized.safetensors`` (every projection, the embedding and the lm_head as random codes and
per-row scales in ``fmt``). A block of rows is made, written and dropped at a time, so writing a 27B
pair needs a few MB of memory; the folder loads with ``load_target`` / ``load_draft`` like any other.

Codes are uniform over the format's range (int8 [-127, 127], int4 [-7, 7], ternary {-1, 0, 1}), each
tensor from its own generator seeded by (seed, name), so a tensor does not depend on the others. Scales
give a projection's outputs unit variance for unit inputs (an embedding row unit variance), a random
+-25 % per row. ``fmt="bf16"`` writes an ordinary float checkpoint instead (bf16, sharded like
transformers' ``save_pretrained``), the input ``onebit quantize`` takes.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..atomic import atomic_folder, atomic_write_text
from ..checkpoint.writer import StreamWriter
from ..quant.formats import CODES_PER_BYTE, FORMATS
from ..quant.io import FORMAT_VERSION, HEADER_KEY
from .shapes import Shape

SYNTH_VERSION = 1  # bump when the written bytes change: cached folders of another version are rewritten
MARKER = "synth.json"
FLOAT_FORMATS = ("bf16",)
CODE_STD = {"int8": math.sqrt((255**2 - 1) / 12), "int4": math.sqrt((15**2 - 1) / 12), "ternary": math.sqrt(2 / 3)}
BLOCK = 8 << 20  # bytes of codes made per block
SHARD_BYTES = 4 << 30  # float checkpoints: at most this much per shard, as transformers writes them


@dataclass(frozen=True)
class Plan:
    """What a synthesized pair takes: bytes on disk (target, draft) and bytes the host-int backend holds."""

    target_bytes: int
    draft_bytes: int

    @property
    def disk_bytes(self) -> int:
        return self.target_bytes + self.draft_bytes


def _is_projection(name: str, shape: tuple[int, ...]) -> bool:
    """The tensors written quantized: every 2-D weight except the selector's codebooks (lookup tables)."""
    return len(shape) == 2 and "codebook" not in name


def _tensor_bytes(name: str, shape: tuple[int, ...], fmt: str) -> int:
    if fmt in FLOAT_FORMATS:
        return 2 * math.prod(shape)
    if _is_projection(name, shape):
        return shape[0] * (-(-shape[1] // CODES_PER_BYTE[fmt]) + 4)
    return (2 if "codebook" in name else 4) * math.prod(shape)


def plan(shape: Shape, fmt: str) -> Plan:
    t = sum(_tensor_bytes(n, s, fmt) for n, s in shape.target_tensors().items())
    d = sum(_tensor_bytes(n, s, fmt) for n, s in shape.draft_tensors().items())
    return Plan(t, d)


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def random_codes(rng: np.random.Generator, fmt: str, rows: int, k: int) -> np.ndarray:
    """Packed codes ``[rows, ceil(k / codes per byte)]`` uniform over the format's range (the byte or
    field that would be -128 / -8 / the unused ternary code is set to 0), padding past k zero."""
    per = CODES_PER_BYTE[fmt]
    kb = -(-k // per)
    b = np.frombuffer(rng.bytes(rows * kb), np.uint8).reshape(rows, kb).copy()
    if fmt == "int8":
        b[b == 0x80] = 0
        return b
    bits = 8 // per
    for f in range(per):
        field = (b >> (bits * f)) & ((1 << bits) - 1)
        bad = field == (8 if fmt == "int4" else 3)
        pad = (kb - 1) * per + f >= k  # this field of the last byte lies past k
        b[bad] &= np.uint8(0xFF ^ (((1 << bits) - 1) << (bits * f)))
        if pad:
            b[:, -1] &= np.uint8(0xFF ^ (((1 << bits) - 1) << (bits * f)))
    return b


def _scales(rng: np.random.Generator, name: str, shape: tuple[int, int], fmt: str) -> np.ndarray:
    gain = 1.0 if name.endswith("embed_tokens.weight") else 1.0 / math.sqrt(shape[1])
    return (gain / CODE_STD[fmt] * rng.uniform(0.75, 1.25, shape[0])).astype(np.float32)


def small_tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The float tensors that stay float: values in the ranges trained models hold."""
    if name.endswith(("layernorm.weight", "norm.weight")) and not name.endswith("linear_attn.norm.weight"):
        a = 0.1 * rng.standard_normal(shape)  # zero-centred norms (1 + w)
        if not name.startswith("model."):  # a draft's norms are plain weights
            a += 1.0
    elif name.endswith("linear_attn.norm.weight"):
        a = 1.0 + 0.1 * rng.standard_normal(shape)
    elif name.endswith("dt_bias"):
        a = rng.standard_normal(shape)
    elif name.endswith("A_log"):
        a = np.log(rng.uniform(0.01, 16.0, shape))
    elif name.endswith("conv1d.weight"):
        a = rng.standard_normal(shape) / np.sqrt(shape[-1])
    elif name.endswith("base_kernel"):  # [2, K, H]: tap 0 near identity
        a = 0.3 * rng.standard_normal(shape)
        a[:, 0] += 1.0
    elif "codebook" in name:
        a = 0.5 * rng.standard_normal(shape)
    else:
        a = rng.standard_normal(shape) / np.sqrt(shape[-1])
    return a


def _write_quantized(path: Path, tensors: dict[str, tuple[int, ...]], fmt: str, seed: int, tick: Callable[[int], None]) -> None:
    names = [n for n, s in tensors.items() if _is_projection(n, s)]
    entries, header = [], {}
    for n in names:
        r, k = tensors[n]
        entries += [(f"{n}.qdata", "U8", (r, -(-k // CODES_PER_BYTE[fmt]))), (f"{n}.scale", "F32", (r,))]
        header[n] = {"format": fmt, "shape": [r, k]}
    meta = {HEADER_KEY: json.dumps({"version": FORMAT_VERSION, "weights": header}, sort_keys=True)}
    with StreamWriter(path, entries, meta) as w:
        for n in names:
            r, k = tensors[n]
            rng = _rng(seed, n)
            step = max(1, BLOCK // max(1, -(-k // CODES_PER_BYTE[fmt])))
            for lo in range(0, r, step):
                codes = random_codes(rng, fmt, min(step, r - lo), k)
                w.write(f"{n}.qdata", codes, partial=True)
                tick(codes.nbytes)
            w.write(f"{n}.scale", _scales(rng, n, (r, k), fmt))


def _write_floats(path: Path, tensors: dict[str, tuple[int, ...]], seed: int, dtype: str) -> None:
    entries = [(n, dtype, s) for n, s in tensors.items()]
    with StreamWriter(path, entries, {"format": "pt"}) as w:
        for n, s in tensors.items():
            a = small_tensor(_rng(seed, n), n, s)
            w.write(n, _as(a, dtype))


def _as(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "F32":
        return a.astype(np.float32)
    if dtype == "F16":
        return a.astype(np.float16)
    bits = a.astype(np.float32).view(np.uint32)  # BF16: round to nearest even, as torch does
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_part(folder: Path, config: dict, tensors: dict[str, tuple[int, ...]], fmt: str, seed: int,
               tick: Callable[[int], None]) -> None:
    """One model folder (the target's or the draft's) into ``folder`` (a new folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if fmt in FLOAT_FORMATS:
        _write_bf16_shards(folder, tensors, seed, tick)
        return
    small = {n: s for n, s in tensors.items() if not _is_projection(n, s)}
    _write_floats(folder / "model.safetensors", {n: s for n, s in small.items() if "codebook" not in n}, seed, "F32")
    codebooks = {n: s for n, s in small.items() if "codebook" in n}
    if codebooks:  # float16 on disk, beside the float32 small tensors (a second file of the same folder)
        _write_floats(folder / "codebooks.safetensors", codebooks, seed, "F16")
    _write_quantized(folder / "quantized.safetensors", tensors, fmt, seed, tick)


def _write_bf16_shards(folder: Path, tensors: dict[str, tuple[int, ...]], seed: int, tick: Callable[[int], None]) -> None:
    shards: list[list[str]] = [[]]
    size = 0
    for n, s in tensors.items():
        b = 2 * math.prod(s)
        if shards[-1] and size + b > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(n)
        size += b
    weight_map = {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors"
        with StreamWriter(folder / fname, [(n, "BF16", tensors[n]) for n in part], {"format": "pt"}) as w:
            for n in part:
                s, rng = tensors[n], _rng(seed, n)
                if len(s) == 2 and _is_projection(n, s):
                    step = max(1, BLOCK // (2 * s[1]))
                    for lo in range(0, s[0], step):
                        rows = min(step, s[0] - lo)
                        gain = 1.0 if n.endswith("embed_tokens.weight") else 1.0 / math.sqrt(s[1])
                        w.write(n, _as(gain * rng.standard_normal((rows, s[1]), np.float32), "BF16"), partial=True)
                        tick(2 * rows * s[1])
                else:
                    w.write(n, _as(small_tensor(rng, n, s), "BF16"))
        weight_map.update({n: fname for n in part})
    if len(shards) > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def synthesize(shape: Shape, fmt: str, out: "str | Path", *, seed: int = 0, tick: Callable[[int], None] = lambda n: None) -> Path:
    """Write ``out/target`` and ``out/draft`` (each atomically: a failed write leaves neither half) and
    ``out/synth.json`` (what was written, for a cache to check). ``tick(n)`` reports bytes written."""
    if fmt not in FORMATS + FLOAT_FORMATS:
        from ..errors import ConfigError

        raise ConfigError(f"format {fmt!r} is not one of {FORMATS + FLOAT_FORMATS}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_folder(out / "target") as tmp:
        write_part(tmp, target_config_json(shape), shape.target_tensors(), fmt, seed, tick)  # grouped names for qwen3_next
    with atomic_folder(out / "draft") as tmp:
        write_part(tmp, shape.draft_config_json(), shape.draft_tensors(), fmt, seed + 1, tick)
    # last and atomic: a marker on disk means both folders are whole and synced (a cache reuses what it names)
    atomic_write_text(out / MARKER, json.dumps(marker(shape, fmt, seed), indent=2))
    return out


def target_config_json(shape: Shape) -> dict:
    """The target's config.json, as the tests' checkpoints write it."""
    from ..hybrid.synthetic import hf_config_dict

    return {**hf_config_dict(shape.target), "dtype": "bfloat16"}


def marker(shape: Shape, fmt: str, seed: int) -> dict:
    return {"shape": shape.name, "format": fmt, "seed": seed, "synth_version": SYNTH_VERSION,
            "target_params": shape.target_params, "draft_params": shape.draft_params}
