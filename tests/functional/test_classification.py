"""ECE, NLL, Brier and accuracy: hand-worked values and torchmetrics / sklearn cross-checks."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import log_loss
from torchmetrics.functional.classification import multiclass_calibration_error

from hf_uq import functional as F


def _probs(n, c, seed, sharp=3.0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * sharp
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True), rng.integers(0, c, n)


def test_ece_hand_worked():
    # confidences 0.9 (right), 0.9 (wrong), 0.6 (right), 0.55 (right); 2 bins (0,.5], (.5,1]
    # all four fall in bin 1: acc 3/4, conf 0.7375 -> ECE = |0.75 - 0.7375| = 0.0125
    probs = [[0.9, 0.1], [0.9, 0.1], [0.4, 0.6], [0.55, 0.45]]
    labels = [0, 1, 1, 0]
    assert F.ece(probs, labels, n_bins=2) == pytest.approx(0.0125, abs=1e-12)
    # 10 bins: bin (.8,.9] acc 1/2 conf .9 -> gap .4 w .5; (.5,.6] two samples acc 1 conf .575
    # -> gap .425 w .5 => 0.5*0.4 + 0.5*0.425 = 0.4125
    assert F.ece(probs, labels, n_bins=10) == pytest.approx(0.4125, abs=1e-12)
    assert F.ece(probs, labels, n_bins=10, norm="max") == pytest.approx(0.425, abs=1e-12)
    assert F.ece(probs, labels, n_bins=10, norm="l2") == pytest.approx(
        np.sqrt(0.5 * 0.4**2 + 0.5 * 0.425**2), abs=1e-12
    )


def test_ece_bin_edges_are_left_open():
    # confidence exactly 0.5 with 2 bins belongs to bin 0 = (0, .5] (0 also goes to bin 0)
    stats = F.calibration_bins([[0.5, 0.5], [0.75, 0.25]], [0, 0], n_bins=2)
    np.testing.assert_array_equal(stats.counts, [1, 1])
    # float32 confidence equal to the float32 rounding of an edge stays exact
    p32 = np.array([[0.2, 0.8], [0.8, 0.2]], dtype=np.float32)
    stats32 = F.calibration_bins(p32, [1, 0], n_bins=5)
    stats64 = F.calibration_bins(p32.astype(np.float64), [1, 0], n_bins=5)
    np.testing.assert_array_equal(stats32.counts, stats64.counts)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_bins", [1, 7, 15, 100])
def test_uniform_bins_on_and_around_every_edge_match_a_search(dtype, n_bins):
    # large inputs take the search-free path (floor + exact-edge correction); every edge, its
    # float neighbours and random values must land where the exact (lo, hi] search puts them
    from hf_uq.functional.classification import _bin_statistics

    edges = np.linspace(0.0, 1.0, n_bins + 1)
    exact = np.concatenate([edges, np.nextafter(edges, -1), np.nextafter(edges, 2)]).astype(dtype)
    rng = np.random.default_rng(n_bins)
    confidence = np.clip(np.concatenate([np.tile(exact, 300), rng.random(70_000).astype(dtype)]), 0, 1)
    correct = rng.random(len(confidence)) < 0.5
    fast = _bin_statistics(confidence, correct, n_bins, "uniform")
    # reference: the float64 comparison with the float64 edges, bin m = (e_m, e_m+1], 0 in bin 0
    c64 = confidence.astype(np.float64)
    index = np.maximum(np.searchsorted(edges, c64, side="left") - 1, 0)
    np.testing.assert_array_equal(fast.counts, np.bincount(index, minlength=n_bins))
    np.testing.assert_allclose(fast.accuracy, np.bincount(index, correct, n_bins) / fast.counts)


@pytest.mark.parametrize("seed", range(5))
def test_ece_matches_torchmetrics(seed):
    probs, labels = _probs(3000, 10, seed)
    probs = probs.astype(np.float32)
    edges = np.linspace(0, 1, 16)
    assert not np.isin(probs.max(1), edges).any()  # no confidence on an edge
    ours = F.ece(probs, labels, n_bins=15, norm="l1")
    theirs = multiclass_calibration_error(
        torch.from_numpy(probs), torch.from_numpy(labels), num_classes=10, n_bins=15, norm="l1"
    )
    assert ours == pytest.approx(float(theirs), abs=1e-6)
    theirs_max = multiclass_calibration_error(
        torch.from_numpy(probs), torch.from_numpy(labels), num_classes=10, n_bins=15, norm="max"
    )
    assert F.ece(probs, labels, norm="max") == pytest.approx(float(theirs_max), abs=1e-6)


def test_ece_quantile_bins_are_equal_mass():
    probs, labels = _probs(1500, 5, 7)
    stats = F.calibration_bins(probs, labels, n_bins=15, binning="quantile")
    assert stats.counts.sum() == 1500
    np.testing.assert_allclose(stats.counts, 100, atol=1)
    # brute force: bins between quantile edges, (lo, hi]
    conf = probs.max(1)
    correct = probs.argmax(1) == labels
    edges = np.quantile(conf, np.linspace(0, 1, 16))
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, 14)
    expected = sum(
        (idx == m).sum() / 1500 * abs(correct[idx == m].mean() - conf[idx == m].mean())
        for m in range(15)
        if (idx == m).any()
    )
    assert F.ece(probs, labels, binning="quantile") == pytest.approx(expected, abs=1e-12)


def test_ece_from_logits_equals_softmax():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 4))
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = rng.integers(0, 4, 200)
    assert F.ece(z, y, from_logits=True) == pytest.approx(F.ece(p, y), abs=1e-12)


def test_nll_hand_worked_and_sklearn():
    probs = [[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]
    assert F.nll(probs, [0, 1]) == pytest.approx(-(np.log(0.5) + np.log(0.8)) / 2, abs=1e-12)
    p, y = _probs(500, 6, 3)
    assert F.nll(p, y) == pytest.approx(log_loss(y, p, labels=range(6)), rel=1e-10)


def test_nll_clips_zero_probability():
    assert F.nll([[1.0, 0.0]], [1]) == pytest.approx(-np.log(1e-12))


def test_nll_from_logits_is_stable():
    z = np.array([[1000.0, 0.0], [0.0, 1000.0]])
    assert F.nll(z, [0, 0], from_logits=True) == pytest.approx(500.0)


def test_brier_hand_worked():
    # (0.8-1)^2 + 0.2^2 = 0.08 ; (0.3)^2 + (0.7-1)^2 = 0.18 -> mean 0.13
    assert F.brier([[0.8, 0.2], [0.3, 0.7]], [0, 1]) == pytest.approx(0.13, abs=1e-12)
    assert F.brier([[0.0, 1.0]], [0]) == pytest.approx(2.0)  # the upper bound


def test_accuracy_ties_take_lowest_index():
    assert F.accuracy([[0.5, 0.5], [0.5, 0.5]], [0, 1]) == 0.5
    conf, pred = F.top_label(np.array([[0.25, 0.25, 0.25, 0.25], [0.1, 0.45, 0.45, 0.0]]))
    np.testing.assert_array_equal(pred, [0, 1])
    np.testing.assert_allclose(conf, [0.25, 0.45])


def test_accepts_torch_and_lists():
    p, y = _probs(100, 3, 1)
    ref = F.ece(p, y)
    assert F.ece(torch.from_numpy(p), torch.from_numpy(y)) == ref
    assert F.ece(p.tolist(), y.tolist()) == ref


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(2, 6), st.integers(0, 10_000), st.sampled_from(["uniform", "quantile"]))
def test_ece_properties(n, c, seed, binning):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(c, 0.5), size=n)
    labels = rng.integers(0, c, n)
    value = F.ece(probs, labels, binning=binning)
    assert 0.0 <= value <= 1.0
    perm = rng.permutation(n)
    assert F.ece(probs[perm], labels[perm], binning=binning) == pytest.approx(value, abs=1e-12)
    assert F.ece(probs, labels, norm="l2") <= F.ece(probs, labels, norm="max") + 1e-12
