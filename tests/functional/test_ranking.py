"""CP-AUROC, OOD AUROC, FPR@95 and AUPR against sklearn, with heavy ties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from hf_uq import functional as F


def _sklearn_fpr95(neg, pos):
    y = np.r_[np.zeros(len(neg)), np.ones(len(pos))]
    fpr, tpr, _ = roc_curve(y, np.r_[neg, pos], drop_intermediate=False)
    return fpr[np.argmax(tpr >= 0.95)]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("levels", [3, 20, 10_000])
def test_against_sklearn_with_ties(seed, levels):
    rng = np.random.default_rng(seed)
    neg = rng.integers(0, levels, 700) / levels
    pos = rng.integers(0, levels, 400) / levels + 0.1
    y = np.r_[np.zeros(700), np.ones(400)]
    s = np.r_[neg, pos]
    assert F.ood_auroc(neg, pos) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert F.aupr_ood(neg, pos) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert F.fpr_at_95(neg, pos) == pytest.approx(_sklearn_fpr95(neg, pos), abs=1e-12)
    bundle = F.ood_metrics(neg, pos)
    assert bundle["auroc"] == F.ood_auroc(neg, pos)
    assert bundle["aupr"] == F.aupr_ood(neg, pos)
    assert bundle["fpr_at_95"] == F.fpr_at_95(neg, pos)


@pytest.mark.parametrize("seed", range(3))
def test_cp_auroc_against_sklearn(seed):
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(2000), 2)  # ties
    correct = rng.random(2000) < conf
    assert F.cp_auroc(conf, correct) == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


def test_hand_worked():
    # pos {0.8, 0.4}, neg {0.4, 0.1}: pairs (0.8>0.4) 1, (0.8>0.1) 1, (0.4=0.4) 1/2, (0.4>0.1) 1
    assert F.ood_auroc([0.4, 0.1], [0.8, 0.4]) == pytest.approx(3.5 / 4)
    # 95% of 2 OOD -> both flagged -> threshold 0.4 flags ID 0.4 -> FPR 1/2
    assert F.fpr_at_95([0.4, 0.1], [0.8, 0.4]) == 0.5
    # thresholds .8: P=1/1 R=1/2 ; .4: P=2/3 R=1 -> AP = .5*1 + .5*2/3
    assert F.aupr_ood([0.4, 0.1], [0.8, 0.4]) == pytest.approx(0.5 + 1 / 3)
    assert F.cp_auroc([0.9, 0.6, 0.7], [True, False, True]) == 1.0


def test_perfect_and_reversed_separation():
    assert F.ood_auroc([0, 1, 2], [3, 4]) == 1.0
    assert F.ood_auroc([3, 4], [0, 1, 2]) == 0.0
    assert F.fpr_at_95([0, 1, 2], [3, 4]) == 0.0
    assert F.aupr_ood([0, 1, 2], [3, 4]) == 1.0


def test_cp_auroc_single_class_is_nan_with_warning():
    with pytest.warns(RuntimeWarning, match="all samples are correct"):
        assert np.isnan(F.cp_auroc([0.9, 0.8], [True, True]))
    with pytest.warns(RuntimeWarning, match="all samples are wrong"):
        assert np.isnan(F.cp_auroc([0.9, 0.8], [False, False]))


def test_fpr_tpr_argument_validated():
    with pytest.raises(ValueError, match="tpr"):
        F.fpr_at_95([0.1], [0.2], tpr=0)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(-5, 5), min_size=1, max_size=40),
    st.lists(st.integers(-5, 5), min_size=1, max_size=40),
    st.integers(0, 100),
)
def test_properties(neg, pos, shift):
    neg, pos = np.array(neg, float), np.array(pos, float)
    auc = F.ood_auroc(neg, pos)
    assert 0 <= auc <= 1
    assert F.ood_auroc(pos, neg) == pytest.approx(1 - auc, abs=1e-12)  # swapping roles
    # perfect separation gives 1
    assert F.ood_auroc(neg, pos + neg.max() - pos.min() + 1 + shift) == 1.0
    rng = np.random.default_rng(shift)
    assert F.ood_auroc(rng.permutation(neg), rng.permutation(pos)) == auc
    assert 0 <= F.fpr_at_95(neg, pos) <= 1
    assert 0 < F.aupr_ood(neg, pos) <= 1
