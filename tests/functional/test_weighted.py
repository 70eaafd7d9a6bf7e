"""Weighted metrics against the unweighted ones on the explicitly repeated rows (``np.repeat(rows, w)``).

Heavy ties (rounded scores), float32 and float64, weights with zeros, batches of weightings; plus the bootstrap
pieces the batched scoring relies on (resample counts, the index stream, vectorized (B, K) statistics).
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_uq import functional as F
from hf_uq.functional import weighted as FW
from hf_uq.functional.bootstrap import bootstrap_indices, bootstrap_interval

TOL = dict(rtol=1e-12, atol=1e-14)


def _classification(n, seed, dtype=np.float64, classes=5, templates=None):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * 2.5
    if templates is not None:  # rows repeated from a few templates: heavy ties in every statistic
        logits = logits[rng.integers(0, templates, n)]
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    labels = np.where(rng.random(n) < 0.8, probs.argmax(1), rng.integers(0, classes, n))
    return logits.astype(dtype), probs.astype(dtype), labels


def _weights(n, seed, batch=None, zeros=0.4, high=4):
    rng = np.random.default_rng(seed)
    shape = (n,) if batch is None else (batch, n)
    w = rng.integers(1, high, size=shape) * (rng.random(shape) >= zeros)
    w[..., 0] = np.maximum(w[..., 0], 1)  # every weighting keeps at least one row
    return w


def _repeat(w, *arrays):
    return [np.repeat(a, w, axis=0) for a in arrays]


# ------------------------------------------------------------------------------------------ classification


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("templates", [None, 12])
@pytest.mark.parametrize("seed", range(3))
def test_calibration_equals_repeated_rows(dtype, templates, seed):
    logits, probs, labels = _classification(300, seed, dtype, templates=templates)
    batch = _weights(300, seed, batch=6)
    calibration = FW.WeightedCalibration(probs, labels, n_bins=10, logits=logits)
    batched = calibration(batch)
    for b, w in enumerate(batch):
        p, y, z = _repeat(w, probs, labels, logits)
        expected = {
            "accuracy": F.accuracy(p, y), "nll": F.nll(z, y, from_logits=True), "brier": F.brier(p, y),
            "ece": F.ece(p, y, n_bins=10),
        }
        single = calibration(w)
        for name, value in expected.items():
            np.testing.assert_allclose(batched[name][b], value, **TOL, err_msg=name)
            np.testing.assert_allclose(single[name], value, **TOL, err_msg=name)
            assert isinstance(single[name], float)
        np.testing.assert_allclose(FW.weighted_accuracy(probs, labels, w), expected["accuracy"], **TOL)
        np.testing.assert_allclose(FW.weighted_nll(probs, labels, w), F.nll(p, y), **TOL)
        np.testing.assert_allclose(FW.weighted_nll(logits, labels, w, from_logits=True), expected["nll"], **TOL)
        np.testing.assert_allclose(FW.weighted_brier(probs, labels, w), expected["brier"], **TOL)
        np.testing.assert_allclose(FW.weighted_brier(logits, labels, w, from_logits=True),
                                   F.brier(z, y, from_logits=True), **TOL)
        for norm in ("l1", "l2", "max"):
            np.testing.assert_allclose(FW.weighted_ece(probs, labels, w, n_bins=10, norm=norm),
                                       F.ece(p, y, n_bins=10, norm=norm), **TOL, err_msg=norm)
        np.testing.assert_allclose(FW.weighted_ece(logits, labels, w, from_logits=True),
                                   F.ece(z, y, from_logits=True), **TOL)
    # the methods agree with the call
    for name in ("accuracy", "nll", "brier", "ece"):
        np.testing.assert_array_equal(getattr(calibration, name)(batch), batched[name])


def test_ece_bins_on_edges_and_many_rows():
    # confidences exactly on bin edges (0.5, 0.75, 1.0) must fall in the bins on their left, as in `ece`
    probs = np.array([[0.5, 0.5], [0.75, 0.25], [1.0, 0.0], [0.6, 0.4], [0.2, 0.8]], dtype=np.float32)
    labels = np.array([0, 1, 0, 0, 1])
    for w in ([1, 2, 3, 0, 1], [0, 0, 1, 4, 0], [5, 1, 1, 1, 1]):
        p, y = _repeat(np.array(w), probs, labels)
        for n_bins in (2, 4, 15):
            assert FW.weighted_ece(probs, labels, w, n_bins=n_bins) == pytest.approx(F.ece(p, y, n_bins=n_bins),
                                                                                   rel=1e-12, abs=1e-15)
    # more than 65536 repeated rows: `ece` bins them with its search-free path, which must agree
    _, probs, labels = _classification(4000, 7, np.float32, classes=4, templates=500)
    w = np.random.default_rng(7).poisson(20, 4000)
    p, y = _repeat(w, probs, labels)
    assert len(y) > 65536
    np.testing.assert_allclose(FW.weighted_ece(probs, labels, w), F.ece(p, y), **TOL)


# ------------------------------------------------------------------------------------------ selective


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("decimals", [1, 2, None])
@pytest.mark.parametrize("seed", range(3))
def test_selective_and_cp_auroc_equal_repeated_rows(dtype, decimals, seed):
    rng = np.random.default_rng(seed)
    n = 250
    u = rng.random(n)
    u = (u if decimals is None else np.round(u, decimals)).astype(dtype)
    correct = rng.random(n) > 0.3 * u  # errors mostly at high uncertainty, some anywhere
    batch = _weights(n, 10 + seed, batch=8)
    scorer = FW.WeightedSelective(u, correct)
    result = scorer(batch, accuracy=0.9)
    for b, w in enumerate(batch):
        ur, cr = _repeat(w, u, correct)
        expected = F.selective_metrics(ur, cr, accuracy=0.9) | {"cp_auroc": F.cp_auroc(-ur, cr)}
        for name, value in expected.items():
            np.testing.assert_allclose(result[name][b], value, **TOL, err_msg=name)
        single = FW.weighted_selective_metrics(u, correct, w, accuracy=0.9)
        assert single == pytest.approx({k: expected[k] for k in single}, rel=1e-12, abs=1e-14)
        # SAC and CP-AUROC are integer counts and exact ratios: bit for bit
        assert single["sac"] == expected["sac"]
        assert FW.weighted_cp_auroc(-u, correct, w) == expected["cp_auroc"]
    np.testing.assert_array_equal(scorer.cp_auroc(batch), result["cp_auroc"])
    np.testing.assert_array_equal(scorer.selective_metrics(batch, accuracy=0.9)["sac"], result["sac"])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.integers(0, 3)), min_size=1, max_size=25),
    st.sampled_from([0.0, 0.5, 0.8, 0.98, 1.0]),
)
def test_selective_property_small_cases(rows, accuracy):
    u = np.array([r[0] for r in rows], dtype=np.float64) / 4
    correct = np.array([r[1] for r in rows])
    w = np.array([r[2] for r in rows])
    if w.sum() == 0:
        w[0] = 1
    ur, cr = _repeat(w, u, correct)
    got = FW.weighted_selective_metrics(u, correct, w, accuracy=accuracy)
    expected = F.selective_metrics(ur, cr, accuracy=accuracy)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-14)
    assert got["sac"] == expected["sac"]


def test_selective_edge_cases():
    u = np.array([0.1, 0.2, 0.2, 0.3])
    # every sample correct: AURC 0, SAC 1, CP-AUROC undefined (NaN and a warning)
    with pytest.warns(RuntimeWarning, match="all samples are correct"):
        result = FW.WeightedSelective(u, np.ones(4, bool))([1, 2, 0, 1])
    assert (result["aurc"], result["e_aurc"], result["sac"]) == (0.0, 0.0, 1.0)
    assert np.isnan(result["cp_auroc"])
    # every sample wrong
    wrong = np.zeros(4, bool)
    ur, cr = _repeat(np.array([2, 1, 1, 0]), u, wrong)
    assert FW.weighted_selective_metrics(u, wrong, [2, 1, 1, 0]) == pytest.approx(F.selective_metrics(ur, cr))
    assert FW.weighted_selective_metrics(u, wrong, [2, 1, 1, 0])["sac"] == 0.0
    # the only error is drawn 0 times in one weighting: NaN there only, one warning naming the count
    correct = np.array([True, True, False, True])
    with pytest.warns(RuntimeWarning, match="cp_auroc is undefined on 1 of 2 weightings"):
        values = FW.weighted_cp_auroc(-u, correct, [[1, 1, 0, 1], [1, 0, 1, 1]])
    assert np.isnan(values[0]) and values[1] == F.cp_auroc(-u[[0, 2, 3]], correct[[0, 2, 3]])
    with pytest.warns(RuntimeWarning, match="all samples are correct"):
        assert np.isnan(FW.weighted_cp_auroc(-u, correct, [1, 1, 0, 1]))
    with pytest.warns(RuntimeWarning, match="all samples are wrong"):
        assert np.isnan(FW.weighted_cp_auroc(-u, correct, [0, 0, 3, 0]))


# ------------------------------------------------------------------------------------------ OOD


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.float64, np.float64), (np.float32, np.float64)])
@pytest.mark.parametrize("levels", [3, 20, None])
@pytest.mark.parametrize("seed", range(3))
def test_ood_equals_repeated_rows(dtypes, levels, seed):
    rng = np.random.default_rng(seed)
    neg, pos = rng.random(200), rng.random(150) * 0.8 + 0.3
    if levels is not None:  # ties inside each set and across them
        neg, pos = np.round(neg * levels) / levels, np.round(pos * levels) / levels
    neg, pos = neg.astype(dtypes[0]), pos.astype(dtypes[1])
    w_neg, w_pos = _weights(200, seed, batch=7), _weights(150, 50 + seed, batch=7, zeros=0.6)
    result = FW.WeightedOOD(neg, pos)(w_neg, w_pos)
    for b in range(7):
        expected = F.ood_metrics(np.repeat(neg, w_neg[b]), np.repeat(pos, w_pos[b]))
        single = FW.weighted_ood_metrics(neg, pos, w_neg[b], w_pos[b])
        for name, value in expected.items():
            np.testing.assert_allclose(result[name][b], value, **TOL, err_msg=name)
        assert single == pytest.approx(expected, rel=1e-12, abs=1e-14)
        assert (single["auroc"], single["fpr_at_95"]) == (expected["auroc"], expected["fpr_at_95"])  # exact


def test_ood_several_sets_share_the_in_distribution_side():
    rng = np.random.default_rng(3)
    neg = np.round(rng.random(120), 2)
    sets = {"near": np.round(rng.random(80), 2), "far": rng.random(60) + 0.5}
    w_neg = _weights(120, 1, batch=5)
    w_sets = {"near": _weights(80, 2, batch=5), "far": _weights(60, 3, batch=5)}
    both = FW.WeightedOOD(neg, sets)(w_neg, w_sets)
    assert list(both) == ["near", "far"]
    for name, scores in sets.items():
        alone = FW.WeightedOOD(neg, scores)(w_neg, w_sets[name])
        for metric, value in alone.items():
            np.testing.assert_array_equal(both[name][metric], value)
        one = FW.WeightedOOD(neg, {name: scores})(w_neg[0], {name: w_sets[name][0]})
        assert one[name]["auroc"] == alone["auroc"][0]


def test_tpr_and_hand_worked():
    # as ranking.test_hand_worked, with the rows given once each or as weights
    neg, pos = np.array([0.4, 0.1]), np.array([0.8, 0.4])
    assert FW.weighted_ood_metrics(neg, pos, [1, 1], [1, 1]) == pytest.approx(
        {"auroc": 3.5 / 4, "fpr_at_95": 0.5, "aupr": 0.5 + 1 / 3})
    # OOD 0.8 twice, 0.4 once: 95% of 3 -> all three flagged -> threshold 0.4
    got = FW.weighted_ood_metrics(neg, pos, [1, 1], [2, 1], tpr=0.6)
    assert got == pytest.approx(F.ood_metrics(neg, [0.8, 0.8, 0.4], tpr=0.6))


# ------------------------------------------------------------------------------------------ validation


def test_bad_weights():
    u, ok = np.array([0.1, 0.2, 0.3]), np.array([True, False, True])
    with pytest.raises(ValueError, match="negative weight"):
        FW.weighted_selective_metrics(u, ok, [1, -1, 1])
    with pytest.raises(ValueError, match="weighting 1 of `weights` is all zeros"):
        FW.weighted_selective_metrics(u, ok, [[1, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="length mismatch"):
        FW.weighted_selective_metrics(u, ok, [1, 1])
    with pytest.raises(ValueError, match="integer counts"):
        FW.weighted_selective_metrics(u, ok, [1.5, 1, 1])
    with pytest.raises(ValueError, match="shape"):
        FW.weighted_selective_metrics(u, ok, np.ones((1, 1, 3), int))
    assert FW.weighted_selective_metrics(u, ok, [1.0, 2.0, 0.0]) == FW.weighted_selective_metrics(u, ok, [1, 2, 0])
    with pytest.raises(ValueError, match="both be 1-D, or both"):
        FW.weighted_ood_metrics(u, u, [1, 1, 1], [[1, 1, 1]])
    with pytest.raises(ValueError, match="the same B"):
        FW.weighted_ood_metrics(u, u, [[1, 1, 1]], [[1, 1, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match="OOD sets"):
        FW.WeightedOOD(u, {"far": u})([1, 1, 1], {"near": [1, 1, 1]})
    with pytest.raises(ValueError, match="tpr"):
        FW.weighted_ood_metrics(u, u, [1, 1, 1], [1, 1, 1], tpr=0.0)
    with pytest.raises(ValueError, match="accuracy"):
        FW.weighted_selective_metrics(u, ok, [1, 1, 1], accuracy=1.5)
    probs, labels = np.array([[0.7, 0.3], [0.2, 0.8]]), np.array([0, 0])
    with pytest.raises(ValueError, match="norm"):
        FW.weighted_ece(probs, labels, [1, 1], norm="l3")
    with pytest.raises(ValueError, match="n_bins"):
        FW.weighted_ece(probs, labels, [1, 1], n_bins=0)
    with pytest.raises(ValueError, match="rows of `probs` must sum to 1"):
        FW.weighted_accuracy(np.array([[0.7, 0.7], [0.2, 0.8]]), labels, [1, 1])
    with pytest.raises(ValueError, match="length mismatch: `labels` has 2 entries but there are 3"):
        FW.WeightedCalibration(probs, labels, logits=np.zeros((3, 2)))


# ------------------------------------------------------------------------------------------ bootstrap pieces


def test_resample_counts_match_the_indices():
    groups = np.repeat([0, 1, 2], [30, 20, 25])
    for idx in bootstrap_indices(75, 100, seed=4, groups=groups):
        counts = FW.resample_counts(idx, 75)
        assert counts.shape == (len(idx), 75) and counts.dtype == np.int64
        for row, c in zip(idx, counts, strict=True):
            np.testing.assert_array_equal(c, np.bincount(row, minlength=75))
        # each stratum keeps its size
        np.testing.assert_array_equal(counts[:, :30].sum(1), 30)
    np.testing.assert_array_equal(FW.resample_counts([2, 2, 0], 3), [[1, 0, 2]])
    with pytest.raises(ValueError, match="must lie in"):
        FW.resample_counts([[0, 3]], 3)


def _old_bootstrap_indices(n, n_resamples, seed, groups):
    """The index stream before the contiguous-block shortcut: a gather per group."""
    _, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    parts = np.split(order, np.cumsum(np.bincount(inverse))[:-1])
    rngs = [np.random.default_rng([seed, j]) for j in range(len(parts))]
    out, done = [], 0
    while done < n_resamples:
        batch = min(64, n_resamples - done)
        idx = np.empty((batch, n), dtype=np.intp)
        for positions, rng in zip(parts, rngs, strict=True):
            idx[:, positions] = positions[rng.integers(0, len(positions), size=(batch, len(positions)))]
        out.append(idx)
        done += batch
    return np.concatenate(out)


@pytest.mark.parametrize("groups", [np.repeat([0, 1, 2], [5, 9, 4]), np.arange(18) % 3, np.zeros(18, int)])
def test_bootstrap_index_stream_unchanged(groups):
    new = list(bootstrap_indices(18, 150, seed=2, groups=groups))
    assert [len(b) for b in new] == [64, 64, 22]
    np.testing.assert_array_equal(np.concatenate(new), _old_bootstrap_indices(18, 150, 2, groups))


def test_vectorized_statistic_with_several_values():
    x = np.random.default_rng(0).normal(size=40)

    def both(a):
        return np.array([a.mean(), a.std()])

    def both_vectorized(a):
        return np.stack([a.mean(-1), a.std(-1)], axis=-1)

    looped = bootstrap_interval(both, x, n_resamples=130, seed=1)
    vectorized = bootstrap_interval(both_vectorized, x, n_resamples=130, seed=1, vectorized=True)
    for a, b in zip(looped, vectorized, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    # row positions as the data (a statistic indexing its own arrays) are handed over without a copy
    by_position = bootstrap_interval(lambda r: both_vectorized(x[r]), np.arange(40), n_resamples=130, seed=1,
                                     vectorized=True)
    looped_positions = bootstrap_interval(lambda r: both(x[r]), np.arange(40), n_resamples=130, seed=1)
    for a, b, c in zip(vectorized, by_position, looped_positions, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-12)
    with pytest.raises(ValueError, match=r"\(B,\) or \(B, K\)"):
        bootstrap_interval(lambda a: a[..., None, None], x, n_resamples=5, vectorized=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bootstrap_interval(both_vectorized, x, n_resamples=0, vectorized=True)
