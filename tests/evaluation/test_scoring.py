"""The batched scoring of `hf_uq.evaluation.scoring` against the per-resample loop it replaced.

`hf_uq.evaluation.scoring_reference.per_resample_score` is the former implementation (every metric recomputed on
each resample by the unweighted `hf_uq.functional` calls, one resample at a time); the batched one must give the same estimates and bounds
(1e-10), the same NaN handling and the same warnings, on data with heavy ties, several seeds of different
sizes, OOD sets, a seed without errors and every `uncertainty_field`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import hf_uq.functional as F
from hf_uq.evaluation import Predictions, score_difference, score_pooled, score_split
from hf_uq.evaluation.scoring_reference import per_resample_score
from hf_uq.functional.bootstrap import BootstrapInterval

TOL = 1e-10


# ------------------------------------------------------------------------------------------ data


def _preds(n, seed, *, labelled=True, sharp=3.0, accuracy=0.85, decimals=2, dtype=np.float32,
           all_correct=False, fields=False):
    """Fake predictions of a model; uncertainties rounded to `decimals` so that ties are plentiful."""
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(n, 8)) * sharp).astype(np.float32)
    probs = torch.from_numpy(logits).double().softmax(-1).numpy()
    if not labelled:
        labels = np.full(n, -1)
    elif all_correct:
        labels = probs.argmax(1)
    else:
        labels = np.where(rng.random(n) < accuracy, probs.argmax(1), rng.integers(0, 8, n))
    u = np.round(F.entropy(probs), decimals).astype(dtype)
    extra = {}
    if fields:
        extra = {
            "total_uncertainty": u,
            "epistemic_uncertainty": np.round(rng.random(n), decimals).astype(dtype),
            "aleatoric_uncertainty": rng.random(n).astype(dtype),  # no ties
        }
    return Predictions(logits, probs, labels.astype(np.int64), u, **extra)


def _seeds(sizes, offset=0, all_correct=(), **kwargs):
    return [_preds(n, offset + s, all_correct=s in all_correct, **kwargs) for s, n in enumerate(sizes)]


def _oods(sizes, offset, sharp, **kwargs):
    return [_preds(n, offset + s, labelled=False, sharp=sharp, **kwargs) for s, n in enumerate(sizes)]


def _cases():
    """(name, function, args, kwargs) of every scoring call compared with the reference."""
    one = _preds(300, 0)
    near, far = _preds(120, 1, labelled=False, sharp=1.0), _preds(150, 2, labelled=False, sharp=0.5)
    sizes = (250, 200, 180)
    seeds = _seeds(sizes, all_correct=(1,), decimals=2, dtype=np.float64, fields=True)
    ood = {"near": _oods((100, 90, 80), 10, 1.0, fields=True), "far": _oods((60, 70, 50), 20, 0.5, fields=True)}
    other = _seeds(sizes, offset=40, fields=True)
    other = [Predictions(b.logits, b.probs, a.labels, b.uncertainty, total_uncertainty=b.total_uncertainty,
                         epistemic_uncertainty=b.epistemic_uncertainty,
                         aleatoric_uncertainty=b.aleatoric_uncertainty) for a, b in zip(seeds, other, strict=True)]
    other_ood = {"near": _oods((100, 90, 80), 50, 1.5, fields=True), "far": _oods((60, 70, 50), 60, 0.7, fields=True)}
    tiny = _preds(12, 9, accuracy=0.8, decimals=1)  # many resamples without an error: NaN CP-AUROC
    coarse = _preds(200, 6, decimals=0)  # two or three uncertainty levels
    return [
        ("split", score_split, (one,), dict(ood={"near": near, "far": far}, bootstrap=200)),
        ("split_no_ood", score_split, (one,), dict(bootstrap=150, seed=3, n_bins=7, sac_accuracy=0.9)),
        ("split_float64_fine", score_split, (_preds(250, 7, decimals=6, dtype=np.float64),),
         dict(ood={"far": _preds(90, 8, labelled=False, sharp=0.5, decimals=6)}, bootstrap=100)),
        ("split_tiny", score_split, (tiny,), dict(bootstrap=300, confidence=0.8)),
        ("split_all_correct", score_split, (_preds(40, 9, all_correct=True),), dict(bootstrap=50)),
        ("split_coarse", score_split, (coarse,), dict(ood={"far": _preds(50, 11, labelled=False, decimals=0)},
                                                      bootstrap=100)),
        ("pooled", score_pooled, (seeds,), dict(ood=ood, bootstrap=200)),
        ("pooled_total", score_pooled, (seeds,), dict(ood=ood, bootstrap=60, uncertainty_field="total_uncertainty")),
        ("pooled_epistemic", score_pooled, (seeds,),
         dict(ood=ood, bootstrap=60, seed=7, uncertainty_field="epistemic_uncertainty")),
        ("pooled_aleatoric", score_pooled, (seeds[:2],),
         dict(ood={"far": ood["far"][:2]}, bootstrap=60, uncertainty_field="aleatoric_uncertainty")),
        ("pooled_zero", score_pooled, (seeds,), dict(ood=ood, bootstrap=0)),
        ("difference", score_difference, (seeds[0], other[0]),
         dict(ood=({"near": ood["near"][0]}, {"near": other_ood["near"][0]}), bootstrap=150)),
        ("difference_pooled", score_difference, (seeds, other), dict(ood=(ood, other_ood), bootstrap=80)),
        ("difference_epistemic", score_difference, (seeds[:2], other[:2]),
         dict(bootstrap=60, uncertainty_field="epistemic_uncertainty")),
    ]


# ------------------------------------------------------------------------------------------ tests


def _scored(function, args, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = function(*args, **kwargs)
    return result, [(w.category, str(w.message)) for w in caught]


def _assert_same(result, expected, tol):
    assert list(result) == list(expected)
    for name, interval in result.items():
        assert isinstance(interval, BootstrapInterval)
        got, want = np.array(tuple(interval)), np.array(tuple(expected[name]))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg=name)


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case[0])
def test_batched_scoring_equals_the_per_resample_loop(case):
    _, function, args, kwargs = case
    result, caught = _scored(function, args, kwargs)
    expected, expected_caught = _scored(per_resample_score, (function, *args), kwargs)
    _assert_same(result, expected, TOL)
    assert caught == expected_caught  # the same NaN-resample warnings, nothing else


# Computed by the per-resample implementation before it was replaced (same data, same seeds): pins
# `per_resample_score` itself to the former code.
_FORMER = {
    "pooled": {
        "accuracy": (0.9285185185185184, 0.9090981481481482, 0.9473351851851851),
        "nll": (0.7489325317546687, 0.6419176455896753, 0.8754735123197098),
        "brier": (0.2900016966373361, 0.2602500014047221, 0.3167224821210572),
        "ece": (0.26283135630448445, 0.24027156898621427, 0.2873738343360463),
        "aurc": (0.06731448195385543, 0.042261151863425904, 0.08958312231459714),
        "e_aurc": (0.06310933625704639, 0.03978458619581432, 0.08374074658503988),
        "sac": (0.36933333333333335, 0.35739444444444446, 0.45631666666666676),
        "cp_auroc": (0.4982659006156841, 0.4165598631933212, 0.5807553645254757),
        "near/auroc": (0.9725928703703705, 0.962678974537037, 0.9811022222222222),
        "near/fpr_at_95": (0.11492592592592593, 0.07343148148148147, 0.24948333333333336),
        "near/aupr": (0.9515278739213731, 0.9370811455958122, 0.965301911799701),
        "far/auroc": (1.0, 1.0, 1.0),
        "far/fpr_at_95": (0.0, 0.0, 0.0),
        "far/aupr": (1.0, 1.0, 1.0),
    },
    "split_tiny": {
        "accuracy": (0.9166666666666666, 0.8333333333333334, 1.0),
        "nll": (1.5596004013901086, 0.3990303383154493, 2.658450418531052),
        "brier": (0.36258222394626766, 0.187660860484407, 0.513781638656161),
        "ece": (0.3642280379615478, 0.266424876468764, 0.4620703408447452),
        "aurc": (0.17526755651755652, 0.0, 0.3088684463684465),
        "e_aurc": (0.16832311207311207, 0.0, 0.28740379990380005),
        "sac": (0.08333333333333333, 0.0, 1.0),
        "cp_auroc": (0.09090909090909091, 0.0, 0.2),
    },
    "difference": {
        "accuracy": (0.756, 0.6818, 0.8211),
        "nll": (-3.569606820685956, -3.9419322236662424, -3.143470603592064),
        "brier": (-0.9533851497319867, -1.0373544304323798, -0.8547361375494387),
        "ece": (-0.3307127190971668, -0.3777544914445654, -0.2831667768110362),
        "aurc": (-0.7915682683454957, -0.8580211386246842, -0.706165776772487),
        "e_aurc": (-0.18041988629537975, -0.244126902366195, -0.09259623418091609),
        "sac": (0.008, 0.0, 0.2415000000000001),
        "cp_auroc": (0.10437937706718087, -0.04404563398700434, 0.23981748369062483),
        "near/auroc": (0.10474000000000006, 0.06085900000000003, 0.14874099999999998),
        "near/fpr_at_95": (-0.46399999999999997, -0.7138999999999999, -0.12579999999999997),
        "near/aupr": (0.1537686064555387, 0.07923370994705936, 0.21581163415019763),
    },
}


@pytest.mark.parametrize("name", list(_FORMER))
def test_results_of_the_former_implementation(name):
    _, function, args, kwargs = next(case for case in _cases() if case[0] == name)
    former = {metric: BootstrapInterval(*values) for metric, values in _FORMER[name].items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _assert_same(per_resample_score(function, *args, **kwargs), former, 1e-14)
        _assert_same(function(*args, **kwargs), former, TOL)


def test_nan_resamples_warn_like_bootstrap_interval():
    _, function, args, kwargs = next(case for case in _cases() if case[0] == "split_tiny")
    with pytest.warns(RuntimeWarning, match="the statistic is NaN on 108 of 300 resamples"):
        result = function(*args, **kwargs)
    assert not np.isnan(result["cp_auroc"].low)
    with pytest.warns(RuntimeWarning, match="NaN on every resample"):
        assert np.isnan(score_split(_preds(40, 9, all_correct=True), bootstrap=20)["cp_auroc"].low)


def test_per_resample_score_takes_only_the_three_scorers():
    _, _, args, kwargs = next(case for case in _cases() if case[0] == "split_tiny")
    with pytest.raises(ValueError, match="`function` must be score_split, score_pooled or score_difference"):
        per_resample_score(len, *args, **kwargs)
