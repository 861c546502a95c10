"""The scale benchmark's bound. Plain steps are paired with the stream read just before each
(measure/paired_bound.py): a shared VM's memory moves between ~30 and ~57 GB/s from minute to minute,
and a stream read in another minute let plain decoding show 1.14x its "bound". The run's fastest read
stays as ``plain_bound_share_fastest_read`` (a median stream once let plain decoding show 1.2x)."""
from types import SimpleNamespace

import numpy as np
import pytest

from onebit_engine.hybrid.synthetic import random_target, tiny_config
from onebit_engine.loop.generate import generate
from onebit_engine.measure.oracle import profile
from onebit_engine.measure.membw import stream_gb_s
from onebit_engine.measure.paired_bound import READS, paired_share, paired_steps
from onebit_engine.measure.scale_bench import _summarize, step_bytes


def _target():
    return random_target(tiny_config(num_hidden_layers=2, full_attention_interval=2), seed=0)


def _rates(paired):
    rates = {("plain", 1): [10.0, 12.0, 11.0], ("loop", 1): [20.0, 21.0, 19.0], ("stream", 1): [30.0, 33.0, 31.0],
             ("plain", 2): [14.0, 15.0, 13.0], ("loop", 2): [25.0, 24.0, 26.0], ("stream", 2): [32.0, 55.0, 34.0],
             ("loop_one", 1): [18.0], ("loop_one", 2): [22.0], ("paired", 2): paired}
    rnd = SimpleNamespace(draft_ms=1.0, verify_ms=2.0, commit_ms=0.5, total_ms=3.5, emitted=4, proposed=3, accepted=3, passes=(4,))
    return rates, {(kind, t): [rnd] for kind in ("loop", "loop_one") for t in (1, 2)}


def test_the_fastest_read_figure_is_the_runs_fastest_stream_read():
    target = _target()
    nbytes = step_bytes(target)["total"]
    rates, rounds = _rates([])
    out = _summarize(target, profile("0.8", 3), 3, [1, 2], rates, rounds, [], [1, 2, 3])
    assert out["read_stream_gb_s"] == {1: 31.0, 2: 34.0}  # medians, as shown
    assert out["read_stream_gb_s_max"] == {1: 33.0, 2: 55.0}
    assert out["bound_tokens_per_s"] == pytest.approx(55.0e9 / nbytes)
    assert out["plain_bound_share_fastest_read"] == pytest.approx(14.0 / (55.0e9 / nbytes))
    # no paired step: the share is None with its reason, never a stand-in
    assert out["plain_bound_share"] is None and "plain_bound_share" in out["null_reasons"]


def test_the_share_pairs_each_step_with_the_read_before_it():
    target = _target()
    nbytes = step_bytes(target)["total"]
    # a fast minute and a slow one: steps take twice as long when the stream reads half as fast
    fast = [(50.0, nbytes / 45e9)] * 3
    slow = [(25.0, nbytes / 22.5e9)] * 4
    rates, rounds = _rates(fast + slow)
    out = _summarize(target, profile("0.8", 3), 3, [1, 2], rates, rounds, [], [1, 2, 3])
    assert out["plain_bound_share"] == pytest.approx(0.9)  # the same share in both minutes
    pp = out["plain_bound_paired"]
    assert pp["steps"] == 7 and pp["threads"] == 2
    assert pp["stream_gb_s_median"] == pytest.approx(25.0)
    # against the run's fastest read (55), the slow minute's steps would have looked far from their bound
    assert paired_share([(55.0, s) for _, s in slow], nbytes)["share"] == pytest.approx(22.5 / 55)


def test_paired_share_is_the_median_and_skips_no_pair():
    assert paired_share([], 10) is None
    assert paired_share([(0.0, 1.0), (float("nan"), 1.0)], 10) is None
    got = paired_share([(1.0, 10.0), (1.0, 5.0), (1.0, 20.0)], 10**10)  # shares 1, 2, 0.5
    assert got["share"] == pytest.approx(1.0) and got["share_quartiles"] == pytest.approx([0.75, 1.5])


class _Stream:
    nbytes = 4 * 10**9

    def __init__(self):
        self.calls = 0

    def seconds(self):
        self.calls += 1
        return 0.1 if self.calls % 2 else 0.08  # of two reads, the faster counts: 50 GB/s


def test_paired_steps_run_plain_decodings_steps_each_after_its_reads():
    target = _target()
    prompt = [3, 1, 4, 1, 5]
    truth = generate(target, prompt, max_new_tokens=6, stop_tokens=()).tokens
    stream = _Stream()
    seen = []
    forward = target.forward

    def spy(tokens, state):
        seen.append((list(tokens), stream.calls))
        return forward(tokens, state)

    target.forward = spy
    pairs = paired_steps(target, prompt, truth[:-1], stream)
    assert [p[0] for p in pairs] == pytest.approx([50.0] * 5)
    assert all(s > 0 for _, s in pairs)
    # the prefill, then one step per token fed, each after two more stream reads
    assert seen == [(prompt, 0)] + [([t], 2 * (i + 1)) for i, t in enumerate(truth[:-1])]
    with pytest.raises(ValueError, match="reads=0"):
        paired_steps(target, prompt, truth[:1], stream, reads=0)
    assert np.isfinite([s for _, s in pairs]).all()
    assert stream_gb_s(_Stream(), READS) == pytest.approx(50.0) and stream_gb_s(_Stream(), reads=1) == pytest.approx(40.0)
    with pytest.raises(ValueError, match="reads=0"):
        stream_gb_s(stream, reads=0)


def test_pass_prices_are_the_planners_own_prices_by_rows():
    from onebit_engine.loop.stages import FRESH, RECENT, StagePlanner
    from onebit_engine.measure.scale_bench import pass_prices

    p = StagePlanner("auto")
    for s in (0.5, 0.1, 0.3) + (0.9,) * RECENT:  # the first three fall out of the recent window of 8 rows
        p.observe_pass(8, s)
    p.observe_pass(4, 0.2)
    p.observe_pass(4, 0.4)
    assert pass_prices(p) == {"4": {"median_ms": pytest.approx(300.0), "passes": 2},
                              "8": {"median_ms": pytest.approx(900.0), "passes": RECENT}}
    assert list(pass_prices(p)) == ["4", "8"] and pass_prices(StagePlanner("auto")) == {}
    for _ in range(FRESH):
        p.observe_round(7, 2)
    p.observe_pass(4, 0.1)  # the price the planner chooses by: the fresh pass, not the median of all three kept
    assert pass_prices(p)["4"] == {"median_ms": pytest.approx(100.0), "passes": 3}
