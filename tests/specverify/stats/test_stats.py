"""The sampling check's statistics: the pooled chi-square and the one-direction z-test hold their
false-alarm rate on exact samples and see a bias of the size the mutants make."""
import numpy as np

from pytest_specverify.stats import conditional_fit, directional_fit


def _groups(rng, n_groups, per_group, V, tilt=None, eps=0.0):
    out = {}
    for i in range(n_groups):
        p = rng.dirichlet(np.ones(V))
        draw = p if tilt is None else np.clip(p + eps * tilt * p, 0, None)
        out[i] = (np.bincount(rng.choice(V, size=per_group, p=draw / draw.sum()), minlength=V).astype(float), p)
    return out


def test_exact_samples_pass_both_tests():
    rng = np.random.default_rng(0)
    g = rng.standard_normal(16)
    fails = 0
    for _ in range(50):
        groups = _groups(rng, 40, 12, 16)
        fails += not conditional_fit("x", groups, 1e-3).passed
        fails += not directional_fit("x", groups, g, 1e-3).passed
    assert fails <= 2  # 100 tests at a false-alarm rate of 1e-3 each


def test_the_z_test_sees_a_small_bias_along_its_direction_that_the_chi_square_misses():
    rng = np.random.default_rng(1)
    tilt = rng.standard_normal(16)
    groups = _groups(rng, 60, 8, 16, tilt=tilt, eps=0.5)  # 480 tokens over 60 contexts of 8: the chi-square merges
    # every bin of a context (expected < 5 each) and so tests nothing
    assert not directional_fit("x", groups, tilt, 1e-6).passed
    assert conditional_fit("x", groups, 1e-6, pool_small=False).passed  # the old fit: small contexts left out
    assert conditional_fit("x", groups, 1e-6).df > 0  # now pooled: it tests something


def test_z_is_zero_without_variance_and_counts_every_token():
    p = np.array([1.0, 0.0, 0.0])
    r = directional_fit("x", {0: (np.array([5.0, 0, 0]), p)}, np.array([1.0, 2.0, 3.0]), 1e-6)
    assert r.z == 0.0 and r.n == 5 and r.passed
