"""Save and load quantized weights as safetensors with a versioned JSON header in the metadata.

File layout: for each weight ``name`` two tensors, ``{name}.qdata`` (uint8, packed codes) and
``{name}.scale`` (float32 [N]); metadata key ``onebit.quant`` holds
``{"version": 1, "weights": {name: {"format": "int4", "shape": [N, K]}}}``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import CheckpointError
from .formats import QuantWeight

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
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"quantized weight file {str(path)!r} does not exist; save one with save_quantized()")
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata() or {}
        if HEADER_KEY not in meta:
            raise CheckpointError(
                f"{str(path)!r} has no {HEADER_KEY!r} metadata header, so it is not a quantized weight "
                f"file; write it with onebit_engine.quant.save_quantized()"
            )
        try:
            header = json.loads(meta[HEADER_KEY])
            version = header["version"]
            entries = header["weights"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{str(path)!r}: malformed {HEADER_KEY!r} header ({e}); re-save the file") from e
        if version not in SUPPORTED_VERSIONS:
            raise CheckpointError(
                f"{str(path)!r}: quantized format version {version!r} is not supported (this engine reads "
                f"versions {list(SUPPORTED_VERSIONS)}); upgrade onebit-specverify or re-quantize the weights"
            )
        out = {}
        for name, e in entries.items():
            try:
                out[name] = QuantWeight(
                    e["format"], tuple(int(d) for d in e["shape"]),
                    np.ascontiguousarray(f.get_tensor(f"{name}.qdata")),
                    np.ascontiguousarray(f.get_tensor(f"{name}.scale")),
                )
            except Exception as err:  # safetensors raises its own error type for a missing tensor
                raise CheckpointError(f"{str(path)!r}: weight {name!r} is inconsistent: {err}") from err
        return out
