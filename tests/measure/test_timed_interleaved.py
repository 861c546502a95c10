"""bench_runner.timed_interleaved: every variant timed once per repeat, after its warm-up, with a fresh setup each
call, in an order that changes between repeats (a fixed order shows gains that are only the order)."""
import pytest

from onebit_engine.errors import ConfigError
from onebit_engine.measure import bench_runner


def test_every_call_gets_a_fresh_setup_and_the_order_varies():
    calls, setups = [], []

    def variant(name):
        return (lambda: setups.append(name) or name, lambda arg: calls.append(arg))

    ms = bench_runner.timed_interleaved({n: variant(n) for n in "abcd"}, repeats=8, warmup=2)
    assert set(ms) == set("abcd") and all(v >= 0 for v in ms.values())
    assert calls == setups and len(calls) == 4 * (2 + 8)
    timed = [calls[8 + 4 * r: 12 + 4 * r] for r in range(8)]
    assert all(sorted(rep) == list("abcd") for rep in timed)
    assert len({tuple(rep) for rep in timed}) > 1


def test_no_repeats_is_refused():
    with pytest.raises(ConfigError):
        bench_runner.timed_interleaved({"a": (lambda: None, lambda _: None)}, repeats=0)
