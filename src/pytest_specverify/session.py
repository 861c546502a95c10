"""The run's specverify settings, read once from the command line (no pytest import)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from .device import DeviceStatus


def k_list(text: str) -> tuple[int, ...]:
    """argparse type for --specverify-k: "0,1,3" -> (0, 1, 3)."""
    try:
        ks = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--specverify-k wants comma-separated integers like 0,1,3, got {text!r}") from None
    if not ks or any(k < 0 for k in ks):
        raise ValueError(f"--specverify-k wants non-negative integers, got {text!r}")
    return ks


@dataclass
class Settings:
    port: str = "onebit"
    backend: str | None = None
    row_set: int | None = None
    prompt_set: str = "default"
    num_prompts: int = 10
    # 7: an 8-row verify (a common row set, rows past a 4-slot buffer); 15: a 16-row verify (DFlash's block
    # of 16, and a second row set of 8 rows)
    k_values: tuple[int, ...] = (0, 1, 3, 7, 15)
    profile: str | None = None
    seed: int = 0
    samples: int = 800
    max_new_tokens: int = 24
    context: int = 320  # long_context fills the context to this many tokens (past 128 and 256)
    require_device: bool = False
    device: DeviceStatus | None = field(default=None)

    def test_seed(self, nodeid: str) -> int:
        """The per-test seed: ``--specverify-seed + crc32(nodeid)`` (order-independent, xdist-safe)."""
        return (self.seed + zlib.crc32(nodeid.encode())) & 0xFFFFFFFF

    @property
    def spec_k(self) -> int:
        """The k the loop checks use: the largest of --specverify-k (at least 1)."""
        return max(max(self.k_values), 1)
