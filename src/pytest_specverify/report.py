"""``CheckReport``: what a passing check exercised (the plugin files it in the test's properties)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckReport:
    """``counts`` (e.g. commits per path/accept count), ``metrics`` (accept rate, tokens/round...),
    ``notes`` (what a pass did not, or only partly, check: near-tie divergences accepted under the profile)."""

    name: str
    counts: Counter = field(default_factory=Counter)
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
