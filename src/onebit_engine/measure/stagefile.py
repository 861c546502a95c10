"""The probe's stage file container (format version 2), and the checked reads of what it holds.

A stage file is a safetensors file whose metadata key ``onebit.stage`` holds a JSON header
``{kind, version, provenance, payload, sha256}``. ``sha256`` covers the whole file: the canonical JSON
of the header without it (so the payload's step_ms, block_size and draft_ms are covered, not only the
tensors) and every tensor's name, dtype, shape and bytes. Version 1 covered the tensors only: an
edited header was accepted and changed the score, so version 1 files are refused (re-run the stage).

The checksum catches damage; it is not a signature. A file written by hand with a fresh checksum
still gets every field checked (``Fields``): one ``StageError`` line naming the file and the field.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OnebitError

STAGE_VERSION = 2
HEADER_KEY = "onebit.stage"
_DTYPES = {"I64": np.int64, "F32": np.float32}


class StageError(OnebitError, ValueError):
    """A stage file is missing, corrupt, of the wrong kind, or from another model / draft / build."""


def redo(kind: str) -> str:
    return "run `onebit probe capture`" if kind == "capture" else "run `onebit probe draft`"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(head: dict[str, Any], tensors: dict[str, np.ndarray]) -> str:
    """sha256 over the header (without ``sha256``) and the tensors, in name order."""
    h = hashlib.sha256()
    h.update(f"{HEADER_KEY}/{STAGE_VERSION}\0".encode())
    h.update(_canonical({k: v for k, v in head.items() if k != "sha256"}).encode() + b"\0")
    for name in sorted(tensors):
        a = tensors[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}\0".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def encode(kind: str, provenance: dict, payload: dict, tensors: dict[str, np.ndarray]) -> tuple[bytes, str]:
    """The file's bytes and its checksum."""
    from safetensors.numpy import save

    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    head = {"kind": kind, "version": STAGE_VERSION, "provenance": provenance, "payload": payload}
    head["sha256"] = digest(head, tensors)
    return save(tensors, metadata={HEADER_KEY: _canonical(head)}), head["sha256"]


def _no_constants(name: str):
    raise ValueError(f"{name} is not a JSON number")


KINDS = ("capture", "draft")


def read(path: "str | Path", kind: str | None) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, tensors) of a stage file of ``kind`` (None: either kind): container, kind, version and
    checksum checked; ``provenance`` and ``payload`` are objects. The fields are checked by ``Fields``."""
    from safetensors import SafetensorError, safe_open

    p, again = Path(path), redo(kind or "capture")
    if not p.is_file():
        raise StageError(f"stage file {str(p)!r} does not exist or is not a file; {again} to make it")

    def corrupt(why: str) -> StageError:
        return StageError(f"stage file {str(p)!r} is corrupt ({why}); delete it and {again} again")

    try:
        with safe_open(str(p), framework="np") as f:
            meta = f.metadata() or {}
            dtypes = {name: f.get_slice(name).get_dtype() for name in f.keys()}
            bad = sorted(n for n, dt in dtypes.items() if dt not in _DTYPES)
            if bad:
                raise corrupt(f"tensor {bad[0]!r} has dtype {dtypes[bad[0]]}; stage tensors are I64 or F32")
            tensors = {name: f.get_tensor(name) for name in dtypes}
    except SafetensorError as e:
        raise corrupt(str(e).splitlines()[0] if str(e) else "not a safetensors file") from None
    except OSError as e:
        raise StageError(f"stage file {str(p)!r} cannot be read ({e.strerror or e}); check its permissions") from None
    if HEADER_KEY not in meta:
        raise StageError(f"{str(p)!r} is not a onebit stage file (no {HEADER_KEY!r} header); {again}")
    try:
        head = json.loads(meta[HEADER_KEY], parse_constant=_no_constants)
    except ValueError as e:  # JSONDecodeError is a ValueError; so is a NaN / Infinity constant
        raise corrupt(f"its {HEADER_KEY!r} header is not strict JSON: {e}") from None
    except RecursionError:
        raise corrupt(f"its {HEADER_KEY!r} header nests too deeply") from None
    if not isinstance(head, dict):
        raise corrupt(f"its {HEADER_KEY!r} header is a JSON {type(head).__name__}, not an object")
    if kind is None and head.get("kind") in KINDS:
        kind, again = head["kind"], redo(head["kind"])
    if head.get("kind") != kind:
        want = f"a {kind!r} one; give the {kind} stage file" if kind else f"one of {KINDS}; {again}"
        raise StageError(f"{str(p)!r} is a {repr(head.get('kind'))[:40]} stage file, not {want}")
    if head.get("version") != STAGE_VERSION:
        raise StageError(f"{str(p)!r} has stage format version {head.get('version')!r}; this engine reads version "
                         f"{STAGE_VERSION} (its checksum covers the header too) - {again} again with this engine")
    if not isinstance(head.get("sha256"), str) or digest(head, tensors) != head["sha256"]:
        raise corrupt("its header and tensors do not match the sha256 in its header")
    for key in ("provenance", "payload"):
        if not isinstance(head.get(key), dict):
            raise corrupt(f"header field {key!r} is {_show(head.get(key))}, not an object")
    return head, tensors


def _show(v: Any) -> str:
    text = "missing" if v is None else f"{v!r} ({type(v).__name__})"
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Fields:
    """Checked reads of one stage file's payload and tensors; every refusal names the file and field."""

    path: str
    kind: str

    def fail(self, field: str, value: Any, rule: str, verb: str = "is") -> StageError:
        return StageError(f"stage file {self.path!r}: {field} {verb} {value}, but {rule}; delete it and "
                          f"{redo(self.kind)} again")

    def integer(self, d: dict, key: str, lo: int, hi: int | None = None, why: str = "") -> int:
        v = d.get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(f"payload.{key}", _show(v), "it must be an integer")
        if v < lo or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise self.fail(f"payload.{key}", v, f"it must be {rng}{why}")
        return v

    def positive(self, d: dict, key: str, what: str) -> float:
        """A measured cost: a finite number > 0."""
        v = d.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise self.fail(f"payload.{key}", _show(v), f"{what} must be a finite number > 0")
        return float(v)

    def text(self, d: dict, key: str, pattern_len: int | None = None) -> str:
        v = d.get(key)
        if not isinstance(v, str) or (pattern_len is not None and len(v) != pattern_len):
            rule = "it must be a string" if pattern_len is None else f"it must be a {pattern_len}-character hex digest"
            raise self.fail(f"payload.{key}", _show(v), rule)
        return v

    def int_list(self, d: dict, key: str, lo: int, hi: int) -> list[int]:
        v = d.get(key)
        ok = isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        if not ok:
            raise self.fail(f"payload.{key}", _show(v), "it must be a non-empty list of integers")
        if any(not lo <= x <= hi for x in v) or v != sorted(set(v)):
            raise self.fail(f"payload.{key}", v, f"it must be strictly increasing, each in {lo}..{hi}")
        return list(v)

    def names(self, tensors: dict[str, np.ndarray], expected: list[str]) -> None:
        extra, missing = sorted(set(tensors) - set(expected)), [n for n in expected if n not in tensors]
        if missing:
            raise self.fail(f"tensor {missing[0]!r}", "missing", f"a {self.kind} stage with this payload holds it")
        if extra:
            raise self.fail(f"tensor {extra[0]!r}", "present", f"a {self.kind} stage holds no such tensor")

    def tensor(self, tensors: dict[str, np.ndarray], name: str, dtype, shape: tuple) -> np.ndarray:
        """``shape``: an int per axis, or None where any length >= 1 goes."""
        a = tensors[name]
        want = "[" + ", ".join("N" if s is None else str(s) for s in shape) + "]"
        if a.dtype != dtype or a.ndim != len(shape) or any(s is not None and a.shape[i] != s for i, s in enumerate(shape)) \
                or any(s is None and a.shape[i] < 1 for i, s in enumerate(shape)):
            raise self.fail(f"tensor {name!r}", f"{a.dtype} {list(a.shape)}", f"it must be {np.dtype(dtype)} {want}")
        return a

    def token_ids(self, a: np.ndarray, name: str, vocab: int) -> None:
        if a.size and (int(a.min()) < 0 or int(a.max()) >= vocab):
            bad = int(a.min()) if int(a.min()) < 0 else int(a.max())
            raise self.fail(f"tensor {name!r}", f"token id {bad}", f"token ids must be in 0..{vocab - 1} "
                            f"(payload.vocab_size {vocab})", verb="holds")


__all__ = ["STAGE_VERSION", "HEADER_KEY", "StageError", "encode", "read", "digest", "Fields", "redo"]
