"""Reading safetensors files and HF checkpoint folders with clear errors.

A small reader of its own (not ``safetensors.numpy``) so that BF16 tensors load (numpy has no bf16) and
so that a truncated or malformed file is reported by name, tensor and byte counts. The header is held to
the safetensors format's own rules (what the ``safetensors`` package enforces): a JSON object of at most
100 MB; each entry an object with a known ``dtype``, a ``shape`` of non-negative integers and
``data_offsets`` of two non-negative integers whose span is exactly the tensor's bytes; the spans, in
order, tile the data from byte 0 to its end with no hole, no overlap and nothing after. Tensor names
must be unique (stricter than the package, which keeps the last).

A shard index may only name files inside its folder (relative, no ``..``). Files placed in the folder
are trusted as they are, symlinks included: the Hugging Face hub cache is a folder of symlinks into
``../../blobs``.
"""
from __future__ import annotations

import json
import math
import os
import stat
import struct
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

import numpy as np

from ..errors import CheckpointError
from .fields import first_few, show, top_object
from .jsonfile import read_json
from .lazy import DTYPES, TensorRef

QUANT_FILE = "quantized.safetensors"  # a servable quantized folder's projections (see quant/io.py)
INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER = 100_000_000  # bytes; the safetensors package's own limit

_DTYPES = DTYPES
_ITEMSIZE = {k: np.dtype(v).itemsize for k, v in _DTYPES.items()}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def _is_uint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise CheckpointError(f"the JSON object has the key {k!r} twice")
        out[k] = v
    return out


def read_header(path: Path) -> tuple[dict, int, dict]:
    """Return (tensor entries, data start offset, metadata) of one safetensors file, after checking the
    whole header against the format's rules (every problem found is counted in one CheckpointError)."""
    try:
        return _read_header(path)
    except OSError as e:  # a folder, a file that vanished, no permission
        raise CheckpointError(f"{path}: cannot be read as a safetensors file ({e.strerror or e}); give a readable "
                              f"file") from None


def _not_safetensors(path: Path, size: int, why: str) -> None:
    raise CheckpointError(f"{path}: not a safetensors file ({size} bytes; {why}); give a safetensors file (weights, a "
                          f"quantized file or a stage file)")


def _read_header(path: Path) -> tuple[dict, int, dict]:
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read below, a device never end it
        m = st.st_mode
        kind = "a folder" if stat.S_ISDIR(m) else "a FIFO" if stat.S_ISFIFO(m) else "a device or a socket"
        raise CheckpointError(f"{path}: is {kind}, not a regular file; give a safetensors file")
    size = st.st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: {size} bytes is too short for a safetensors file (need an 8-byte header length); the file is truncated or not safetensors")
        (n,) = struct.unpack("<Q", head)
        # A safetensors header is a JSON object (first byte "{") of at most MAX_HEADER bytes. A length past
        # the limit, or one past the file's end with another byte after it, is a file of another kind - not
        # a truncated safetensors file, which keeps a sane length and its "{".
        if n > MAX_HEADER:
            _not_safetensors(path, size, f"its first 8 bytes read as a header of {n} bytes, more than the safetensors "
                                         f"limit of {MAX_HEADER}")
        if n > size - 8:
            first = f.read(1)
            if first and first != b"{":
                _not_safetensors(path, size, f"its first 8 bytes read as a header of {n} bytes, past the file's end, "
                                             f"and byte 8 is {first!r}, not the '{{' a header starts with")
            raise CheckpointError(f"{path}: header claims {n} bytes but the file has {size - 8} after the length; the file is truncated - copy it again")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: the safetensors header is not UTF-8 (byte {e.start}: {e.reason}); the file is corrupt - copy it again") from None
    except CheckpointError as e:  # a key given twice (before ValueError: CheckpointError is one)
        raise CheckpointError(f"{path}: the safetensors header is malformed: {e}; the file is corrupt - write it again") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, an integer past 4300 digits, deep nesting
        raise CheckpointError(f"{path}: the safetensors JSON header does not parse ({e}); the file is corrupt - copy it again") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header is {show(header)}, must be a JSON object of tensors; the file is corrupt - write it again")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckpointError(f"{path}: the safetensors __metadata__ is {show(meta)}, must be an object of strings; the file is corrupt - write it again")
    data_len = size - 8 - n
    problems = [p for name, ent in header.items() for p in _entry_problems(name, ent)]
    if not problems:
        problems = _layout_problems(header, data_len)
    if problems:
        cut = any("truncated" in p for p in problems)
        raise CheckpointError(
            f"{path}: cannot read {len(problems)} tensor(s): {first_few(problems)}; the file is "
            + ("truncated - copy it again" if cut else "corrupt - write or copy it again")
        )
    return header, 8 + n, meta


def _entry_problems(name: str, ent: Any) -> list[str]:
    if not isinstance(ent, dict):
        return [f"{name}: entry is {show(ent)}, must be an object with dtype, shape and data_offsets"]
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in ent]
    if missing:
        return [f"{name}: entry has no {', '.join(missing)}"]
    dt, shape, offs = ent["dtype"], ent["shape"], ent["data_offsets"]
    out = []
    if not isinstance(dt, str) or dt not in _DTYPES:
        out.append(f"{name}: dtype {show(dt)} is not supported (supported: {sorted(_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        out.append(f"{name}: shape {show(shape)} must be a list of non-negative integers")
    if not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs):
        out.append(f"{name}: data_offsets {show(offs)} must be two non-negative integers [begin, end]")
    elif offs[0] > offs[1]:
        out.append(f"{name}: data_offsets {show(offs)} begin after they end")
    if out:
        return out
    want = math.prod(shape) * _ITEMSIZE[dt]
    if offs[1] - offs[0] != want:
        return [f"{name}: {offs[1] - offs[0]} bytes stored for shape {shape} {dt} (needs {want})"]
    return []


def _layout_problems(header: dict, data_len: int) -> list[str]:
    """The spans must tile [0, data_len): sorted by offsets, each begins where the previous ended."""
    past = [name for name, e in header.items() if e["data_offsets"][1] > data_len]
    if past:
        return [f"{name}: data ends at byte {header[name]['data_offsets'][1]} but the file holds {data_len} data bytes (truncated)"
                for name in past]
    at, prev, out = 0, None, []
    for name, e in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = e["data_offsets"]
        if begin < at:
            out.append(f"{name}: bytes [{begin}, {end}) overlap {prev}'s bytes (ending at {at})")
        elif begin > at:
            out.append(f"data bytes [{at}, {begin}) before {name} belong to no tensor")
        at, prev = max(at, end), name
    if at < data_len:
        out.append(f"data bytes [{at}, {data_len}) after the last tensor belong to no tensor")
    return out


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


def file_refs(path: Path) -> dict[str, TensorRef]:
    """Every tensor of one safetensors file as a ref (the header checked by ``read_header``; no data read)."""
    header, start, _ = read_header(path)
    return {name: TensorRef(Path(path), name, e["dtype"], tuple(int(d) for d in e["shape"]), start + e["data_offsets"][0])
            for name, e in header.items()}


def file_dtype(arr: np.ndarray) -> str:
    """The safetensors dtype name of a loaded array (BF16 reads back as F32: it was widened)."""
    return {np.dtype(v): k for k, v in _DTYPES.items() if k != "BF16"}.get(arr.dtype, str(arr.dtype))


def _shard_index(folder: Path) -> dict[str, str] | None:
    """The index's ``weight_map`` (tensor -> shard file name), checked; None when the folder has none."""
    index = folder / INDEX_FILE
    if not index.exists():
        return None
    raw = read_json(index, "the shard index")
    if not isinstance(raw, dict) or not isinstance(raw.get("weight_map"), dict):
        got = show(raw.get("weight_map")) if isinstance(raw, dict) else show(raw)
        raise CheckpointError(f"{index}: not a valid shard index ('weight_map' is {got}); it needs a 'weight_map' object "
                              f"of tensor name -> shard file - copy the index that came with the shards")
    weight_map = raw["weight_map"]
    bad = sorted(f"{k} -> {show(v)}" for k, v in weight_map.items() if not isinstance(v, str))
    if bad:
        raise CheckpointError(f"{index}: weight_map values must be shard file names (strings): {first_few(bad)}; "
                              f"copy the index that came with the shards")
    outside = sorted({v for v in weight_map.values() if not _inside(v)})
    if outside:
        raise CheckpointError(f"{index}: shard name(s) {first_few([repr(v) for v in outside])} leave the checkpoint folder "
                              f"(absolute, '..' or empty); shard names must be file names inside {folder}")
    return weight_map


def _inside(name: str) -> bool:
    """A relative name that cannot leave the folder (checked on the name, POSIX and Windows separators)."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    return bool(name) and not name.startswith(("/", "\\")) and ".." not in parts and bool(parts)


def checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder: from the shard index when there is one."""
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist or is not a folder; give the folder that holds config.json and *.safetensors")
    weight_map = _shard_index(folder)
    if weight_map is not None:
        names = sorted(set(weight_map.values()))
        if not names:  # an empty map would load no tensor and blame the config for every missing one
            raise CheckpointError(f"{folder / INDEX_FILE}: its weight_map names no tensor; copy the index that came with "
                                  f"the shards (or remove it: without an index every *.safetensors file is read)")
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(f"{folder / INDEX_FILE} names shard file(s) {first_few(missing)} that are not in {folder}; copy the missing shards")
        return [folder / n for n in names]
    files = sorted(f for f in folder.glob("*.safetensors") if f.name != QUANT_FILE)
    if not files:
        raise CheckpointError(f"{folder} holds no *.safetensors file; a checkpoint folder needs config.json and its weights")
    return files


def load_folder_tensors(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint folder, read whole (the slow twin of :func:`folder_refs`, which
    reads nothing until asked); with a shard index, each tensor must be in the shard it names."""
    out: dict[str, np.ndarray] = {}
    where: dict[str, str] = {}
    for f in checkpoint_files(folder):
        for name, arr in iter_tensors(f):
            _claim(name, f, where)
            out[name] = arr
    _check_index(folder, where)
    return out


def folder_refs(folder: Path) -> dict[str, TensorRef]:
    """Every tensor of a checkpoint folder as a :class:`~.lazy.TensorRef` (headers and the shard index
    checked as :func:`load_folder_tensors` checks them; no tensor data read)."""
    out: dict = {}
    where: dict[str, str] = {}
    for f in checkpoint_files(folder):
        for name, ref in file_refs(f).items():
            _claim(name, f, where)
            out[name] = ref
    _check_index(folder, where)
    return out


def _claim(name: str, shard: Path, where: dict[str, str]) -> None:
    if name in where:
        raise CheckpointError(f"tensor {name!r} appears in more than one shard of {shard.parent} ({where[name]} and "
                              f"{shard.name}); the checkpoint is inconsistent - keep one")
    where[name] = shard.name


def _check_index(folder: Path, where: dict[str, str]) -> None:
    weight_map = _shard_index(folder)
    if weight_map is not None:
        lies = [f"{n} (index: {s}, stored in {where[n]})" for n, s in weight_map.items() if n in where and where[n] != s]
        lies += [f"{n} (index: {s}, stored in no shard)" for n, s in weight_map.items() if n not in where]
        lies += [f"{n} (stored in {where[n]}, not in the index)" for n in where if n not in weight_map]
        if lies:
            raise CheckpointError(f"{folder / INDEX_FILE} does not match its shards for {len(lies)} tensor(s): "
                                  f"{first_few(sorted(lies))}; copy the index that came with the shards")


def read_config(folder: Path) -> dict:
    """The folder's ``config.json`` as a dict (UTF-8, valid JSON, a JSON object)."""
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist or is not a folder; give the folder that holds config.json and *.safetensors")
    cfg = folder / "config.json"
    if not cfg.is_file():
        if cfg.is_symlink() or cfg.exists():  # there, but nothing to read as a file: say what it is
            raise CheckpointError(f"{cfg} is not a regular file (a folder, a FIFO, a device or a link that leads nowhere); "
                                  f"a checkpoint folder needs config.json as a JSON file")
        raise CheckpointError(f"{folder} has no config.json; a checkpoint folder needs config.json and *.safetensors")
    return top_object(read_json(cfg, "config.json"), str(cfg))

