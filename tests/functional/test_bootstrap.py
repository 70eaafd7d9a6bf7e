import numpy as np
import pytest
import torch

from hf_uq.functional.bootstrap import BootstrapInterval, bootstrap_indices, bootstrap_interval


def _mean(x):
    return x.mean()


def _batched_mean(x):
    return x.mean(axis=-1)


def test_hand_case_two_points():
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    x = np.array([0.0, 1.0])
    est, low, high = bootstrap_interval(_mean, x, n_resamples=4000)
    assert (est, low, high) == (0.5, 0.0, 1.0)
    # the 30% and 70% quantiles fall inside the 0.5 atom
    assert bootstrap_interval(_mean, x, n_resamples=4000, confidence=0.4)[1:] == (0.5, 0.5)


def test_constant_data_gives_degenerate_interval():
    result = bootstrap_interval(_mean, np.full(10, 3.0), n_resamples=50)
    assert isinstance(result, BootstrapInterval)
    assert result == (3.0, 3.0, 3.0)


def test_normal_mean_coverage():
    # percentile intervals of a normal mean cover the true mean ~95% of the time
    rng = np.random.default_rng(123)
    trials, covered = 200, 0
    for t in range(trials):
        x = rng.normal(loc=2.0, scale=1.5, size=60)
        _, low, high = bootstrap_interval(_batched_mean, x, n_resamples=400, seed=t, vectorized=True)
        covered += low <= 2.0 <= high
    assert 0.89 <= covered / trials <= 0.99


def test_normal_mean_matches_analytic_interval():
    x = np.random.default_rng(7).normal(size=3000)
    est, low, high = bootstrap_interval(_batched_mean, x, n_resamples=2000, vectorized=True)
    half = 1.959964 * x.std(ddof=1) / np.sqrt(len(x))
    assert est == pytest.approx(x.mean())
    assert low == pytest.approx(est - half, abs=0.1 * half)
    assert high == pytest.approx(est + half, abs=0.1 * half)


def test_deterministic_and_vectorized_equals_loop():
    x = np.random.default_rng(1).normal(size=(37, 2))

    def stat(a):
        return a[:, 0].mean() - a[:, 1].mean()

    def vstat(a):
        return a[..., 0].mean(-1) - a[..., 1].mean(-1)

    looped = bootstrap_interval(stat, x, n_resamples=150, seed=5)
    assert looped == bootstrap_interval(stat, x, n_resamples=150, seed=5)
    vec = bootstrap_interval(vstat, x, n_resamples=150, seed=5, vectorized=True)
    np.testing.assert_allclose(vec, looped, rtol=1e-12)
    assert bootstrap_interval(stat, x, n_resamples=150, seed=6) != looped


def test_joint_resampling_keeps_pairs():
    a = np.arange(50.0)
    b = 2 * a

    def stat(x, y):
        assert np.array_equal(y, 2 * x)  # rows moved together
        return (y - 2 * x).sum()

    assert bootstrap_interval(stat, a, torch.as_tensor(b), n_resamples=20) == (0.0, 0.0, 0.0)


def test_multi_output_statistic():
    x = np.random.default_rng(2).normal(size=100)
    result = bootstrap_interval(lambda v: np.array([v.mean(), v.max()]), x, n_resamples=100)
    assert result.estimate.shape == (2,)
    single = bootstrap_interval(_mean, x, n_resamples=100)
    assert result.low[0] == single.low and result.high[0] == single.high
    assert result.contains(result.estimate).all()


def test_groups_resample_within_each_group():
    groups = np.array(["a", "b", "a", "b", "b", "a", "c"])
    for idx in bootstrap_indices(len(groups), 100, seed=0, groups=groups):
        assert (groups[idx] == groups).all()
    # every group has mean 0 or 1 and keeps its size: the pooled mean cannot move
    x = np.array([0.0, 0.0, 1.0, 1.0])
    grouped = bootstrap_interval(_mean, x, groups=[0, 0, 1, 1], n_resamples=200)
    assert grouped == (0.5, 0.5, 0.5)
    free = bootstrap_interval(_mean, x, n_resamples=200)
    assert free.low < 0.5 < free.high


def test_grouped_interval_narrower_than_free_when_groups_differ():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 0.1, 100), rng.normal(5, 0.1, 100)])
    groups = np.repeat([0, 1], 100)
    grouped = bootstrap_interval(_batched_mean, x, groups=groups, vectorized=True)
    free = bootstrap_interval(_batched_mean, x, vectorized=True)
    assert grouped.high - grouped.low < 0.2 * (free.high - free.low)


def test_nan_resamples_are_dropped_with_warning():
    x = np.array([0.0] * 9 + [1.0])

    def stat(v):
        return np.nan if v.max() == 0 else v.mean()

    with pytest.warns(RuntimeWarning, match="NaN on"):
        _, low, high = bootstrap_interval(stat, x, n_resamples=300)
    assert 0.1 <= low and high > 0.1


def test_zero_resamples():
    assert bootstrap_interval(_mean, [1.0, 2.0], n_resamples=0)[0] == 1.5
    assert np.isnan(bootstrap_interval(_mean, [1.0, 2.0], n_resamples=0).low)


@pytest.mark.parametrize(
    "kwargs, arrays, match",
    [
        ({}, ([1.0, 2.0], [1.0]), "length mismatch"),
        ({}, ([],), "empty"),
        ({"confidence": 1.0}, ([1.0],), "confidence"),
        ({"groups": [0, 1, 2]}, ([1.0, 2.0],), "groups"),
        ({"n_resamples": -1}, ([1.0, 2.0],), "n_resamples"),
    ],
)
def test_bad_input(kwargs, arrays, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_interval(_mean, *arrays, **kwargs)


def test_bad_statistic_output():
    with pytest.raises(ValueError, match="scalar or a 1-D"):
        bootstrap_interval(lambda v: np.ones((2, 2)), [1.0, 2.0], n_resamples=2)
