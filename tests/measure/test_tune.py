"""tune: expected tokens per round, the choice from measured costs, and the measurement's shape."""
import numpy as np
import pytest

from onebit_engine.draft import load_draft, write_synthetic_draft
from onebit_engine.measure import tune
from onebit_engine.hybrid.synthetic import random_target, tiny_config


def test_expected_tokens():
    assert tune.expected_tokens([0.5, 0.25], 1) == 1.5
    assert tune.expected_tokens([0.5, 0.25], 2) == 1.75
    assert tune.expected_tokens([0.5, 0.25], 5) == 1.75  # past the profile: never accepted


def test_choose_picks_the_fastest_per_token_and_breaks_ties_to_fewer_threads():
    profile = [0.9, 0.8, 0.1, 0.0]
    costs = {(1, None): 1.0, (2, None): 1.0, (1, 1): 1.5, (1, 2): 1.8, (1, 4): 3.0, (2, 1): 1.2, (2, 2): 1.6, (2, 4): 1.9}
    plain, spec = tune.choose(costs, profile)
    assert (plain.threads, plain.k, plain.ms_per_token) == (1, None, 1.0)
    # per token: (2, 2) = 1.6 / 2.7 = 0.593 beats (2, 1) = 1.2 / 1.9 = 0.632 and (2, 4) = 1.9 / 2.8 = 0.679
    assert (spec.threads, spec.k) == (2, 2) and spec.ms_per_token == pytest.approx(1.6 / 2.7)
    with pytest.raises(ValueError, match="costs need plain steps"):
        tune.choose({(1, 3): 1.0}, profile)


def test_measure_times_every_variant_and_leaves_no_state_behind(tmp_path):
    cfg = tiny_config()
    target = random_target(cfg, 1, backend="host-int", row_set=8)
    draft = load_draft(write_synthetic_draft(tmp_path, cfg, version=2, block_size=8, seed=2), target, backend="host-int")
    applied = []
    costs = tune.measure(target, draft, [1, 2, 3, 4], ks=[1, 3], threads=[1, 2], set_threads=applied.append,
                         acceptance=[0.5, 0.3, 0.1], reps=2)
    assert set(costs) == {(1, None), (2, None), (1, 1), (1, 3), (2, 1), (2, 3)}
    assert all(np.isfinite(v) and v > 0 for v in costs.values())
    assert sorted(set(applied)) == [1, 2] and len(applied) == 12  # every variant, in two passes
