"""Bad input raises a ValueError that names the problem: one test per case, every entry point."""

import numpy as np
import pytest
import torch

from hf_uq import functional as F

GOOD_P = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
GOOD_Y = np.array([0, 1, 1])
PROB_METRICS = [F.ece, F.nll, F.brier, F.accuracy, F.calibration_bins]
SELECTIVE = [F.aurc, F.e_aurc, F.sac, F.risk_coverage_curve, F.selective_metrics]
TWO_GROUP = [F.ood_auroc, F.fpr_at_95, F.aupr_ood, F.ood_metrics]
SCORES = [F.msp, F.entropy, F.margin]


@pytest.mark.parametrize("metric", PROB_METRICS)
class TestProbabilityMetrics:
    def test_nan(self, metric):
        p = GOOD_P.copy()
        p[1, 0] = np.nan
        with pytest.raises(ValueError, match=r"non-finite value \(nan\) at index \(1, 0\)"):
            metric(p, GOOD_Y)

    def test_inf(self, metric):
        p = GOOD_P.copy()
        p[2, 1] = np.inf
        with pytest.raises(ValueError, match=r"non-finite value \(inf\)"):
            metric(p, GOOD_Y)

    def test_wrong_ndim(self, metric):
        with pytest.raises(ValueError, match=r"`probs` must have 2 dimension.*got shape \(6,\)"):
            metric(GOOD_P.reshape(-1), GOOD_Y)

    def test_rows_not_summing_to_one(self, metric):
        p = GOOD_P.copy()
        p[2] = [0.5, 0.6]
        with pytest.raises(ValueError, match="must sum to 1.*worst is row 2"):
            metric(p, GOOD_Y)

    def test_negative_probability(self, metric):
        with pytest.raises(ValueError, match="negative probability"):
            metric([[1.5, -0.5], [0.5, 0.5]], [0, 1])

    def test_label_out_of_range(self, metric):
        with pytest.raises(ValueError, match=r"label 2 at index 1, outside \[0, 2\)"):
            metric(GOOD_P, [0, 2, 1])

    def test_negative_label(self, metric):
        with pytest.raises(ValueError, match="negative label"):
            metric(GOOD_P, [0, -1, 1])

    def test_non_integer_labels(self, metric):
        with pytest.raises(ValueError, match="integer class indices"):
            metric(GOOD_P, [0.5, 1, 1])

    def test_zero_samples(self, metric):
        with pytest.raises(ValueError, match="empty"):
            metric(np.zeros((0, 2)), np.zeros(0, dtype=int))

    def test_length_mismatch(self, metric):
        with pytest.raises(ValueError, match="length mismatch.*2 entries but there are 3"):
            metric(GOOD_P, [0, 1])

    def test_single_class(self, metric):
        with pytest.raises(ValueError, match="at least 2 classes"):
            metric(np.ones((3, 1)), [0, 0, 0])


def test_ece_options_validated():
    with pytest.raises(ValueError, match="norm"):
        F.ece(GOOD_P, GOOD_Y, norm="l3")
    with pytest.raises(ValueError, match="binning"):
        F.ece(GOOD_P, GOOD_Y, binning="adaptive")
    with pytest.raises(ValueError, match="n_bins"):
        F.ece(GOOD_P, GOOD_Y, n_bins=0)


def test_logits_nan_with_from_logits():
    with pytest.raises(ValueError, match="`logits` contains a non-finite"):
        F.nll([[np.nan, 1.0]], [0], from_logits=True)


@pytest.mark.parametrize("metric", SELECTIVE)
class TestSelectiveMetrics:
    def test_nan(self, metric):
        with pytest.raises(ValueError, match="`uncertainty` contains a non-finite"):
            metric([0.1, np.nan], [True, False])

    def test_wrong_ndim(self, metric):
        with pytest.raises(ValueError, match="`uncertainty` must have 1 dimension"):
            metric([[0.1, 0.2]], [True, False])

    def test_zero_samples(self, metric):
        with pytest.raises(ValueError, match="empty"):
            metric([], [])

    def test_length_mismatch(self, metric):
        with pytest.raises(ValueError, match="length mismatch: uncertainty has 3, correct has 2"):
            metric([0.1, 0.2, 0.3], [True, False])

    def test_correct_not_boolean(self, metric):
        with pytest.raises(ValueError, match="boolean or 0/1, got 2"):
            metric([0.1, 0.2], [1, 2])


@pytest.mark.parametrize("metric", TWO_GROUP)
class TestTwoGroupMetrics:
    def test_nan(self, metric):
        with pytest.raises(ValueError, match="`ood_scores` contains a non-finite"):
            metric([0.1], [np.inf])

    def test_wrong_ndim(self, metric):
        with pytest.raises(ValueError, match="`id_scores` must have 1 dimension"):
            metric(np.zeros((2, 2)), [0.1])

    def test_zero_samples(self, metric):
        with pytest.raises(ValueError, match="`ood_scores` is empty"):
            metric([0.1, 0.2], [])

    def test_non_numeric(self, metric):
        with pytest.raises(ValueError, match="numeric"):
            metric(["a"], ["b"])


def test_cp_auroc_length_mismatch_and_nan():
    with pytest.raises(ValueError, match="length mismatch"):
        F.cp_auroc([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="`confidence` contains a non-finite"):
        F.cp_auroc([np.nan, 0.2], [True, False])


@pytest.mark.parametrize("score", SCORES)
class TestScores:
    def test_nan(self, score):
        with pytest.raises(ValueError, match="NaN or inf"):
            score(torch.tensor([[0.5, float("nan")]]))

    def test_wrong_ndim(self, score):
        with pytest.raises(ValueError, match="must have 2 dimensions"):
            score(np.array([0.5, 0.5]))

    def test_rows_not_summing_to_one(self, score):
        with pytest.raises(ValueError, match="must sum to 1.*worst is row 1"):
            score([[0.5, 0.5], [0.9, 0.9]])

    def test_single_class(self, score):
        with pytest.raises(ValueError, match="at least 2 classes"):
            score([[1.0], [1.0]])

    def test_zero_samples(self, score):
        with pytest.raises(ValueError, match="empty"):
            score(np.zeros((0, 3)))


def test_decomposition_shape_errors():
    with pytest.raises(ValueError, match=r"\(n_members, n_samples, n_classes\)"):
        F.ensemble_uncertainty(GOOD_P)
    with pytest.raises(ValueError, match="must sum to 1"):
        F.ensemble_uncertainty(np.ones((2, 3, 2)))


def test_fidelity_errors():
    with pytest.raises(ValueError, match="length mismatch"):
        F.fidelity([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2 samples"):
        F.fidelity([1], [1])
