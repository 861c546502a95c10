"""A verify in passes (``loop/stages.py``) changes the cost of a round, never its result:

* greedy and sampled runs with every pass schedule (fixed first passes of 1..k rows, "auto", "one") give
  the same tokens, the same accepted counts per round, and the same final target and draft state as one
  pass, on every commit path; the schedules really ran more than one pass;
* the planner's rule on costs it is given: where a few rows cost what one does and drafts are often
  missed it splits the verify at the expected-cost minimum; where every draft is kept, or each row costs
  the same, it does not; a row count never measured is priced by interpolation and a first round is one
  pass; bad modes are refused.
"""
from __future__ import annotations

import numpy as np
import pytest

from onebit_engine import ConfigError
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.loop.stages import REFRESH, TRUST, StagePlanner

from .stubs import BigramDraft, BigramTarget, ScriptedDraft
from .test_round import kept_states, real_pair, same_draft_state, same_target_state


def run(monkeypatch, target, draft, prompt, stages, **kw):
    made = kept_states(monkeypatch, target, draft)
    res = speculative_generate(target, draft, prompt, stop_tokens=[], stages=stages, **kw)
    monkeypatch.undo()
    return res, made[-2], made[-1]


def same_runs(monkeypatch, make, prompt, schedules, **kw):
    """Every schedule against one pass; returns how many rounds ran in more than one pass."""
    ref, st, dst = run(monkeypatch, *make(), prompt, "one", **kw)
    assert all(r.passes == (r.proposed + 1,) for r in ref.rounds)
    split = 0
    for stages in schedules:
        got, st2, dst2 = run(monkeypatch, *make(), prompt, stages, **kw)
        assert got.tokens == ref.tokens, stages
        assert [(r.proposed, r.accepted) for r in got.rounds] == [(r.proposed, r.accepted) for r in ref.rounds], stages
        assert same_target_state(st, st2) and same_draft_state(dst, dst2), stages
        for r in got.rounds:
            assert sum(r.passes) - (len(r.passes) - 1) <= r.proposed + 1  # rows checked, no row twice
        split += sum(len(r.passes) > 1 for r in got.rounds)
    return split


@pytest.mark.parametrize("commit_path", ["keep", "checkpoint", "replay"])
def test_passes_give_one_pass_results_greedy(monkeypatch, tmp_path, commit_path):
    target, draft = real_pair(tmp_path)
    prompt = [2, 7, 1, 8]
    wrong = lambda r: [None, 0, 2, None, 1, 3, None][r % 7]  # noqa: E731  every accept count, full accepts
    make = lambda: (target, ScriptedDraft(target, prompt, 40, block_size=5, wrong_at=wrong))  # noqa: E731
    assert same_runs(monkeypatch, make, prompt, [1, 2, 3, 4, "auto"], max_new_tokens=40, k=4,
                     commit_path=commit_path) > 10
    assert same_runs(monkeypatch, lambda: (target, draft), [3, 1, 4], [2, "auto"], max_new_tokens=23, k=4,
                     commit_path=commit_path) >= 0  # the real draft: whatever it keeps


@pytest.mark.parametrize("seed", [0, 7])
def test_passes_give_one_pass_results_sampled(monkeypatch, tmp_path, seed):
    """The same draws in the same order: the same tokens at T > 0, not only the same distribution."""
    rng = np.random.default_rng(5)
    P, Q = rng.dirichlet(np.ones(6) * 3, size=6), rng.dirichlet(np.ones(6) * 3, size=6)
    make = lambda: (BigramTarget(P), BigramDraft(Q, block_size=5))  # noqa: E731
    assert same_runs(monkeypatch, make, [0], [1, 2, 3, "auto"], max_new_tokens=60, k=4, temperature=1.0, seed=seed) > 5
    target, draft = real_pair(tmp_path, version=1)
    same_runs(monkeypatch, lambda: (target, draft), [9, 2, 6], [1, 2], max_new_tokens=20, k=3, temperature=0.8,
              seed=seed)


def planner_with(costs_ms: dict, kept: float, rounds: int = 400, k: int = 7, seed: int = 0) -> StagePlanner:
    """A planner that has seen passes of these costs and rounds whose drafts were each kept with ``kept``."""
    p = StagePlanner("auto")
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        a = 0
        while a < k and rng.random() < kept:
            a += 1
        p.observe_round(k, a)
    for r, ms in costs_ms.items():  # measured lately and often enough: no one pass due
        for _ in range(TRUST):
            p.observe_pass(r, ms / 1e3)
    return p


FLAT_THEN_COMPUTE = {1: 289.0, 2: 300.0, 3: 320.0, 4: 348.0, 5: 428.0, 6: 496.0, 7: 570.0, 8: 634.0}  # 27B int4, 2 cores


def test_the_planner_splits_where_rows_are_cheap_and_drafts_are_missed():
    p = planner_with(FLAT_THEN_COMPUTE, kept=0.8)
    first = p.rows(0, 7)
    assert first == 4  # 348 + P(4 kept) 348 ~ 490 ms against 634 for one pass
    assert p.expected_ms(0, 7, 4) < 0.8 * p.expected_ms(0, 7, 8)
    assert p.rows(4, 3) == 4  # after a full accept of the first pass: the rest in one pass


def test_the_planner_keeps_one_pass_when_every_draft_is_kept_or_rows_cost_alike():
    assert planner_with(FLAT_THEN_COMPUTE, kept=1.0).rows(0, 7) == 8
    linear = {r: 100.0 + 10.0 * r for r in range(1, 9)}  # a fixed cost a pass and a small one a row
    assert planner_with(linear, kept=0.8).rows(0, 7) == 8


def test_a_split_must_promise_more_than_the_margin():
    """A split a few per cent cheaper on paper is noise in the prices (0.8B int8: 4 rows ~0.9x of 8 made the
    loop slower in passes): one pass unless the split promises SPLIT_MARGIN less time."""
    from onebit_engine.loop.stages import SPLIT_MARGIN, best_passes

    near = {r: 20.0 + 4.0 * r for r in range(1, 9)}  # 8 rows 52 ms; 4 + P(4 kept) 4: ~50.7
    p = planner_with(near, kept=0.8)
    expect, first = best_passes(p.cost_ms, p.kept_all, 0, 7)
    assert first < 8 and (1 - SPLIT_MARGIN) * p.cost_ms(8) <= expect < p.cost_ms(8)  # the rule alone would split
    assert p.rows(0, 7) == 8
    far = {**near, 8: 60.0}  # the same split now promises ~15% less: taken
    assert planner_with(far, kept=0.8).rows(0, 7) < 8


def test_the_planner_prices_unmeasured_rows_and_starts_with_one_pass():
    p = StagePlanner("auto")
    assert p.rows(0, 7) == 8  # nothing measured: one pass, whose time prices the rest
    for _ in range(TRUST):
        p.observe_pass(8, 0.8)
    assert p.cost_ms(8) == pytest.approx(800.0) and p.cost_ms(4) == pytest.approx(400.0)  # through zero
    p.observe_pass(2, 0.5)
    assert p.cost_ms(5) == pytest.approx(500.0 + 300.0 * 3 / 6) and p.cost_ms(1) == pytest.approx(250.0)
    assert p.cost_ms(10) == pytest.approx(1000.0)  # past the largest: its cost per row
    assert p.rows(0, 7) < 8  # no history: half the drafts kept, so an unmeasured split is worth a try


def test_one_pass_is_measured_until_trusted_and_again_when_nothing_chose_it():
    """One pass runs until TRUST measurements price it (a cold first round: 69 ms where 36 is its time),
    and again every REFRESH rounds: a price from a slow minute would otherwise keep the loop in passes."""
    p = planner_with({4: 30.0, 3: 28.0}, kept=0.8, rounds=0)
    for _ in range(TRUST):
        assert p.rows(0, 7) == 8
        p.observe_pass(8, 0.069)
    for _ in range(REFRESH - 1):
        p.observe_round(7, 7)  # every draft kept: a first pass always needs a second
        assert p.rows(0, 7) < 8  # in passes: one pass was priced at 69 ms
    p.observe_round(7, 7)
    assert p.rows(0, 7) == 8  # REFRESH rounds later: one pass again
    for _ in range(TRUST):
        p.observe_pass(8, 0.036)
    assert p.rows(0, 7) == 8  # its real price, 36 ms (the median of the last 5), beats 30 + P(4 kept) * 30


def test_a_split_priced_too_high_is_priced_again_every_refresh_rounds():
    """Every split measured once in a slow minute (900 ms a pass) keeps one pass (634 ms) chosen; every REFRESH
    rounds the planner runs the best split's first pass again, and a fresh price brings the split in."""
    p = planner_with({**{r: 900.0 for r in range(1, 8)}, 8: 634.0}, kept=0.8)
    assert p.rows(0, 7) == 8
    s = p.best_split(0, 7)
    assert s == 7  # 900 + P(7 kept) 900: the cheapest split on these prices
    for _ in range(REFRESH - 1):
        p.observe_round(7, 2)
        p.observe_pass(8, 0.634)  # one pass chosen and measured each round
        assert p.rows(0, 7) == 8
    p.observe_round(7, 2)
    assert p.rows(0, 7) == s  # REFRESH rounds since a pass of 7 ran: priced again
    for _ in range(TRUST):
        p.observe_pass(7, 0.348)
    assert p.rows(0, 7) == 7  # 348 + P(7 kept) 900 ~ 537 against 634: the split now wins
    assert p.rows(0, 0) == 1  # nothing left to split: the bonus row alone


def test_fixed_and_one_pass_modes_and_refusals():
    assert StagePlanner("one").rows(0, 7) == 8
    fixed = StagePlanner(3)
    assert fixed.rows(0, 7) == 3 and fixed.rows(3, 4) == 5 and fixed.rows(0, 1) == 2
    for bad in (0, -1, "two", 2.5, True):
        with pytest.raises(ConfigError, match="must be 'auto', 'one' or a first-pass row count"):
            StagePlanner(bad)


def every_schedule(left: int):
    """All ways to cut ``left`` drafts into passes: tuples of pass rows (the last pass scores the bonus)."""
    if left == 0:
        yield (1,)
        return
    yield (left + 1,)
    for s in range(1, left + 1):
        for rest in every_schedule(left - s):
            yield (s,) + rest


@pytest.mark.parametrize("seed", range(6))
def test_best_passes_is_the_best_schedule(seed):
    """The rule's recursion against every schedule priced by hand, on random costs and keep rates."""
    from onebit_engine.loop.stages import best_passes

    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 7))
    cost = dict(enumerate(np.cumsum(rng.random(k + 2) * rng.choice([0.1, 1.0, 5.0], k + 2)) + rng.random(), start=1))
    keep = rng.random(k) ** 0.3
    kept = lambda d, s: float(np.prod(keep[d: d + s]))  # noqa: E731

    def price(sched):
        total, alive, done = 0.0, 1.0, 0
        for i, s in enumerate(sched):
            total += alive * cost[s]
            if i + 1 < len(sched):
                alive *= kept(done, s)
                done += s
        return total

    best = min(price(s) for s in every_schedule(k))
    got, first = best_passes(lambda r: cost[r], kept, 0, k)
    assert got == pytest.approx(best)
    assert any(sch[0] == first and price(sch) == pytest.approx(best) for sch in every_schedule(k))


def test_ties_go_to_fewer_passes():
    from onebit_engine.loop.stages import best_passes

    assert best_passes(lambda r: 1.0, lambda d, s: 0.0, 0, 7) == (1.0, 8)  # every schedule costs 1: one pass


def test_a_price_is_its_fresh_passes_else_its_newest():
    """The median of a size's passes of the last FRESH rounds; when none is that recent, its newest pass alone:
    a median over old passes kept pricing a fast minute's 3 rows (~300 ms) at a slow minute's 436 ms."""
    from onebit_engine.loop.stages import FRESH

    p = StagePlanner("auto")
    for s in (0.44, 0.43, 0.45):
        p.observe_pass(3, s)
    assert p.cost_ms(3) == pytest.approx(440.0)
    for _ in range(FRESH):
        p.observe_round(7, 2)
    assert p.cost_ms(3) == pytest.approx(450.0)  # nothing fresh: the newest
    p.observe_pass(3, 0.30)
    assert p.cost_ms(3) == pytest.approx(300.0)  # one fresh pass outweighs three stale ones
    p.observe_pass(3, 0.32)
    assert p.cost_ms(3) == pytest.approx(310.0)
    assert p.cost_ms(6) == pytest.approx(620.0)  # interpolation reads the same prices (through zero, per row)


def test_one_fresh_small_pass_brings_a_split_in():
    """The table run's case: one pass (579 ms, bound by compute) chosen on a split priced in a slow minute; the
    split's first pass, tried REFRESH rounds later at a fast minute's price, is chosen from the next round on."""
    p = planner_with({1: 397.0, 3: 436.0, 7: 482.0, 8: 579.0}, kept=0.8)
    assert p.rows(0, 7) == 8
    s = p.best_split(0, 7)
    for _ in range(REFRESH):
        p.observe_pass(8, 0.579)
        p.observe_round(7, 3)
    assert p.rows(0, 7) == s
    p.observe_pass(s, 0.300)
    p.observe_round(7, 3)
    assert p.rows(0, 7) < 8 and p.cost_ms(s) == pytest.approx(300.0)


def test_no_split_is_priced_again_where_no_split_can_pay():
    """Every draft kept: even at each row's share of one pass a split saves nothing, so the best split's first
    pass is not re-run every REFRESH rounds (1 + 7 rows had cost a 27B round ~200 ms each time); with drafts
    missed it is."""
    prices = {**{r: 900.0 for r in range(1, 8)}, 8: 634.0}
    p = planner_with(prices, kept=1.0)
    assert not p.may_pay(0, 7, p.best_split(0, 7))
    for _ in range(2 * REFRESH):
        assert p.rows(0, 7) == 8
        p.observe_pass(8, 0.634)
        p.observe_round(7, 7)
    q = planner_with(prices, kept=0.8)
    assert all(q.may_pay(0, 7, s) for s in range(1, 8))


class FakeProbe:
    """The memory's rate a probe reads (GB/s) and the seconds it takes; counts its calls."""

    def __init__(self, rate: float, seconds: float = 0.002):
        self.rate, self.seconds, self.calls = rate, seconds, 0

    def __call__(self):
        self.calls += 1
        return self.rate, self.seconds


def _split_priced_at(rate: float, prices: dict, kept: float = 0.8) -> "tuple[StagePlanner, int, FakeProbe]":
    """A planner in one pass whose best split last ran while the probe read ``rate``."""
    p = planner_with(prices, kept=kept)
    probe = FakeProbe(rate)
    p.probe = probe
    s = p.best_split(0, 7)
    assert p.rows(0, 7) == 8 and probe.calls == 1  # one pass, but a split may pay: the memory was probed
    p.observe_pass(8, prices[8] / 1e3)
    p.observe_round(7, 3)
    p.observe_pass(s, prices[s] / 1e3)  # the split's pass, in the same round's minute (no new probe since)
    p.observe_round(7, 3)
    assert p.rate_of(s) == rate and p.rate_of(1) is None
    return p, s, probe


SLOW_MINUTE = {1: 404.0, 3: 446.0, 4: 449.0, 5: 442.0, 7: 503.0, 8: 572.0}  # 27B int4, memory below 40 GB/s


def test_a_faster_memory_prices_the_best_split_again_at_once():
    """The split was priced in a slow minute (one pass is then the better schedule); when the probe reads the
    memory MINUTE_SHIFT faster than at that pass, the split runs again in the next round, not REFRESH rounds
    later; a smaller change leaves one pass."""
    from onebit_engine.loop.stages import MINUTE_SHIFT

    p, s, probe = _split_priced_at(36.0, SLOW_MINUTE)
    probe.rate = 36.0 * (1 + MINUTE_SHIFT) * 0.98
    assert p.rows(0, 7) == 8
    p.observe_pass(8, 0.572)
    p.observe_round(7, 3)
    probe.rate = 36.0 * (1 + MINUTE_SHIFT) * 1.02
    assert p.rows(0, 7) == s
    p.observe_pass(s, 0.300)  # a fast minute's price: the split now pays and is chosen
    p.observe_round(7, 3)
    assert p.rate_of(s) == probe.rate and p.rows(0, 7) < 8
    q, s, probe = _split_priced_at(36.0, SLOW_MINUTE)
    q.probe = None  # no probe: the same rounds keep one pass until REFRESH
    assert q.rows(0, 7) == 8


def test_the_probe_stops_where_it_costs_more_than_its_share_of_a_pass():
    """0.8B: a 64 MiB read (~1.5 ms) is ~4% of a pass of ~35 ms: after one read the planner stops probing;
    a 27B pass (~570 ms) keeps it."""
    from onebit_engine.loop.stages import PROBE_SHARE

    near = {1: 26.4, 3: 26.7, 5: 33.0, 7: 34.0, 8: 35.0}
    p = planner_with(near, kept=0.8)
    p.probe = probe = FakeProbe(40.0, seconds=0.0015)
    for _ in range(3 * REFRESH):
        rows = p.rows(0, 7)
        p.observe_pass(rows, near.get(rows, 35.0) / 1e3)
        p.observe_round(7, 3)
    assert probe.calls == 1 and 1.5 > PROBE_SHARE * 35.0
    q, _, probe = _split_priced_at(36.0, SLOW_MINUTE)
    for _ in range(4):
        q.rows(0, 7)
        q.observe_pass(8, 0.572)
        q.observe_round(7, 3)
    assert probe.calls == 5


def test_no_probe_where_no_split_can_pay():
    prices = {**{r: 900.0 for r in range(1, 8)}, 8: 634.0}
    p = planner_with(prices, kept=1.0)
    p.probe = probe = FakeProbe(60.0)
    for _ in range(2 * REFRESH):
        assert p.rows(0, 7) == 8
        p.observe_pass(8, 0.634)
        p.observe_round(7, 7)
    assert probe.calls == 0
