"""The run's specverify settings, read once from the command line (no pytest import).

Every default lives here, in :class:`Settings`: the command-line options default to None (as Hypothesis'
do), so "not given" is visible, and :meth:`Settings.from_options` fills in what was not given.
"""
from __future__ import annotations

import argparse
import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from .device_gate import DeviceStatus

MAX_K = 63  # a verify of at most 64 rows: past DFlash's block of 16, and far past any draft's


def k_list(text: str) -> tuple[int, ...]:
    """argparse type for --specverify-k: "0,1,3" -> (0, 1, 3)."""
    parts = str(text).split(",")
    if len(parts) > 1 and any(not x.strip() for x in parts):  # "1,,2": a value lost, not a list of two
        raise argparse.ArgumentTypeError(f"--specverify-k has an empty entry in {text!r}; give comma-separated integers "
                                         f"like 0,1,3")
    try:
        ks = tuple(int(x) for x in parts if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--specverify-k wants comma-separated integers like 0,1,3, got {text!r}") from None
    if not ks or any(not 0 <= k <= MAX_K for k in ks):
        raise argparse.ArgumentTypeError(f"--specverify-k wants integers 0..{MAX_K} (a verify of at most {MAX_K + 1} rows), "
                                         f"got {text!r}")
    if len(ks) > 16:
        raise argparse.ArgumentTypeError(f"--specverify-k lists {len(ks)} values; give at most 16")
    return ks


def bounded(option: str, lo: int, hi: int, why: str = ""):
    """argparse type: an integer in lo..hi, refused with the option's name and the range otherwise."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} wants an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{option}={v} is out of range: it must be {lo}..{hi}{why}")
        return v

    parse.__name__ = "integer"
    return parse


@dataclass
class Settings:
    port: str = "onebit"
    model: str | None = None
    backend: str | None = None
    row_set: int | None = None
    prompt_set: str = "default"
    num_prompts: int = 10
    # 7: an 8-row verify (a common row set, rows past a 4-slot buffer); 15: a 16-row verify (DFlash's block
    # of 16, and a second row set of 8 rows)
    k_values: tuple[int, ...] = (0, 1, 3, 7, 15)
    profile: str | None = None
    seed: int = 0
    samples: int | None = None  # None: the sampling check sizes itself by power; the draft check 800
    max_new_tokens: int = 24
    context: int = 320  # long_context fills the context to this many tokens (past 128 and 256)
    require_device: bool = False
    reference: str | None = None  # an HF checkpoint folder the reference-agreement check loads (None: the port's)
    device: DeviceStatus | None = field(default=None)

    @classmethod
    def from_options(cls, given: Mapping[str, Any]) -> "Settings":
        """The settings from ``{field: value}`` (the options as parsed); a None value keeps the default."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise TypeError(f"Settings has no field(s) {unknown}; known: {sorted(names)}")
        return cls(**{k: v for k, v in given.items() if v is not None})

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of one field (what --help shows)."""
        return next(f.default for f in dataclasses.fields(cls) if f.name == name)

    def test_seed(self, nodeid: str) -> int:
        """The per-test seed: ``--specverify-seed + crc32(nodeid)`` (order-independent, xdist-safe)."""
        return (self.seed + zlib.crc32(nodeid.encode())) & 0xFFFFFFFF

    @property
    def spec_k(self) -> int:
        """The k the loop checks use: the largest of --specverify-k (at least 1)."""
        return max(max(self.k_values), 1)
