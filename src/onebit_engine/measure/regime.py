"""Which regime a run is in: are the model's weights held in the CPU's last-level cache, or do they
stream from memory every token?

Where the weights fit in the cache, a plain step is bound by compute, and each extra row of a verify
costs its own compute (verifying k + 1 rows costs about k + 1 plain steps): speculation cannot pay.
Where they stream from memory, a step is bound by reading them, and the extra rows of a verify ride
along with the one read: that is where a draft pays (docs/loop.md, "Which regime you are in").

The cache size is read from sysfs (``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}``:
the largest level holding data), else from ``os.sysconf("SC_LEVEL3_CACHE_SIZE")`` (glibc; on some
machines the whole package's L3, not the slice one core sees), else it is unknown and so is the regime.
Nothing here reads the environment; the sysfs root is a parameter (tests give a fake tree).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
# The run that shows the memory-bound regime: a real model's shape, synthesized (onebit bench --shape).
MEMORY_BOUND_COMMAND = "onebit bench --shape qwen3.5-0.8b --format int8 --acceptance 0.8"
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class CacheSize:
    """The last-level cache: ``size`` bytes (None: unknown), its ``level`` and where it was read."""

    size: int | None
    level: int | None
    source: str


def parse_size(text: str) -> int:
    """sysfs cache sizes: ``32768K``, ``1M``, or plain bytes."""
    t = text.strip().upper().removesuffix("B")
    if t and t[-1] in _UNITS:
        return int(t[:-1]) * _UNITS[t[-1]]
    return int(t)


def last_level_cache(root: Path = SYSFS_CACHE) -> CacheSize:
    """The largest data (or unified) cache level of cpu0, with a clear fallback (module docstring)."""
    best: tuple[int, int, str] | None = None
    try:
        for index in sorted(Path(root).glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            level, size = int((index / "level").read_text()), parse_size((index / "size").read_text())
            if best is None or level > best[0]:
                best = (level, size, str(index))
    except (OSError, ValueError):
        best = None
    if best is not None:
        return CacheSize(best[1], best[0], f"sysfs {best[2]}")
    for level in (3, 2):
        try:
            size = os.sysconf(f"SC_LEVEL{level}_CACHE_SIZE")
        except (ValueError, OSError):
            continue
        if size and size > 0:
            return CacheSize(int(size), level, f"sysconf SC_LEVEL{level}_CACHE_SIZE (no sysfs cache information)")
    return CacheSize(None, None, "unknown: neither sysfs nor sysconf gives a cache size here")


def weight_bytes(target, draft=None) -> int:
    """Bytes of weights one speculative round reads: every GEMM weight of the target (for a mixture of
    experts: top-k of its experts) and of the draft, each counted once (the draft shares the target's
    lm_head), as the backend holds them (packed codes and scales on host-int)."""
    from .roofline import active_sum
    from .walk import linears, packed_bytes

    total = active_sum(target, packed_bytes)  # the weights alone (step_bytes would build a state to count it)
    if draft is not None:
        seen = {id(x) for x in linears(target)}
        total += sum(packed_bytes(x) for x in linears(draft) if id(x) not in seen)
    return int(total)


@dataclass(frozen=True)
class Regime:
    """``in_cache``: True (weights fit in the last-level cache), False (they stream), None (unknown)."""

    weight_bytes: int
    cache: CacheSize

    @property
    def in_cache(self) -> bool | None:
        if self.cache.size is None:
            return None
        return self.weight_bytes <= self.cache.size

    def describe(self) -> dict:
        return {"weight_bytes": self.weight_bytes, "cache_bytes": self.cache.size, "cache_level": self.cache.level,
                "cache_source": self.cache.source, "in_cache": self.in_cache}

    def why(self) -> str:
        """One sentence: where the weights live and what that makes a verify row cost."""
        w = mib(self.weight_bytes)
        if self.in_cache is None:
            return (f"the weights take {w}; this machine does not say its cache size ({self.cache.source}), so whether "
                    f"they stay in the cache is unknown")
        where = f"this CPU's {mib(self.cache.size)} L{self.cache.level} cache"
        if self.in_cache:
            return (f"the weights ({w}) fit in {where}, so a step is bound by compute, not memory bandwidth: each "
                    f"verify row costs its own compute, and verifying k+1 rows costs up to about k+1 plain steps")
        return (f"the weights ({w}) do not fit in {where}, so a step is bound by reading them from memory: the "
                f"extra rows of a verify ride along with that one read")


def regime(target, draft=None, root: Path = SYSFS_CACHE) -> Regime:
    return Regime(weight_bytes(target, draft), last_level_cache(root))


def lazy_logits(target, root: Path = SYSFS_CACHE) -> bool:
    """The loop's choice for a verify's logits (``speculative_generate(lazy_logits=...)``): on demand, a block of
    rows at a time, where the lm_head's weights fit in the last-level cache (each row costs compute: skip the
    rows past the first rejection); all rows in one call where they stream from memory (one pass over them
    instead of up to three). True where the cache size is unknown (the engine's default)."""
    from .walk import packed_bytes

    size = last_level_cache(root).size
    head = getattr(target, "lm_head", None)
    return size is None or head is None or packed_bytes(head) <= size


def planner_for(stages, here: Regime, backend, threads: int = 1):
    """The loop's ``StagePlanner`` for ``stages`` (``loop.stages.planner``), given a probe of the memory's minute
    (``membw.memory_probe`` on ``threads`` threads, ``backend``'s own read loop where it has one) when the planner
    chooses (``"auto"``) and the run's regime ``here`` says the weights stream from memory: there a split pays in a fast minute and not in a slow
    one (docs/loop.md, "The memory's minute, probed"). With the weights in the cache the minute does not move a
    pass's price, and a planner given as an object keeps the probe it has."""
    from ..loop.stages import StagePlanner, planner
    from .membw import host_library, memory_probe

    given = isinstance(stages, StagePlanner)
    plan = planner(stages)
    if not given and plan.mode == "auto" and here.in_cache is False:
        plan.probe = memory_probe(threads, host_library(backend))
    return plan


def mib(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / (1 << 20):.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.2f} GiB"
