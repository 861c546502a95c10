"""A round's verify in stages: how many rows each verify pass takes.

A round verifies ``[last, d1..dn]``. In one pass that is n + 1 rows. Where the weights stream from memory
and a few rows cost no more than one (their multiply-adds hide behind the stream), but n + 1 rows cost
compute (a 27B int4 target on 2 cores: 4 rows ~1.2 plain steps, 8 rows ~2.2), a round can verify the
first s rows, and run the rest as a second pass only when every draft the first pass checked was kept. Row
i of a pass scores the token after it, so a pass of s rows checks the next s drafts; after a full accept
of those, the next pass starts at the last of them. The rows each pass sees, their state and their bits
are the ones a single pass gives (a verify's rows are bitwise single steps, and a pass that keeps all of
its rows commits them by the ``keep`` path), so the output does not depend on the schedule; nor do the
random draws at T > 0 (the acceptance draws one number per checked draft, in order, and the bonus once).

:class:`StagePlanner` picks each pass's rows to minimise the expected verify time of the rest of the round:
``cost(s) + P(the s drafts are all kept) * cost(rows left)``, from two things the loop measures as it runs:
the wall time of a pass by its rows (the median of its passes of the last ``FRESH`` rounds, else its newest
pass alone) and, from past rounds, how often drafts at those positions were kept. A row count not yet measured
is priced by interpolating the measured ones (through zero below the smallest), an optimistic guess the next
pass of that size corrects: a schedule is tried at most about once before the measurements decide. One pass,
the baseline of every choice, runs for the first ``TRUST`` rounds (a run's first round is cold: compiled code,
first touches) and again every ``REFRESH`` rounds when nothing chose it in between; while one pass is chosen,
the best split's first pass runs every ``REFRESH`` rounds likewise, unless it could not win even if each row
cost its share of one pass (where every draft is kept, no split can). A price taken in a slow minute would
otherwise never be corrected, since only what is chosen is measured again: a 35B-A3B table run stayed in one
pass in 23 of 33 rounds (1.11x plain) where the same row by itself split and gave 1.35x.

Prices are fresh ones because the machine is not the same from one minute to the next: on a shared VM
a 27B int4 pass of 1-4 rows costs ~270-330 ms while the memory is fast and ~410-470 ms while it is slow,
where 8 rows (bound by compute) cost ~560-580 ms in both. A median over a size's last few passes, however
old, priced 3 rows at 436 ms in a fast minute (measured at ~300) and kept a table run in one pass for 30 of
33 rounds (2.17x plain; a first pass of 4 at that minute's prices gives ~2.6x). Since one pass is bound by
compute, its own time says nothing about the memory's minute: only a small pass does, so the best split's
first pass is tried every ``REFRESH`` rounds and its newest time prices it.

With a ``probe`` (a timed read of a buffer larger than the caches: the memory's rate now), the planner also
prices the best split again as soon as the memory reads ``MINUTE_SHIFT`` faster than when that split last ran,
instead of waiting out ``REFRESH`` rounds: a fast minute is when a split pays, and one pass, bound by compute,
cannot show it. The probe runs once a round (before its first pass) while it costs under ``PROBE_SHARE`` of one
pass (a 64 MiB read: ~1.5 ms against a 27B pass of ~560; at 0.8B it would be 4% of a pass, so it stops after
its first read) and only while some split could pay (``may_pay``).

A split is taken only when it promises ``SPLIT_MARGIN`` less expected time than one pass of the rest. Prices
are medians of a few passes on a machine whose memory speed drifts by 20% a minute; where a few rows cost
nearly what all of them do (a 0.8B int8 target: 4 rows ~0.9x of 8), splits won by noise, ran a second
pass in half the rounds and made the loop slower than one pass (0.8B: 1.87x plain against 1.96x; 27B int4
in one run 2.64x against 2.97x). A real gain is larger than that (a sparse MoE verify: 1.35x against 1.14x).
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import ConfigError

RECENT = 5  # passes of one row count kept: the median of those of the last FRESH rounds prices it
FRESH = 16  # rounds a pass's time speaks for the machine's present (its memory speed drifts minute to minute)
REFRESH = 16  # rounds after which one pass, or the best split's first pass, is run again: no price is a stale one
TRUST = 3  # one pass is run until it has this many measurements: a cold first round alone does not price it
SPLIT_MARGIN = 0.08  # a split must promise 8% less expected time than one pass (the module says why)
PRIOR = 0.5  # pseudo-count of a kept and a missed draft: no history reads as "kept half the time"
MINUTE_SHIFT = 0.15  # the memory this much faster than at the best split's last pass: price that split again now
PROBE_SHARE = 0.01  # the memory is probed only while a probe costs under this share of one pass


@dataclass
class StagePlanner:
    """Chooses the rows of each verify pass. ``mode``: ``"auto"`` (the expected-cost rule above),
    ``"one"`` (every round one pass: the rule of the seed PR) or an int s >= 1 (a first pass of at most s
    rows, the rest in one more pass). One planner can serve several runs of the same target and draft
    (its measurements carry over, so a warm-up run trains it)."""

    mode: "str | int" = "auto"
    costs: dict[int, deque] = field(default_factory=dict)  # rows -> recent (round count, pass seconds, probed rate)
    rounds: Counter = field(default_factory=Counter)  # (drafts proposed, drafts kept) -> past rounds
    seen: dict[int, int] = field(default_factory=dict)  # rows -> the round count when a pass of them last ran
    _price: dict = field(default_factory=dict, repr=False)  # rows -> ms, and (done, s) -> P: cleared on news
    _count: int = field(default=0, repr=False)  # rounds observed
    # () -> (the memory's read rate now in GB/s, the seconds the read took), or None: no probing (see the module)
    probe: "Callable[[], tuple[float, float]] | None" = field(default=None, repr=False, compare=False)
    _rate: "float | None" = field(default=None, repr=False)  # this round's probed rate
    _probe_s: float = field(default=0.0, repr=False)  # the last probe's own time

    def __post_init__(self):
        m = self.mode
        if not (m in ("auto", "one") or (isinstance(m, int) and not isinstance(m, bool) and m >= 1)):
            raise ConfigError(f"verify stages {m!r} must be 'auto', 'one' or a first-pass row count >= 1")

    def rows(self, done: int, left: int) -> int:
        """Rows of the next pass of a round whose first ``done`` drafts are kept and ``left`` are unchecked
        (the pass can take 1 .. left + 1 rows; left + 1 checks them all and scores the bonus)."""
        if left < 0 or done < 0:
            raise ConfigError(f"a pass after {done} kept drafts with {left} left: both must be >= 0")
        full = left + 1
        if self.mode == "one":
            return full
        if isinstance(self.mode, int):
            return full if done else min(self.mode, full)
        if done == 0:
            if self._rate is not None:
                self._rate = None
                self._price.clear()
            if len(self.costs.get(full, ())) < TRUST or self._count - self.seen[full] >= REFRESH:
                return full  # one pass first, and again every REFRESH rounds: its time is the baseline of every choice
            self._probe_now(left, full)
        expect, s = best_passes(self.cost_ms, self.kept_all, done, left)
        if s < full and expect < (1.0 - SPLIT_MARGIN) * self.cost_ms(full):
            return s
        if done == 0 and left > 0:  # one pass: re-price the best split's first pass every REFRESH rounds, or now
            s = self.best_split(done, left)
            if s in self.seen and (self._count - self.seen[s] >= REFRESH or self._faster_since(s)) and self.may_pay(done, left, s):
                return s
        return full

    def _probe_now(self, left: int, full: int) -> None:
        """This round's memory rate, read before its first pass while probing is cheap next to one pass and some
        split could pay; the prices are then those of passes run at a like rate (``_measured_ms``)."""
        if self.probe is None or left < 1 or self._probe_s * 1e3 > PROBE_SHARE * self.cost_ms(full):
            return
        if not self.may_pay(0, left, self.best_split(0, left)):
            return
        self._rate, self._probe_s = self.probe()
        self._price.clear()

    def rate_of(self, rows: int) -> "float | None":
        """The probed memory rate of the round the newest probed pass of ``rows`` ran in (None: none was)."""
        return next((r for _, _, r in reversed(self.costs.get(rows, ())) if r is not None), None)

    def _faster_since(self, rows: int) -> bool:
        """Whether the memory reads MINUTE_SHIFT faster now than in the round of the last probed pass of ``rows``."""
        then = self.rate_of(rows)
        return self._rate is not None and then is not None and self._rate >= (1.0 + MINUTE_SHIFT) * then

    def may_pay(self, done: int, left: int, s: int) -> bool:
        """Whether a first pass of s rows could beat one pass at all: priced as if every row cost its share of
        one pass (the best case for a split: rows share a pass's weight reads, so a row never costs less in a
        bigger pass). Where every draft is kept no split can, and re-pricing one cost a 27B round ~200 ms every
        REFRESH rounds (1 + 7 rows: 4.36x plain against 4.53x in one pass)."""
        rows = s + self.kept_all(done, s) * best_passes(float, self.kept_all, done + s, left - s)[0]
        return rows < (1.0 - SPLIT_MARGIN) * (left + 1)

    def best_split(self, done: int, left: int) -> int:
        """The first pass (rows < left + 1) of the cheapest schedule that splits the rest of the round."""
        return min(range(1, left + 1), key=lambda s: (self.expected_ms(done, left, s), -s))

    def expected_ms(self, done: int, left: int, s: int) -> float:
        """Expected time of the rest of the round if the next pass takes s rows and the later ones are
        chosen by the same rule."""
        full = left + 1
        if s >= full:
            return self.cost_ms(full)
        return self.cost_ms(s) + self.kept_all(done, s) * best_passes(self.cost_ms, self.kept_all, done + s, left - s)[0]

    def kept_all(self, done: int, s: int) -> float:
        """P(drafts done+1 .. done+s all kept | drafts 1..done kept), from past rounds that proposed them."""
        if (done, s) in self._price:
            return self._price[(done, s)]
        asked = kept = 0
        for (p, a), n in self.rounds.items():
            if a >= done and p >= done + s:
                asked += n
                kept += n * (a >= done + s)
        self._price[(done, s)] = p = (kept + PRIOR) / (asked + 2 * PRIOR)
        return p

    def cost_ms(self, rows: int) -> float:
        """A pass's time: the median of its recent measurements, else interpolated (see the module)."""
        if rows not in self._price:
            self._price[rows] = self._cost_ms(rows)
        return self._price[rows]

    def _cost_ms(self, rows: int) -> float:
        if rows in self.costs:
            return self._measured_ms(rows)
        known = sorted((r, self._measured_ms(r)) for r in self.costs)
        if not known:
            return float(rows)  # nothing measured: a unit that grows with the rows
        below = [(r, c) for r, c in known if r < rows] or [(0, 0.0)]
        above = [(r, c) for r, c in known if r > rows]
        (r0, c0) = below[-1]
        if not above:  # past the largest measured: the same cost per row
            return c0 * rows / r0
        (r1, c1) = above[0]
        return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)

    def _measured_ms(self, rows: int) -> float:
        """With this round's memory rate probed: the median of the passes of ``rows`` run at a rate within
        MINUTE_SHIFT of it, if any. Else the median of those run in the last FRESH rounds, else the newest."""
        runs = self.costs[rows]
        now = self._rate
        like = [sec for at, sec, r in runs if now is not None and r is not None and abs(r - now) < MINUTE_SHIFT * now]
        fresh = like or [sec for at, sec, r in runs if self._count - at < FRESH] or [runs[-1][1]]
        return 1e3 * float(np.median(fresh))

    def observe_pass(self, rows: int, seconds: float) -> None:
        self.costs.setdefault(rows, deque(maxlen=RECENT)).append((self._count, seconds, self._rate))
        self.seen[rows] = self._count
        self._price.clear()

    def observe_round(self, proposed: int, accepted: int) -> None:
        self.rounds[(proposed, accepted)] += 1
        self._count += 1
        self._price.clear()


def best_passes(cost: Callable[[int], float], kept: Callable[[int, int], float], done: int, left: int) -> tuple[float, int]:
    """(expected time, rows of the next pass) of the best pass schedule for the rest of a round:
    ``E(done, left) = min over s in 1..left+1 of cost(s) + [s <= left] kept(done, s) E(done + s, left - s)``
    (``kept(done, s)``: P(the next s drafts are all kept | the first done were)). Ties go to the larger
    pass (fewer passes). O(left^2) evaluations; ``measure/roofline.py`` prices its ceiling with it."""
    memo: dict[int, tuple[float, int]] = {}

    def e(d: int) -> tuple[float, int]:
        if d not in memo:
            lft = done + left - d
            memo[d] = min(((cost(s) + (kept(d, s) * e(d + s)[0] if s <= lft else 0.0), s) for s in range(1, lft + 2)),
                          key=lambda t: (t[0], -t[1]))
        return memo[d]

    return e(done)


def planner(stages: "str | int | StagePlanner | None") -> StagePlanner:
    """The planner a run uses: the one given, or a fresh one of the mode given (None: ``"one"``)."""
    if isinstance(stages, StagePlanner):
        return stages
    return StagePlanner("one" if stages is None else stages)
