"""Reading safetensors files and HF checkpoint folders with clear errors.

A small reader of its own (not ``safetensors.numpy``) so that BF16 tensors load (numpy has no bf16) and
so that a truncated or malformed file is reported by name, tensor and byte counts.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Iterator

import numpy as np

from .errors import CheckpointError

QUANT_FILE = "quantized.safetensors"  # a servable quantized folder's projections (see quant/io.py)

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


def read_header(path: Path) -> tuple[dict, int, dict]:
    """Return (tensor entries, data start offset, metadata) of one safetensors file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: {size} bytes is too short for a safetensors file (need an 8-byte header length); the file is truncated or not safetensors")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise CheckpointError(f"{path}: header claims {n} bytes but the file has {size - 8} after the length; the file is truncated - copy it again")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: the safetensors JSON header does not parse ({e}); the file is corrupt") from None
    meta = header.pop("__metadata__", {}) or {}
    data_len = size - 8 - n
    problems = []
    for name, ent in header.items():
        dt = ent.get("dtype")
        if dt not in _DTYPES:
            problems.append(f"{name}: dtype {dt!r} is not supported (supported: {sorted(_DTYPES)})")
            continue
        begin, end = ent["data_offsets"]
        numel = int(np.prod(ent["shape"], dtype=np.int64))
        want = numel * np.dtype(_DTYPES[dt]).itemsize
        if end - begin != want:
            problems.append(f"{name}: {end - begin} bytes stored for shape {ent['shape']} {dt} (needs {want})")
        elif end > data_len:
            problems.append(f"{name}: data ends at byte {end} but the file holds {data_len} data bytes (truncated)")
    if problems:
        raise CheckpointError(f"{path}: cannot read {len(problems)} tensor(s):\n  " + "\n  ".join(problems) + "\nThe file is truncated or corrupt; write or copy it again.")
    return header, 8 + n, meta


def iter_tensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (name, array) for every tensor of one file; BF16 is widened to float32 exactly."""
    header, start, _ = read_header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    for name, ent in header.items():
        begin, end = ent["data_offsets"]
        buf = raw[start + begin : start + end]
        arr = np.frombuffer(buf.tobytes(), dtype=_DTYPES[ent["dtype"]]).reshape(ent["shape"])
        if ent["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        yield name, arr


def checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder: from the shard index when there is one."""
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist or is not a folder; give the folder that holds config.json and *.safetensors")
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"{index}: not a valid shard index ({e}); it needs a 'weight_map' object") from None
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (folder / n).exists()]
        if missing:
            raise CheckpointError(f"{index} names shard file(s) {missing} that are not in {folder}; copy the missing shards")
        return [folder / n for n in names]
    files = sorted(f for f in folder.glob("*.safetensors") if f.name != QUANT_FILE)
    if not files:
        raise CheckpointError(f"{folder} holds no *.safetensors file; a checkpoint folder needs config.json and its weights")
    return files


def load_folder_tensors(folder: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for f in checkpoint_files(folder):
        for name, arr in iter_tensors(f):
            if name in out:
                raise CheckpointError(f"tensor {name!r} appears in more than one shard ({f.name} and another); the checkpoint is inconsistent")
            out[name] = arr
    return out


def read_config(folder: Path) -> dict:
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist or is not a folder; give the folder that holds config.json and *.safetensors")
    cfg = folder / "config.json"
    if not cfg.exists():
        raise CheckpointError(f"{folder} has no config.json; a checkpoint folder needs config.json and *.safetensors")
    try:
        return json.loads(cfg.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg}: not valid JSON ({e})") from None
