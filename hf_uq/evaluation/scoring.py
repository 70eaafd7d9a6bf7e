"""Score [`Predictions`] with every metric of DESIGN.md §3, each with a bootstrap 95% interval.

- [`score_split`]: one model on one in-distribution split (plus OOD splits): accuracy, NLL, Brier, ECE, AURC,
  E-AURC, SAC@98 and CP-AUROC, and per OOD set AUROC, FPR@95 and AUPR.
- [`score_pooled`]: the same for several training seeds pooled: each metric is the mean over seeds of the
  per-seed value, and its interval comes from a bootstrap that resamples each seed's rows (and each seed's OOD
  rows) separately, so the interval reflects test-sample noise of every seed without mixing their models.
- [`score_difference`]: a paired comparison of two models on the same rows (e.g. a duo and its large member):
  the interval of `metric(a) - metric(b)` from one shared set of resamples.

The ranking metrics (AURC, E-AURC, SAC, CP-AUROC, and the OOD metrics) all judge the model's own
`uncertainty` score (CP-AUROC uses `-uncertainty` as the confidence); for a plain classifier that score is
`1 - max p`, so CP-AUROC is the usual AUROC of the maximum probability. `uncertainty_field=` scores another field
of the predictions instead (e.g. `"epistemic_uncertainty"`). Every number is computed by
`hf_uq.functional`; this module only resamples and aggregates. A resample is a multiset of the rows, so each
batch of resamples is evaluated at once as one matrix of row counts by the weighted forms of the metrics
(`hf_uq.functional.weighted`), giving the same values as recomputing every metric on every resample.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..functional import weighted as FW
from ..functional.bootstrap import BootstrapInterval, bootstrap_interval
from ._budget_common import _num_threads
from .predict import Predictions

__all__ = [
    "HIGHER_IS_BETTER",
    "ID_METRICS",
    "OOD_METRICS",
    "format_interval",
    "format_si",
    "score_difference",
    "score_pooled",
    "score_split",
]

#: In-distribution metrics, in the order of the returned dicts. `aurc` and `e_aurc` are fractions (tables
#: usually print them x100); `sac` is the coverage at the `sac_accuracy` target.
ID_METRICS: tuple[str, ...] = ("accuracy", "nll", "brier", "ece", "aurc", "e_aurc", "sac", "cp_auroc")
#: Metrics per OOD set, reported as `"<ood name>/<metric>"`.
OOD_METRICS: tuple[str, ...] = ("auroc", "fpr_at_95", "aupr")
#: Whether a larger value is better, per metric (OOD metrics by their suffix).
HIGHER_IS_BETTER: dict[str, bool] = {
    "accuracy": True, "nll": False, "brier": False, "ece": False, "aurc": False, "e_aurc": False,
    "sac": True, "cp_auroc": True, "auroc": True, "fpr_at_95": False, "aupr": True,
}


# ------------------------------------------------------------------------------------------ validation


def _check_predictions(value: Any, name: str, *, labelled: bool) -> Predictions:
    if not isinstance(value, Predictions):
        raise ValueError(f"`{name}` must be a Predictions (from `predict`), got {type(value).__name__}")
    if len(value) == 0:
        raise ValueError(f"`{name}` is empty (0 samples)")
    if labelled and not value.has_labels:
        missing = int((value.labels < 0).sum())
        raise ValueError(
            f"`{name}` has {missing} of {len(value)} samples without a label (negative labels): score an "
            "in-distribution split, and pass OOD splits through `ood=`"
        )
    if labelled and int(value.labels.max()) >= value.num_classes:
        raise ValueError(
            f"`{name}` has label {int(value.labels.max())}, outside [0, {value.num_classes}) for its "
            f"{value.num_classes} classes"
        )
    return value


def _as_groups(value: Any, name: str) -> list[Any]:
    if isinstance(value, Predictions):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(
            f"`{name}` must be a Predictions or a sequence of them (one per seed), got {type(value).__name__}"
        )
    if not value:
        raise ValueError(f"`{name}` is empty: pass one Predictions per seed")
    return list(value)


def _check_inputs(
    pred_id: Any, ood: Mapping[str, Any] | None, pooled: bool
) -> tuple[list[Predictions], dict[str, list[Predictions]]]:
    if pooled:
        groups = _as_groups(pred_id, "pred_id")
        groups = [_check_predictions(p, f"pred_id[{k}]", labelled=True) for k, p in enumerate(groups)]
    else:
        groups = [_check_predictions(pred_id, "pred_id", labelled=True)]
    if len({p.num_classes for p in groups}) > 1:
        raise ValueError(f"the seeds' predictions have different numbers of classes: {[p.num_classes for p in groups]}")
    ood = {} if ood is None else ood
    if not isinstance(ood, Mapping):
        raise ValueError(f"`ood` must be a mapping of OOD split names to predictions, got {type(ood).__name__}")
    checked: dict[str, list[Predictions]] = {}
    for name, value in ood.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"OOD split names must be non-empty strings without '/', got {name!r}")
        parts = _as_groups(value, f"ood[{name!r}]") if pooled else [value]
        if len(parts) != len(groups):
            raise ValueError(
                f"`ood[{name!r}]` has predictions of {len(parts)} seeds but `pred_id` has {len(groups)}"
            )
        label = (lambda k, n=name: f"ood[{n!r}][{k}]") if pooled else (lambda k, n=name: f"ood[{n!r}]")
        checked[name] = [_check_predictions(p, label(k), labelled=False) for k, p in enumerate(parts)]
    return groups, checked


_FIELDS = ("uncertainty", "total_uncertainty", "aleatoric_uncertainty", "epistemic_uncertainty")


def _field(predictions: Predictions, field: str) -> np.ndarray:
    if field not in _FIELDS:
        raise ValueError(f"`uncertainty_field` must be one of {_FIELDS}, got {field!r}")
    value = getattr(predictions, field)
    if value is None:
        raise ValueError(f"`uncertainty_field={field!r}`: these predictions have no {field} (the model gives none)")
    return value


# ------------------------------------------------------------------------------------------ resampling


class _Layout:
    """Every seed's in-distribution rows and OOD rows laid end to end; each block is one bootstrap stratum."""

    def __init__(self, groups: list[Predictions], ood: dict[str, list[Predictions]]):
        self.blocks: list[tuple[int, int]] = []
        self.id_blocks = [self._add(len(p)) for p in groups]
        self.ood_blocks = {name: [self._add(len(p)) for p in parts] for name, parts in ood.items()}
        self.size = self.blocks[-1][1]
        self.strata = np.repeat(np.arange(len(self.blocks)), [b - a for a, b in self.blocks])

    def _add(self, length: int) -> tuple[int, int]:
        start = self.blocks[-1][1] if self.blocks else 0
        self.blocks.append((start, start + length))
        return self.blocks[-1]


def _metric_function(
    layout: _Layout, groups: list[Predictions], ood: dict[str, list[Predictions]],
    n_bins: int, sac_accuracy: float, field: str,
) -> Callable[[np.ndarray], np.ndarray]:
    """Maps the row counts of a batch of resamples, (B, size), to the seed-averaged metrics (B, K).

    A resample of a stratum is a multiset of its rows, so every metric is its weighted version
    (`hf_uq.functional.weighted`) under the resample's row counts, for the whole batch at once; per-row terms
    and the sorting by uncertainty are done once here.
    """
    # whether a row is classified correctly, its terms and its rank do not change when it is resampled
    seeds = []
    for k, p in enumerate(groups):
        u = _field(p, field)
        seeds.append((
            FW.WeightedCalibration(p.probs, p.labels, n_bins=n_bins, logits=p.logits),  # NLL from the logits
            FW.WeightedSelective(u, p.correct),
            FW.WeightedOOD(u, {name: _field(parts[k], field) for name, parts in ood.items()}),
        ))

    def metrics(counts: np.ndarray) -> np.ndarray:
        def block(bounds: tuple[int, int]) -> np.ndarray:
            return counts[:, bounds[0] : bounds[1]]

        per_seed = []
        for k, (calibration, selective, ood_sets) in enumerate(seeds):
            w = block(layout.id_blocks[k])
            result = calibration(w) | selective(w, accuracy=sac_accuracy)
            values = [result[name] for name in ID_METRICS]
            if ood:
                results = ood_sets(w, {name: block(layout.ood_blocks[name][k]) for name in ood})
                values += [results[name][metric] for name in ood for metric in OOD_METRICS]
            per_seed.append(np.stack(values, axis=1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a seed with an undefined metric is skipped
            return np.nanmean(np.stack(per_seed, axis=1), axis=1)

    return metrics


def _names(ood: Mapping[str, Any]) -> list[str]:
    return list(ID_METRICS) + [f"{name}/{metric}" for name in ood for metric in OOD_METRICS]


def _run(
    metrics: Callable[[np.ndarray], np.ndarray], layout: _Layout, names: list[str],
    bootstrap: int, confidence: float, seed: int,
) -> dict[str, BootstrapInterval]:
    def statistic(rows: np.ndarray) -> np.ndarray:
        # a batch of resample indices (each row stays in its stratum) -> row counts, whose blocks are the strata
        return metrics(FW.resample_counts(rows, layout.size))

    # torch's intra-op thread pool (the row max of large inputs) only adds overhead here, and on a busy
    # machine a 2-thread row max costs milliseconds instead of microseconds
    with _num_threads(1), warnings.catch_warnings():
        # a resample with no error (or no correct sample) has no CP-AUROC; bootstrap_interval drops it
        warnings.filterwarnings("ignore", message="cp_auroc is undefined")
        result = bootstrap_interval(
            statistic, np.arange(layout.size), n_resamples=bootstrap, confidence=confidence,
            seed=seed, groups=layout.strata, vectorized=True,
        )
    return {
        name: BootstrapInterval(float(result.estimate[j]), float(result.low[j]), float(result.high[j]))
        for j, name in enumerate(names)
    }


def _score(pred_id, ood, pooled, bootstrap, confidence, seed, n_bins, sac_accuracy, field):
    groups, checked = _check_inputs(pred_id, ood, pooled)
    layout = _Layout(groups, checked)
    metrics = _metric_function(layout, groups, checked, n_bins, sac_accuracy, field)
    return _run(metrics, layout, _names(checked), bootstrap, confidence, seed)


# ------------------------------------------------------------------------------------------ public API


def score_split(
    pred_id: Predictions,
    *,
    ood: Mapping[str, Predictions] | None = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    n_bins: int = 15,
    sac_accuracy: float = 0.98,
    uncertainty_field: str = "uncertainty",
) -> dict[str, BootstrapInterval]:
    """Every metric of one model on one in-distribution split, with percentile bootstrap intervals.

    In-distribution rows and the rows of each OOD set are resampled separately (each keeps its size); the OOD
    metrics of a resample use the same resampled in-distribution rows as its in-distribution metrics, and the
    in-distribution intervals do not depend on which OOD sets are passed.

    Args:
        pred_id ([`Predictions`]):
            Predictions on a labelled in-distribution split (clean test, or covariate-shifted).
        ood (`Mapping[str, Predictions]`, *optional*):
            Predictions of the same model on OOD splits, e.g. `{"ood_near": ..., "ood_far": ...}`; the model's
            `uncertainty` is the OOD score (OOD = positive).
        bootstrap (`int`, *optional*, defaults to 1000):
            Number of bootstrap resamples; 0 gives point estimates with NaN bounds.
        confidence (`float`, *optional*, defaults to 0.95):
            Coverage of the intervals.
        seed (`int`, *optional*, defaults to 0):
            Seed of the resampling.
        n_bins (`int`, *optional*, defaults to 15):
            ECE bins (equal width).
        sac_accuracy (`float`, *optional*, defaults to 0.98):
            Target selective accuracy of SAC.
        uncertainty_field (`str`, *optional*, defaults to `"uncertainty"`):
            The [`Predictions`] field the ranking and OOD metrics judge: `"uncertainty"` (the model's default
            score), `"total_uncertainty"`, `"aleatoric_uncertainty"` or `"epistemic_uncertainty"`.

    Returns:
        `dict[str, BootstrapInterval]`: keys [`ID_METRICS`] then `"<ood name>/<metric>"` for each OOD set and
        each of [`OOD_METRICS`]; values `(estimate, low, high)`.
    """
    return _score(pred_id, ood, False, bootstrap, confidence, seed, n_bins, sac_accuracy, uncertainty_field)


def score_pooled(
    pred_id: Sequence[Predictions],
    *,
    ood: Mapping[str, Sequence[Predictions]] | None = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    n_bins: int = 15,
    sac_accuracy: float = 0.98,
    uncertainty_field: str = "uncertainty",
) -> dict[str, BootstrapInterval]:
    """[`score_split`] pooled over seeds: the mean over seeds of every metric, with a seed-stratified interval.

    Each seed's model is scored on its own rows (ranking metrics never compare one seed's uncertainty with
    another's), then the metrics are averaged over seeds (seeds where a metric is undefined, e.g. CP-AUROC
    without errors, are skipped). The bootstrap resamples every seed's in-distribution rows and every seed's
    OOD rows separately, so the interval is that of the seed average given the trained models: it shrinks with
    more seeds like a pooled sample would, but does not include training-seed variance.

    Args:
        pred_id (`Sequence[Predictions]`):
            One [`Predictions`] per seed, each on a labelled in-distribution split.
        ood (`Mapping[str, Sequence[Predictions]]`, *optional*):
            Per OOD split, one [`Predictions`] per seed, in the same seed order.
        bootstrap, confidence, seed, n_bins, sac_accuracy, uncertainty_field:
            As in [`score_split`].

    Returns:
        `dict[str, BootstrapInterval]` with the keys of [`score_split`].
    """
    return _score(pred_id, ood, True, bootstrap, confidence, seed, n_bins, sac_accuracy, uncertainty_field)


def score_difference(
    pred_a: Predictions | Sequence[Predictions],
    pred_b: Predictions | Sequence[Predictions],
    *,
    ood: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    n_bins: int = 15,
    sac_accuracy: float = 0.98,
    uncertainty_field: str = "uncertainty",
) -> dict[str, BootstrapInterval]:
    """Paired comparison: every metric of model a minus model b on the same rows, with a paired interval.

    Both models are scored on the same resamples, so the interval of the difference is much tighter than the
    two separate intervals suggest. An interval entirely below 0 means a is lower (better for NLL, ECE, AURC,
    ...); entirely above 0, higher (better for accuracy, SAC, AUROC).

    Args:
        pred_a, pred_b ([`Predictions`] or `Sequence[Predictions]`):
            The two models' predictions on the same split(s): one each, or one per seed for both (as in
            [`score_pooled`]). Labels must match row for row.
        ood (`tuple[Mapping, Mapping]`, *optional*):
            `(ood_a, ood_b)`, each as the `ood` argument of [`score_split`] / [`score_pooled`], same keys.
        bootstrap, confidence, seed, n_bins, sac_accuracy, uncertainty_field:
            As in [`score_split`].

    Returns:
        `dict[str, BootstrapInterval]` with the keys of [`score_split`]: the estimate is `metric(a) - metric(b)`.
    """
    pooled = not isinstance(pred_a, Predictions)
    ood_a, ood_b = (None, None) if ood is None else ood
    groups_a, checked_a = _check_inputs(pred_a, ood_a, pooled)
    groups_b, checked_b = _check_inputs(pred_b, ood_b, pooled)
    if len(groups_a) != len(groups_b):
        raise ValueError(f"`pred_a` has predictions of {len(groups_a)} seeds but `pred_b` has {len(groups_b)}")
    for k, (a, b) in enumerate(zip(groups_a, groups_b, strict=True)):
        if len(a) != len(b) or not np.array_equal(a.labels, b.labels):
            raise ValueError(f"the labels of `pred_a` and `pred_b` differ (seed {k}): they must predict the same split")
    if list(checked_a) != list(checked_b):
        raise ValueError(f"the OOD splits differ: {list(checked_a)} vs {list(checked_b)}")
    for name in checked_a:
        for k, (a, b) in enumerate(zip(checked_a[name], checked_b[name], strict=True)):
            if len(a) != len(b):
                raise ValueError(f"`ood[{name!r}]` has {len(a)} samples for `pred_a` but {len(b)} for `pred_b` (seed {k})")
    layout = _Layout(groups_a, checked_a)
    metrics_a = _metric_function(layout, groups_a, checked_a, n_bins, sac_accuracy, uncertainty_field)
    metrics_b = _metric_function(layout, groups_b, checked_b, n_bins, sac_accuracy, uncertainty_field)
    return _run(lambda counts: metrics_a(counts) - metrics_b(counts), layout, _names(checked_a),
                bootstrap, confidence, seed)


def format_interval(interval: Sequence[float | None], scale: float = 1.0, digits: int = 3) -> str:
    """`"estimate [low, high]"` with `digits` decimals after multiplying by `scale` (e.g. 100 for AURC).

    `interval` is a [`BootstrapInterval`] or any `(estimate, low, high)`, e.g. one read back from `results.json`,
    where a missing value is None: without bounds (None or NaN) only the estimate is shown, and without an
    estimate `"n/a"`.
    """
    if interval[0] is None:
        return "n/a"
    est, low, high = (float("nan") if v is None else float(v) * scale for v in interval)
    if np.isnan(low) or np.isnan(high):
        return f"{est:.{digits}f}"
    return f"{est:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def format_si(value: float, unit: str = "", sep: str = "") -> str:
    """`value` with 3 significant digits and an SI prefix (k, M, G, T): `format_si(5.56e6, "FLOPs", " ")` is
    `"5.56 MFLOPs"`, `format_si(139e3)` is `"139k"`."""
    value = float(value)
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{sep}{prefix}{unit}".strip()
    return f"{value:.3g}{sep}{unit}".strip()
