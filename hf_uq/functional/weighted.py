"""The metrics of DESIGN.md §3 under integer row weights, batched over bootstrap resamples.

A bootstrap resample is a multiset of the rows: row i taken w_i times. A metric on the resample is the metric on
``np.repeat(rows, w, axis=0)``, and a batch of B resamples is a (B, N) matrix of integer weights
([`resample_counts`] turns resample indices into one). Each ``weighted_*`` function takes the inputs of its
unweighted counterpart plus ``weights``: of shape (N,) it returns a float, the unweighted metric of the repeated
rows; of shape (B, N) a (B,) float64 array, one value per weighting, computed without a Python loop over B. The
classes [`WeightedCalibration`], [`WeightedSelective`] and [`WeightedOOD`] do the per-row work (validation,
per-row terms, bins, sorting) once and then evaluate any number of weightings, as a bootstrap needs.

Nothing is re-sorted per resample: a resample's order is the original order with multiplicities. The ranking
metrics group the rows by distinct score once (the tie groups, ascending), take integer cumulative sums of the
sorted rows' weights, read them at the group ends, and evaluate the tie-exact closed forms of ``selective`` and
``ranking`` on them; a group with zero weight is absent from that resample. ECE uses the fixed equal-width bin
of each row. Integer parts (counts, AUROC numerators, SAC, FPR@95) are exact, so those metrics equal the
unweighted ones bit for bit. Accuracy, NLL, Brier, ECE and AUPR use the same float operations per term and
differ only by the order of the float64 sums; AURC also sums each stretch of error-free tie groups as one
digamma difference instead of group by group (both about 1e-16 relative). Zero weights are allowed; every
weighting needs a positive total.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
from scipy.special import digamma

from ._validation import (
    check_correct,
    check_labels,
    check_logits,
    check_probs,
    check_same_length,
    check_scores,
    to_numpy,
)
from .classification import (
    _LOGITS_HINT,
    _PROB_FLOOR,
    Norm,
    _edges_for,
    _probs_and_labels,
    top_label,
)
from .selective import _oracle_aurc

__all__ = [
    "WeightedCalibration",
    "WeightedOOD",
    "WeightedSelective",
    "resample_counts",
    "weighted_accuracy",
    "weighted_brier",
    "weighted_cp_auroc",
    "weighted_ece",
    "weighted_nll",
    "weighted_ood_metrics",
    "weighted_selective_metrics",
]


# ------------------------------------------------------------------------------------------ weights


def resample_counts(indices: Any, n_samples: int) -> np.ndarray:
    """How often each row appears in each resample: (B, n_samples) int64 counts from (B, K) row indices.

    A batch of [`bootstrap_indices`] gives the weights of the same resamples; a 1-D ``indices`` is one
    resample and gives (1, n_samples).
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise ValueError(f"`n_samples` must be a positive integer, got {n_samples!r}")
    idx = to_numpy(indices, "indices")
    if idx.ndim == 1:
        idx = idx[None]
    if idx.ndim != 2 or idx.dtype.kind not in "iu":
        raise ValueError(f"`indices` must be a (B, K) integer array, got {idx.dtype} of shape {idx.shape}")
    # one pass: viewed as unsigned, a negative index is larger than any valid one
    if idx.size and idx.view(idx.dtype.str.replace("i", "u")).max() >= n_samples:
        raise ValueError(f"`indices` must lie in [0, {n_samples}), got [{idx.min()}, {idx.max()}]")
    flat = (idx + (np.arange(len(idx)) * n_samples)[:, None]).ravel()
    return np.bincount(flat, minlength=len(idx) * n_samples).reshape(len(idx), n_samples)


def _check_weights(weights: Any, n: int, name: str = "weights") -> tuple[np.ndarray, bool]:
    """(B, N) int64 weights (a 1-D weighting becomes B = 1) and whether the input was batched."""
    w = weights if type(weights) is np.ndarray else to_numpy(weights, name)
    if w.ndim not in (1, 2):
        raise ValueError(f"`{name}` must have shape (n_samples,) or (batch, n_samples), got {tuple(w.shape)}")
    if w.shape[-1] != n:
        raise ValueError(f"length mismatch: `{name}` has {w.shape[-1]} entries per weighting but there are {n} samples")
    if w.dtype != np.int64:
        integral = w.dtype.kind in "biu" or (
            w.dtype.kind == "f" and bool(np.isfinite(w).all()) and np.array_equal(w, np.round(w))
        )
        if not integral:
            raise ValueError(f"`{name}` must be integer counts (how often each row is taken), got dtype {w.dtype}")
        w = w.astype(np.int64)
    batched = w.ndim == 2
    w = w if batched else w[None]
    # one pass, row by row (fast on column slices too): viewed as unsigned, a negative weight is above 2**63
    top = w.view(np.uint64).max(axis=1)
    if (top >= 2**63).any():
        raise ValueError(f"`{name}` contains a negative weight ({w.min()})")
    if (top == 0).any():
        raise ValueError(f"weighting {int((top == 0).argmax())} of `{name}` is all zeros: at least one sample is required")
    return w, batched


def _result(values: np.ndarray, batched: bool) -> Any:
    return values if batched else float(values[0])


class _Levels:
    """The distinct values of a score, ascending (the tie groups), and the rows holding each."""

    def __init__(self, scores: np.ndarray):
        self.order = np.argsort(scores, kind="stable")
        ordered = scores[self.order]
        self.ends = np.append(np.flatnonzero(ordered[1:] != ordered[:-1]), len(ordered) - 1)
        self.values = ordered[self.ends]


def _cumulative(weights: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(B, K + 1) int64: the total weight of the first j rows listed in ``order``, j = 0..K.

    Integer cumulative sums are several times faster than float ones, and ``np.take`` keeps the rows
    contiguous (``weights[:, order]`` would not, which makes the cumulative sum strided and slow).
    """
    cumulative = np.empty((len(weights), len(order) + 1), dtype=np.int64)
    cumulative[:, 0] = 0
    cumulative[:, 1:] = np.take(weights, order, axis=1)
    np.cumsum(cumulative, axis=1, out=cumulative)
    return cumulative


# ------------------------------------------------------------------------------------------ classification


def _nll_terms(probs: Any, labels: Any, from_logits: bool) -> np.ndarray:
    """The per-row -log p_label that ``classification.nll`` averages, float64."""
    if from_logits:
        z = check_logits(probs, "logits").astype(np.float64)
        y = check_labels(labels, z.shape[1], z.shape[0])
        zmax = z.max(axis=1)
        lse = zmax + np.log(np.exp(z - zmax[:, None]).sum(axis=1))
        return lse - z[np.arange(len(y)), y]
    p = check_probs(probs, "probs", hint=_LOGITS_HINT)
    y = check_labels(labels, p.shape[1], p.shape[0])
    picked = p[np.arange(len(y)), y].astype(np.float64)
    return -np.log(np.maximum(picked, _PROB_FLOOR))


def _uniform_bins(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    """The equal-width (lo, hi] bin of each confidence, as ``classification`` assigns it (0 -> bin 0)."""
    if not isinstance(n_bins, (int, np.integer)) or isinstance(n_bins, bool) or n_bins < 1:
        raise ValueError(f"`n_bins` must be a positive integer, got {n_bins!r}")
    inner = _edges_for(confidence.dtype, np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
    return np.searchsorted(inner, confidence, side="left")


class WeightedCalibration:
    """Accuracy, NLL, Brier and ECE of one labelled split under any (batch of) integer row weights.

    The per-row terms (correctness, -log p_label, squared error, confidence and its equal-width bin) are
    computed once; a call takes ``weights`` of shape (N,) (floats) or (B, N) ((B,) arrays) and returns
    ``{"accuracy", "nll", "brier", "ece"}``; the methods give one metric each.

    Args:
        probs: (N, C) class probabilities (rows sum to 1), or logits with ``from_logits=True``.
        labels: (N,) integer labels in [0, C).
        n_bins: number of equal-width ECE bins (``binning="uniform"`` of [`ece`]; equal-mass bins move with
            every resample, so they have no fixed bin per row).
        from_logits: treat ``probs`` as logits: softmax for every metric, log-softmax for NLL.
        logits: optionally the (N, C) logits behind ``probs``: NLL then comes from their log-softmax (as
            ``nll(logits, labels, from_logits=True)``) and the other metrics from ``probs``.
    """

    def __init__(self, probs: Any, labels: Any, n_bins: int = 15, from_logits: bool = False, logits: Any = None):
        p, y = _probs_and_labels(probs, labels, from_logits)
        confidence, prediction = top_label(p)
        correct = prediction == y
        self.n_samples, self.n_bins = len(y), n_bins
        # with `logits`, check_labels in _nll_terms checks that they have one row per label
        nll = _nll_terms(probs, labels, from_logits) if logits is None else _nll_terms(logits, labels, True)
        brier = np.einsum("ij,ij->i", p, p, dtype=np.float64) - 2.0 * p[np.arange(len(y)), y] + 1.0
        # rows sorted by (ECE bin, correct): np.add.reduceat over these groups gives each weighting's counts,
        # correct counts and confidence sums per bin
        keys = 2 * _uniform_bins(confidence, n_bins) + correct
        self._order = np.argsort(keys, kind="stable")
        keys = keys[self._order]
        self._groups = np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))
        group_keys = keys[self._groups]
        self._group_correct = (group_keys % 2).astype(np.float64)[:, None]
        self._bins = np.flatnonzero(np.append(True, group_keys[1:] // 2 != group_keys[:-1] // 2))  # among groups
        self._bin_rows = self._groups[self._bins]
        self._terms = {
            name: value.astype(np.float64)[self._order][:, None]
            for name, value in (("confidence", confidence), ("nll", nll), ("brier", brier))
        }

    def _sums(self, weights: Any) -> tuple[np.ndarray, np.ndarray, bool]:
        """(N, B) float64 weights, rows in group order (contiguous along B), and the (G, B) group totals."""
        w, batched = _check_weights(weights, self.n_samples)
        wt = w.T[self._order].astype(np.float64)
        return wt, np.add.reduceat(wt, self._groups, axis=0), batched

    def _metrics(self, weights: Any, names: tuple[str, ...], norm: Norm = "l1") -> dict[str, Any]:
        if norm not in ("l1", "l2", "max"):
            raise ValueError(f"`norm` must be 'l1', 'l2' or 'max', got {norm!r}")
        wt, group_counts, batched = self._sums(weights)
        total = group_counts.sum(axis=0)
        result = {}
        for name in names:
            if name == "accuracy":
                result[name] = (group_counts * self._group_correct).sum(axis=0) / total
            elif name == "ece":
                result[name] = self._ece(wt, group_counts, norm)
            else:
                result[name] = (wt * self._terms[name]).sum(axis=0) / total
        return {name: _result(value, batched) for name, value in result.items()}

    def _ece(self, wt: np.ndarray, group_counts: np.ndarray, norm: Norm) -> np.ndarray:
        """ECE of each weighting from its per-bin sums (bins without rows are left out)."""
        counts = np.add.reduceat(group_counts, self._bins, axis=0)
        acc_sum = np.add.reduceat(group_counts * self._group_correct, self._bins, axis=0)
        conf_sum = np.add.reduceat(wt * self._terms["confidence"], self._bin_rows, axis=0)
        filled = counts > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = np.abs(acc_sum / counts - conf_sum / counts)
        weight = counts / counts.sum(axis=0)
        if norm == "l1":
            return np.where(filled, weight * gap, 0.0).sum(axis=0)
        if norm == "l2":
            return np.sqrt(np.where(filled, weight * gap**2, 0.0).sum(axis=0))
        return np.where(filled, gap, 0.0).max(axis=0)

    def accuracy(self, weights: Any) -> Any:
        """Weighted [`accuracy`]."""
        return self._metrics(weights, ("accuracy",))["accuracy"]

    def nll(self, weights: Any) -> Any:
        """Weighted [`nll`]."""
        return self._metrics(weights, ("nll",))["nll"]

    def brier(self, weights: Any) -> Any:
        """Weighted [`brier`]."""
        return self._metrics(weights, ("brier",))["brier"]

    def ece(self, weights: Any, norm: Norm = "l1") -> Any:
        """Weighted [`ece`] with ``norm`` ``"l1"``, ``"l2"`` or ``"max"``."""
        return self._metrics(weights, ("ece",), norm)["ece"]

    def __call__(self, weights: Any, norm: Norm = "l1") -> dict[str, Any]:
        return self._metrics(weights, ("accuracy", "nll", "brier", "ece"), norm)


def weighted_accuracy(probs: Any, labels: Any, weights: Any, from_logits: bool = False) -> Any:
    """[`accuracy`] of the rows taken ``weights`` times each; ``weights`` (N,) -> float, (B, N) -> (B,)."""
    return WeightedCalibration(probs, labels, from_logits=from_logits).accuracy(weights)


def weighted_nll(probs: Any, labels: Any, weights: Any, from_logits: bool = False) -> Any:
    """[`nll`] of the rows taken ``weights`` times each; ``weights`` (N,) -> float, (B, N) -> (B,)."""
    return WeightedCalibration(probs, labels, from_logits=from_logits).nll(weights)


def weighted_brier(probs: Any, labels: Any, weights: Any, from_logits: bool = False) -> Any:
    """[`brier`] of the rows taken ``weights`` times each; ``weights`` (N,) -> float, (B, N) -> (B,)."""
    return WeightedCalibration(probs, labels, from_logits=from_logits).brier(weights)


def weighted_ece(
    probs: Any,
    labels: Any,
    weights: Any,
    n_bins: int = 15,
    norm: Norm = "l1",
    from_logits: bool = False,
) -> Any:
    """[`ece`] (equal-width bins) of the rows taken ``weights`` times each; (N,) -> float, (B, N) -> (B,)."""
    return WeightedCalibration(probs, labels, n_bins=n_bins, from_logits=from_logits).ece(weights, norm=norm)


# ------------------------------------------------------------------------------------------ selective


@lru_cache(maxsize=16)
def _digamma_table(size: int) -> np.ndarray:
    """digamma(m + 1) for m = 0..size-1: the same floats as ``digamma`` of the float m + 1."""
    table = digamma(np.arange(1, size + 1, dtype=np.float64))
    table.setflags(write=False)
    return table


@lru_cache(maxsize=65536)
def _oracle(n: int, n_errors: int) -> float:
    return _oracle_aurc(n, n_errors)


@lru_cache(maxsize=16)
def _sac_threshold(accuracy: float, size: int) -> np.ndarray:
    """accuracy * k - 1e-9 * k for k = 0..size-1: ``selective._sac``'s bar for k samples, the same floats."""
    k = np.arange(size, dtype=np.float64)
    table = accuracy * k - 1e-9 * k
    table.setflags(write=False)
    return table


class _ErrorGroups(NamedTuple):
    """Counts of each weighting (B,) and at each tie group holding an error in the unweighted data (B, G_e)."""

    n: np.ndarray  # samples
    n_errors: np.ndarray  # errors
    start: np.ndarray  # samples ahead of the group
    end: np.ndarray  # samples up to and including the group
    before: np.ndarray  # errors ahead of the group
    through: np.ndarray  # errors up to and including the group


def _selective(counts: _ErrorGroups, accuracy: float) -> dict[str, np.ndarray]:
    """AURC, E-AURC and SAC of each weighting, reading only the tie groups that hold an error.

    A group holding an error gets ``selective._aurc``'s term with the same float operations (a singleton
    E_k / k, a tie group own + (before - own s / g) dH); in the stretch up to the next such group every group
    holds no error, so its terms sum to E_k * sum_j 1/j over the stretch's positions: one digamma difference.
    SAC's condition is monotone in k inside such a stretch (its error count is constant), so only the stretch
    ends and the groups holding errors can be the largest qualifying k.
    """
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"`accuracy` (the target selective accuracy) must be in [0, 1], got {accuracy}")
    n, n_errors, start, end, before, through = counts
    table = _digamma_table(int(n.max()) + 1)
    aurc = np.zeros(len(n))
    if start.shape[1]:
        # exact float64 integers: s samples and `b` errors ahead of the group, g samples and `own` errors in it
        s, k = start.astype(np.float64), end.astype(np.float64)
        b, errors = before.astype(np.float64), through.astype(np.float64)
        g, own = k - s, errors - b
        dh = table[end] - table[start]  # digamma(s + g + 1) - digamma(s + 1)
        with np.errstate(invalid="ignore", divide="ignore"):  # empty groups, dropped below
            tied = own + (b - own * s / g) * dh
            single = errors / np.maximum(k, 1.0)  # E_k / k; 0 for empty groups before the first sample
        terms = np.where(g > 1.0, tied, single * g)  # single * g: itself for a singleton, 0 for an empty group
        stretch_end = np.concatenate([start[:, 1:], n[:, None]], axis=1)
        aurc = (terms.sum(axis=1) + (errors * (table[stretch_end] - table[end])).sum(axis=1)) / n
    oracle = np.array([_oracle(a, e) for a, e in zip(n.tolist(), n_errors.tolist(), strict=True)])

    # as selective._sac: counts compared with the float bar at group ends, the largest qualifying k (0 if none)
    k_end = np.concatenate([start, end, n[:, None]], axis=1)
    errors_at_end = np.concatenate([before, through, n_errors[:, None]], axis=1)
    meets = k_end - errors_at_end >= _sac_threshold(float(accuracy), int(n.max()) + 1)[k_end]
    sac = (k_end * meets).max(axis=1) / n
    return {"aurc": aurc, "e_aurc": aurc - oracle, "sac": sac}


def _cp_auroc(counts: _ErrorGroups) -> np.ndarray:
    """AUROC of the confidence -uncertainty for correct vs wrong, from the groups holding an error.

    Sum over pairs of 2 [u_wrong > u_right] + [tie] = sum over errors of #(correct strictly below) +
    #(correct below or tied): ``ranking.cp_auroc``'s integer numerator; NaN without errors or correct samples.
    """
    _, n_errors, start, end, before, through = counts
    numerator = ((through - before) * ((start - before) + (end - through))).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return numerator / (2.0 * n_errors * (counts.n - n_errors))


def _warn_cp_auroc(result: np.ndarray, batched: bool, all_correct: bool) -> None:
    undefined = np.isnan(result)
    if not undefined.any():
        return
    if batched:
        message = (f"cp_auroc is undefined on {int(undefined.sum())} of {len(result)} weightings (all samples "
                   "correct or all wrong); returning NaN for them")
    else:
        message = f"cp_auroc is undefined when all samples are {'correct' if all_correct else 'wrong'}; returning NaN"
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class WeightedSelective:
    """AURC, E-AURC, SAC and CP-AUROC of one uncertainty score under any (batch of) integer row weights.

    The tie groups of ``uncertainty``, and which of them hold an error, are found once; a call takes
    ``weights`` of shape (N,) (floats) or (B, N) ((B,) arrays) and returns ``{"aurc", "e_aurc", "sac",
    "cp_auroc"}`` from one cumulative sum of the sorted rows' weights, CP-AUROC being the AUROC of the
    confidence ``-uncertainty`` (as [`cp_auroc`] of it: NaN, with a warning, where a weighting has only correct
    or only wrong samples). Only the groups holding an error are read, so the work per weighting beyond that
    sum grows with the number of errors, not of samples.

    Args:
        uncertainty: (N,) scores, higher = less trustworthy.
        correct: (N,) booleans, True where the prediction is right.
    """

    def __init__(self, uncertainty: Any, correct: Any):
        u = check_scores(uncertainty, "uncertainty")
        ok = check_correct(correct)
        check_same_length(("uncertainty", u), ("correct", ok))
        self.n_samples = len(u)
        levels = _Levels(u)
        self._order = levels.order
        # positions in the sorted order: of the errors, and the first and last row of each group with an error
        self._wrong = np.flatnonzero(~ok[levels.order])
        self._wrong_rows = levels.order[self._wrong]
        groups = np.unique(np.searchsorted(levels.ends, self._wrong, side="left"))
        self._first = np.append(0, levels.ends[:-1] + 1)[groups]
        self._last = levels.ends[groups]
        self._before = np.searchsorted(self._wrong, self._first, side="left")
        self._through = np.searchsorted(self._wrong, self._last, side="right")

    def _counts(self, weights: Any) -> tuple[_ErrorGroups, bool]:
        w, batched = _check_weights(weights, self.n_samples)
        samples = _cumulative(w, self._order)  # weight of the first j sorted rows
        errors = _cumulative(w, self._wrong_rows)  # weight of the first j errors (in the sorted order)
        counts = _ErrorGroups(
            samples[:, -1], errors[:, -1], np.take(samples, self._first, axis=1),
            np.take(samples, self._last + 1, axis=1), np.take(errors, self._before, axis=1),
            np.take(errors, self._through, axis=1),
        )
        return counts, batched

    def _cp(self, counts: _ErrorGroups, batched: bool) -> np.ndarray:
        result = _cp_auroc(counts)
        _warn_cp_auroc(result, batched, bool(counts.n_errors[0] == 0))
        return result

    def selective_metrics(self, weights: Any, accuracy: float = 0.98) -> dict[str, Any]:
        """Weighted [`selective_metrics`]: ``{"aurc", "e_aurc", "sac"}``."""
        counts, batched = self._counts(weights)
        return {name: _result(value, batched) for name, value in _selective(counts, accuracy).items()}

    def cp_auroc(self, weights: Any) -> Any:
        """Weighted [`cp_auroc`] of the confidence ``-uncertainty``."""
        counts, batched = self._counts(weights)
        return _result(self._cp(counts, batched), batched)

    def __call__(self, weights: Any, accuracy: float = 0.98) -> dict[str, Any]:
        counts, batched = self._counts(weights)
        result = _selective(counts, accuracy)
        result["cp_auroc"] = self._cp(counts, batched)
        return {name: _result(value, batched) for name, value in result.items()}


def weighted_selective_metrics(uncertainty: Any, correct: Any, weights: Any, accuracy: float = 0.98) -> dict[str, Any]:
    """[`selective_metrics`] (tie-exact AURC, E-AURC, SAC) of the rows taken ``weights`` times each.

    Returns ``{"aurc", "e_aurc", "sac"}``: floats for ``weights`` of shape (N,), (B,) arrays for (B, N).
    """
    return WeightedSelective(uncertainty, correct).selective_metrics(weights, accuracy)


def weighted_cp_auroc(confidence: Any, correct: Any, weights: Any) -> Any:
    """[`cp_auroc`] of the rows taken ``weights`` times each; (N,) -> float, (B, N) -> (B,).

    NaN with a warning for each weighting whose rows are all correct or all wrong.
    """
    conf = check_scores(confidence, "confidence")
    return WeightedSelective(-conf, correct).cp_auroc(weights)


# ------------------------------------------------------------------------------------------ ranking


class _OODSet:
    """One OOD set against sorted in-distribution scores: its tie groups and their positions among them."""

    def __init__(self, ordered_id: np.ndarray, ood_scores: Any, name: str):
        pos = check_scores(ood_scores, name)
        self.n = len(pos)
        self.levels = _Levels(pos)
        # positions among the sorted in-distribution scores, compared in the common dtype as ``ranking`` does
        self.below = np.searchsorted(ordered_id, self.levels.values, side="left")
        self.upto = np.searchsorted(ordered_id, self.levels.values, side="right")
        self.tied = not np.array_equal(self.below, self.upto)  # an in-distribution score equals an OOD one
        # cumulative OOD weight read ahead of and at the end of each group
        self.ends = self.levels.ends + 1
        self.ahead = np.append(0, self.ends[:-1])

    def __call__(self, neg_cum: np.ndarray, weights: Any, name: str, batched: bool, tpr: float) -> dict[str, np.ndarray]:
        w, batched_here = _check_weights(weights, self.n, name)
        if batched_here != batched or len(w) != len(neg_cum):
            raise ValueError(f"`id_weights` and `{name}` must both be 1-D, or both (B, N) with the same B")
        # contiguous (B, G) arrays (binary operations on column slices are several times slower)
        if len(self.ends) == self.n:  # distinct OOD scores: a group is a row
            ordered = np.take(w, self.levels.order, axis=1)
            pos_upto = np.cumsum(ordered, axis=1).astype(np.float64)
            pos = ordered.astype(np.float64)
            pos_below = pos_upto - pos
        else:
            pos_cum = _cumulative(w, self.levels.order).astype(np.float64)
            pos_below, pos_upto = np.take(pos_cum, self.ahead, axis=1), np.take(pos_cum, self.ends, axis=1)
            pos = pos_upto - pos_below
        neg_below = np.take(neg_cum, self.below, axis=1)
        neg_upto = np.take(neg_cum, self.upto, axis=1) if self.tied else None
        return _ood(pos, pos_below, pos_upto, neg_below, neg_upto, neg_cum[:, -1], tpr)


class WeightedOOD:
    """OOD AUROC, FPR@95 and AUPR-OOD (OOD = positive) under any (batch of) integer weights of both sides.

    The in-distribution scores are sorted once, and each OOD set's tie groups and their positions among them
    (two ``searchsorted`` calls) are found once. A call takes ``id_weights`` (N_id,) and ``ood_weights``
    (N_ood,) (floats) or (B, N_id) and (B, N_ood) (weighting b of both forming resample b; (B,) arrays) and
    returns ``{"auroc", "fpr_at_95", "aupr"}`` as [`ood_metrics`]. With several OOD sets (a mapping of names to
    scores, and of names to weights in the call) it returns one such dict per name, sharing the work on the
    in-distribution side.

    Args:
        id_scores: (N_id,) scores of the in-distribution samples (negatives).
        ood_scores: (N_ood,) scores of the OOD samples (positives), higher = more likely OOD; or a mapping of
            OOD set names to such scores.
    """

    def __init__(self, id_scores: Any, ood_scores: Any):
        neg = check_scores(id_scores, "id_scores")
        self.n_id = len(neg)
        self._order = np.argsort(neg, kind="stable")
        self._single = not isinstance(ood_scores, Mapping)
        named = {None: ood_scores} if self._single else dict(ood_scores)
        self._sets = {
            name: _OODSet(neg[self._order], scores, "ood_scores" if name is None else f"ood_scores[{name!r}]")
            for name, scores in named.items()
        }

    def __call__(self, id_weights: Any, ood_weights: Any, tpr: float = 0.95) -> dict[str, Any]:
        if not 0.0 < tpr <= 1.0:
            raise ValueError(f"`tpr` must be in (0, 1], got {tpr}")
        w, batched = _check_weights(id_weights, self.n_id, "id_weights")
        weights = {None: ood_weights} if self._single else ood_weights
        if not isinstance(weights, Mapping) or set(weights) != set(self._sets):
            raise ValueError(f"`ood_weights` must give the weights of the OOD sets {list(self._sets)}")
        neg_cum = _cumulative(w, self._order).astype(np.float64)
        results = {}
        for name, part in self._sets.items():
            label = "ood_weights" if name is None else f"ood_weights[{name!r}]"
            value = part(neg_cum, weights[name], label, batched, tpr)
            results[name] = {metric: _result(v, batched) for metric, v in value.items()}
        return results[None] if self._single else results


def _ood(
    pos: np.ndarray, pos_below: np.ndarray, pos_upto: np.ndarray, neg_below: np.ndarray, neg_upto: np.ndarray | None,
    n_neg: np.ndarray, tpr: float,
) -> dict[str, np.ndarray]:
    """AUROC, FPR@tpr and AUPR (OOD = positive) from, per distinct positive score (ascending), the (B, G)
    positive weight at it, the positive and negative weights strictly below it and at or below it
    (``neg_upto`` None: no negative is tied with a positive), and the (B,) total negative weight. Counts are
    exact float64 integers, so every value is as with integer arithmetic."""
    n_pos = pos_upto[:, -1]
    # Mann-Whitney: sum over positives of #(negatives below) + #(negatives below or tied)
    numerator = np.einsum("ij,ij->i", pos, neg_below)
    numerator = 2.0 * numerator if neg_upto is None else numerator + np.einsum("ij,ij->i", pos, neg_upto)
    auroc = numerator / (2.0 * n_neg * n_pos)
    # the threshold is the k-th largest positive, k = ceil(tpr * n_pos): the level holding the
    # (n_pos - k + 1)-th smallest one
    k = np.maximum(1.0, np.ceil(tpr * n_pos - 1e-9))
    level = np.argmax(pos_upto >= (n_pos - k + 1.0)[:, None], axis=1)
    fpr = (n_neg - neg_below[np.arange(len(level)), level]) / n_neg
    # average precision: precision tp / (tp + fp) at each distinct positive score, weighted by its positives; a
    # level without positives (weight 0) adds 0, and tp + fp = 0 only there
    flagged = np.maximum((n_pos + n_neg)[:, None] - (pos_below + neg_below), 1.0)
    aupr = np.einsum("ij,ij->i", pos, (n_pos[:, None] - pos_below) / flagged) / n_pos
    return {"auroc": auroc, "fpr_at_95": fpr, "aupr": aupr}


def weighted_ood_metrics(
    id_scores: Any, ood_scores: Any, id_weights: Any, ood_weights: Any, tpr: float = 0.95
) -> dict[str, Any]:
    """[`ood_metrics`] (AUROC, FPR@95, AUPR) of in-distribution and OOD rows taken their weights' times each.

    ``id_weights`` (N_id,) and ``ood_weights`` (N_ood,) give floats; (B, N_id) and (B, N_ood) give (B,)
    arrays, weighting b of both sides forming resample b.
    """
    return WeightedOOD(id_scores, ood_scores)(id_weights, ood_weights, tpr)
