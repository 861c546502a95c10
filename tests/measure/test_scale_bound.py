"""The scale benchmark's bound: the run's fastest read of the stream, not a median - a shared VM's memory moves
between ~30 and ~55 GB/s from minute to minute, and a median stream let plain decoding show 1.2x its bound."""
from types import SimpleNamespace

import pytest

from onebit_engine.hybrid.synthetic import random_target, tiny_config
from onebit_engine.measure.oracle import profile
from onebit_engine.measure.scale_bench import _summarize, step_bytes


def test_the_bound_is_the_fastest_stream_read_of_the_run():
    target = random_target(tiny_config(num_hidden_layers=2, full_attention_interval=2), seed=0)
    nbytes = step_bytes(target)["total"]
    rates = {("plain", 1): [10.0, 12.0, 11.0], ("loop", 1): [20.0, 21.0, 19.0], ("stream", 1): [30.0, 33.0, 31.0],
             ("plain", 2): [14.0, 15.0, 13.0], ("loop", 2): [25.0, 24.0, 26.0], ("stream", 2): [32.0, 55.0, 34.0],
             ("loop_one", 1): [18.0], ("loop_one", 2): [22.0]}
    rnd = SimpleNamespace(draft_ms=1.0, verify_ms=2.0, commit_ms=0.5, total_ms=3.5, emitted=4, proposed=3, accepted=3, passes=(4,))
    rounds = {(kind, t): [rnd] for kind in ("loop", "loop_one") for t in (1, 2)}
    out = _summarize(target, profile("0.8", 3), 3, [1, 2], rates, rounds, [], [1, 2, 3])
    assert out["read_stream_gb_s"] == {1: 31.0, 2: 34.0}  # medians, as shown
    assert out["read_stream_gb_s_max"] == {1: 33.0, 2: 55.0}
    assert out["bound_tokens_per_s"] == pytest.approx(55.0e9 / nbytes)
    assert out["plain_bound_share"] == pytest.approx(14.0 / (55.0e9 / nbytes))
