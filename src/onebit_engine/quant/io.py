"""Save and load quantized weights as safetensors with a versioned JSON header in the metadata.

File layout: for each weight ``name`` two tensors, ``{name}.qdata`` (uint8, packed codes) and
``{name}.scale`` (float32 [N]); metadata key ``onebit.quant`` holds
``{"version": 1, "weights": {name: {"format": "int4", "shape": [N, K]}}}``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..checkpoint.fields import first_few, show
from ..errors import CheckpointError
from .formats import CODES_PER_BYTE, FORMATS, QuantWeight, load_problems

FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
HEADER_KEY = "onebit.quant"


def save_quantized(path: "str | Path", weights: dict[str, QuantWeight]) -> None:
    from safetensors.numpy import save_file

    tensors: dict[str, np.ndarray] = {}
    header: dict[str, dict] = {}
    for name, qw in weights.items():
        tensors[f"{name}.qdata"] = qw.data
        tensors[f"{name}.scale"] = qw.scale
        header[name] = {"format": qw.fmt, "shape": list(qw.shape)}
    meta = {HEADER_KEY: json.dumps({"version": FORMAT_VERSION, "weights": header}, sort_keys=True)}
    save_file(tensors, str(path), metadata=meta)


def load_quantized(path: "str | Path") -> dict[str, QuantWeight]:
    """Read a file written by :func:`save_quantized`. Everything is checked before anything is returned:
    the safetensors layout, the header, each weight's tensors (``.qdata`` U8, ``.scale`` F32, their shapes),
    finite positive scales and codes within the format; every problem is named in one CheckpointError."""
    from ..checkpoint.safetensors import iter_tensors, read_header

    path = Path(path)
    _check_file(path)
    entries, _, meta = read_header(path)
    header = quant_header(path, meta)
    tensors = dict(iter_tensors(path))
    out, problems = {}, []
    for name, e in header["weights"].items():
        detail = _weight_problems(name, e, entries, tensors)
        if detail:
            problems.append(f"weight {name!r} is inconsistent: {detail}")
        else:
            out[name] = QuantWeight(e["format"], tuple(e["shape"]), np.ascontiguousarray(tensors[f"{name}.qdata"]),
                                    np.ascontiguousarray(tensors[f"{name}.scale"]))
    used = {f"{n}.{part}" for n in header["weights"] for part in ("qdata", "scale")}
    extra = sorted(set(tensors) - used)
    if extra:
        problems.append(f"{len(extra)} tensor(s) no weight of the header names: {first_few(extra)}")
    if problems:
        raise CheckpointError(f"{str(path)!r}: {first_few(problems)}; re-quantize the weights (onebit quantize)")
    return out


def _check_file(path: Path) -> None:
    """A missing file, with the way to make one (``read_header`` refuses a folder, FIFO or device by its kind)."""
    if not path.exists():
        raise CheckpointError(f"quantized weight file {str(path)!r} does not exist; write one with `onebit quantize` "
                              f"(or save_quantized())")


def open_quantized(path: "str | Path", *, values: bool = True) -> dict:
    """The weights of a file written by :func:`save_quantized` (or ``onebit synth``), read lazily: a
    :class:`~.rows.QuantRows` per weight whose codes stay on disk until packed block by block (the
    scales, 4 bytes a row, are read now). Checked as :func:`load_quantized` checks, the codes read a
    block at a time for that; ``values=False`` skips the codes (``onebit inspect`` checks names and shapes)."""
    from ..checkpoint.safetensors import file_refs, read_header
    from .rows import QuantRows

    path = Path(path)
    _check_file(path)
    entries, _, meta = read_header(path)
    header = quant_header(path, meta)
    refs = file_refs(path)
    out, problems = {}, []
    for name, e in header["weights"].items():
        detail = _weight_problems(name, e, entries, None)
        if detail:
            problems.append(f"weight {name!r} is inconsistent: {detail}")
        else:
            q = QuantRows(e["format"], tuple(e["shape"]), refs[f"{name}.qdata"], np.ascontiguousarray(refs[f"{name}.scale"].load()))
            bad = q.problems() if values else []  # the codes, a block at a time
            if bad:
                problems.append(f"weight {name!r} is inconsistent: {'; '.join(bad)}")
            out[name] = q
    used = {f"{n}.{part}" for n in header["weights"] for part in ("qdata", "scale")}
    extra = sorted(set(entries) - used)
    if extra:
        problems.append(f"{len(extra)} tensor(s) no weight of the header names: {first_few(extra)}")
    if problems:
        raise CheckpointError(f"{str(path)!r}: {first_few(problems)}; re-quantize the weights (onebit quantize)")
    return out


def quant_header(path: Path, meta: dict) -> dict:
    """The parsed ``onebit.quant`` header of a file's safetensors metadata: a supported version and a
    ``weights`` object whose entries each give a known ``format`` and a ``shape`` [N, K]."""
    if HEADER_KEY not in meta:
        raise CheckpointError(
            f"{str(path)!r} has no {HEADER_KEY!r} metadata header, so it is not a quantized weight "
            f"file; write it with onebit_engine.quant.save_quantized()"
        )
    try:
        header = json.loads(meta[HEADER_KEY])
    except ValueError as e:
        raise CheckpointError(f"{str(path)!r}: malformed {HEADER_KEY!r} header ({e}); re-save the file") from None
    if not isinstance(header, dict) or "version" not in header or not isinstance(header.get("weights"), dict):
        raise CheckpointError(f"{str(path)!r}: malformed {HEADER_KEY!r} header {show(header)} (needs 'version' and a "
                              f"'weights' object); re-save the file")
    version = header["version"]
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        raise CheckpointError(
            f"{str(path)!r}: quantized format version {version!r} is not supported (this engine reads "
            f"versions {list(SUPPORTED_VERSIONS)}); upgrade onebit-specverify or re-quantize the weights"
        )
    bad = [f"weight {n!r} is inconsistent: {d}" for n, e in header["weights"].items() if (d := _entry_problem(e))]
    if bad:
        raise CheckpointError(f"{str(path)!r}: {first_few(bad)}; re-quantize the weights (onebit quantize)")
    return header


def _entry_problem(e: object) -> str:
    if not isinstance(e, dict) or e.get("format") not in FORMATS:
        return f"header entry {show(e)} needs a 'format' in {list(FORMATS)}"
    shape = e.get("shape")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        return f"shape {show(shape)} must be two non-negative integers [N, K]"
    return ""


def _weight_problems(name: str, e: dict, entries: dict, tensors: "dict | None") -> str:
    """Why weight ``name`` (a checked header entry) cannot be used with the file's tensors ('' when it can)."""
    fmt, (n, k) = e["format"], e["shape"]
    want = {f"{name}.qdata": ("U8", (n, -(-k // CODES_PER_BYTE[fmt]))), f"{name}.scale": ("F32", (n,))}
    for t, (dtype, tshape) in want.items():
        if t not in entries:
            return f"tensor {t!r} is missing"
        if entries[t]["dtype"] != dtype:
            return f"tensor {t!r} is {entries[t]['dtype']}, must be {dtype}"
        if tuple(entries[t]["shape"]) != tshape:
            return f"tensor {t!r} has shape {tuple(entries[t]['shape'])}, a {fmt} [{n}, {k}] weight needs {tshape}"
    if tensors is None:  # read lazily: the codes are checked block by block when loaded
        return ""
    return "; ".join(load_problems(fmt, tensors[f"{name}.qdata"], tensors[f"{name}.scale"], k))
