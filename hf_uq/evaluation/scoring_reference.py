"""The per-resample scorer that [`~hf_uq.evaluation.scoring`]'s batched one replaced, kept as its reference.

[`per_resample_score`] recomputes every metric on each bootstrap resample with the plain `hf_uq.functional` calls,
one resample at a time: the textbook definition, ~20x slower than `score_split` / `score_pooled` /
`score_difference`, which evaluate the weighted metrics of `hf_uq.functional.weighted` on a block of resamples at
once. Both draw the same resamples, so they agree to float rounding; the tests check that (1e-10) and
`benchmarks/bench_scoring.py` times one against the other. Not for production use.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import functional as F
from ..functional.bootstrap import BootstrapInterval, bootstrap_interval
from . import scoring
from .predict import Predictions

__all__ = ["per_resample_score"]


def _metric_function(layout, groups, ood, n_bins: int, sac_accuracy: float, field: str) -> Callable:
    """Every metric of `groups` (and their OOD sets) on the rows of one resample, averaged over seeds."""
    id_data = [(p.logits, p.probs, p.labels, p.correct, scoring._field(p, field)) for p in groups]
    ood_data = {name: [scoring._field(p, field) for p in parts] for name, parts in ood.items()}

    def metrics(rows: np.ndarray) -> np.ndarray:
        per_seed = []
        for k, ((a, b), (logits, probs, labels, correct, u)) in enumerate(zip(layout.id_blocks, id_data, strict=True)):
            i = rows[a:b] - a
            u_id, ok = u[i], correct[i]
            selective = F.selective_metrics(u_id, ok, accuracy=sac_accuracy)
            values = [
                F.accuracy(probs[i], labels[i]), F.nll(logits[i], labels[i], from_logits=True),
                F.brier(probs[i], labels[i]), F.ece(probs[i], labels[i], n_bins=n_bins),
                selective["aurc"], selective["e_aurc"], selective["sac"], F.cp_auroc(-u_id, ok),
            ]
            for name, parts in ood_data.items():
                c, d = layout.ood_blocks[name][k]
                result = F.ood_metrics(u_id, parts[k][rows[c:d] - c])
                values += [result[m] for m in scoring.OOD_METRICS]
            per_seed.append(values)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(np.asarray(per_seed, dtype=np.float64), axis=0)

    return metrics


def per_resample_score(
    function: Callable,
    predictions: Any,
    *others: Any,
    ood: Any = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    n_bins: int = 15,
    sac_accuracy: float = 0.98,
    uncertainty_field: str = "uncertainty",
) -> dict[str, BootstrapInterval]:
    """What `function(predictions, *others, **options)` returns, computed one resample at a time.

    Args:
        function: [`~hf_uq.evaluation.score_split`], [`~hf_uq.evaluation.score_pooled`] or
            [`~hf_uq.evaluation.score_difference`] (whose second model's predictions are `others[0]`).
        predictions, others, ood, bootstrap, confidence, seed, n_bins, sac_accuracy, uncertainty_field: as for
            `function`.

    Returns:
        `dict[str, BootstrapInterval]`: the same keys, resamples and intervals as `function`'s result.
    """
    if function is scoring.score_difference:
        pooled = not isinstance(predictions, Predictions)
        ood_a, ood_b = (None, None) if ood is None else ood
        groups_a, checked_a = scoring._check_inputs(predictions, ood_a, pooled)
        groups_b, checked_b = scoring._check_inputs(others[0], ood_b, pooled)
        layout, names = scoring._Layout(groups_a, checked_a), scoring._names(checked_a)
        metrics_a = _metric_function(layout, groups_a, checked_a, n_bins, sac_accuracy, uncertainty_field)
        metrics_b = _metric_function(layout, groups_b, checked_b, n_bins, sac_accuracy, uncertainty_field)

        def statistic(rows: np.ndarray) -> np.ndarray:
            return metrics_a(rows) - metrics_b(rows)
    elif function in (scoring.score_split, scoring.score_pooled):
        groups, checked = scoring._check_inputs(predictions, ood, function is scoring.score_pooled)
        layout, names = scoring._Layout(groups, checked), scoring._names(checked)
        statistic = _metric_function(layout, groups, checked, n_bins, sac_accuracy, uncertainty_field)
    else:
        raise ValueError(f"`function` must be score_split, score_pooled or score_difference, got {function!r}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="cp_auroc is undefined")
        result = bootstrap_interval(statistic, np.arange(layout.size), n_resamples=bootstrap, confidence=confidence,
                                    seed=seed, groups=layout.strata)
    return {name: BootstrapInterval(float(result.estimate[j]), float(result.low[j]), float(result.high[j]))
            for j, name in enumerate(names)}
