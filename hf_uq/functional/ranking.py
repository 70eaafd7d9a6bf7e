"""Threshold-free separation metrics: CP-AUROC, OOD AUROC, FPR@95 and AUPR-OOD.

All of them only need the two groups' scores sorted separately, never an ``argsort`` of the
union: the AUROC is the Mann-Whitney statistic, sum over positives of
#{negatives below} + 1/2 #{negatives tied}, read off two ``searchsorted`` calls.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ._validation import check_correct, check_same_length, check_scores


def _auroc_sorted(neg: np.ndarray, pos: np.ndarray) -> float:
    """AUROC with ties counted one half, for sorted negative and positive scores."""
    below = np.searchsorted(neg, pos, side="left").sum(dtype=np.int64)
    below_or_tied = np.searchsorted(neg, pos, side="right").sum(dtype=np.int64)
    return float((int(below) + int(below_or_tied)) / (2.0 * len(neg) * len(pos)))


def _fpr_at_tpr_sorted(neg: np.ndarray, pos: np.ndarray, tpr: float) -> float:
    # the highest threshold t (flagged: score >= t) that flags >= tpr of the positives is
    # the k-th largest positive score, k = ceil(tpr * n_pos)
    k = max(1, int(np.ceil(tpr * len(pos) - 1e-9)))
    threshold = pos[len(pos) - k]
    return float((len(neg) - np.searchsorted(neg, threshold, side="left")) / len(neg))


def _average_precision_sorted(neg: np.ndarray, pos: np.ndarray) -> float:
    # precision is only weighted where recall moves, i.e. at distinct positive scores
    first = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))
    values = pos[first]
    counts = np.diff(np.append(first, len(pos)))
    tp = len(pos) - first
    fp = len(neg) - np.searchsorted(neg, values, side="left")
    return float(np.sum(counts * (tp / (tp + fp))) / len(pos))


def _two_groups(id_scores: Any, ood_scores: Any) -> tuple[np.ndarray, np.ndarray]:
    neg = np.sort(check_scores(id_scores, "id_scores"))
    pos = np.sort(check_scores(ood_scores, "ood_scores"))
    return neg, pos


def ood_auroc(id_scores: Any, ood_scores: Any) -> float:
    """AUROC of separating OOD (positive) from in-distribution samples by a score, in [0, 1].

    Higher is better; 0.5 is chance. Scores follow "higher = more likely OOD"; ties count one
    half (equal to ``sklearn.metrics.roc_auc_score``).
    """
    neg, pos = _two_groups(id_scores, ood_scores)
    return _auroc_sorted(neg, pos)


def fpr_at_95(id_scores: Any, ood_scores: Any, tpr: float = 0.95) -> float:
    """Fraction of in-distribution samples flagged (score >= t) at the highest threshold t that
    still flags >= ``tpr`` of the OOD samples. In [0, 1], lower is better."""
    if not 0.0 < tpr <= 1.0:
        raise ValueError(f"`tpr` must be in (0, 1], got {tpr}")
    neg, pos = _two_groups(id_scores, ood_scores)
    return _fpr_at_tpr_sorted(neg, pos, tpr)


def aupr_ood(id_scores: Any, ood_scores: Any) -> float:
    """Average precision with OOD as the positive class (sklearn's step-wise definition).

    In [0, 1], higher is better; chance level is the OOD fraction.
    """
    neg, pos = _two_groups(id_scores, ood_scores)
    return _average_precision_sorted(neg, pos)


def ood_metrics(id_scores: Any, ood_scores: Any, tpr: float = 0.95) -> dict[str, float]:
    """``{"auroc", "fpr_at_95", "aupr"}`` from one sort of each group."""
    neg, pos = _two_groups(id_scores, ood_scores)
    return {
        "auroc": _auroc_sorted(neg, pos),
        "fpr_at_95": _fpr_at_tpr_sorted(neg, pos, tpr),
        "aupr": _average_precision_sorted(neg, pos),
    }


def cp_auroc(confidence: Any, correct: Any) -> float:
    """Correctness-prediction AUROC: how well ``confidence`` ranks correct above wrong samples.

    In [0, 1], higher is better, ties count one half. NaN with a warning when every sample is
    correct (or every one wrong): the ranking is then undefined, not bad input.
    """
    conf = check_scores(confidence, "confidence")
    ok = check_correct(correct)
    check_same_length(("confidence", conf), ("correct", ok))
    pos, neg = conf[ok], conf[~ok]
    if len(pos) == 0 or len(neg) == 0:
        warnings.warn(
            "cp_auroc is undefined when all samples are "
            + ("correct" if len(neg) == 0 else "wrong")
            + "; returning NaN",
            RuntimeWarning,
            stacklevel=2,
        )
        return float("nan")
    return _auroc_sorted(np.sort(neg), np.sort(pos))
