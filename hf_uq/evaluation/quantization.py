"""Did the uncertainty survive quantization? Drift reports and a UQ-aware choice of quantization settings.

[`quantization_drift`] compares a quantized model with its floating-point reference on the same splits: the
change in calibration (ECE), NLL, selective risk (AURC) and OOD detection (AUROC per OOD split), the Spearman
rank correlation of the two models' uncertainties on the union of the in-distribution test split and the OOD
splits (`hf_uq.functional.fidelity`, DESIGN.md §3), top-1 agreement, and the costs: weight bytes
([`weight_bytes`]) and latency ([`compare_latency`], the two models timed interleaved) as ratios.

[`select_quantization`] tries a small grid of settings (backend, weight bits, activation quantization, layers
kept in float), measures the drift of each against the user's [`DriftBounds`] (default: ECE rises by at most
0.5 points and Spearman >= 0.95), and returns the smallest (or fastest) setting that stays inside, with the table
of everything it tried.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import functional as F
from ._budget_common import _num_threads
from .budget import compare_latency, weight_bytes
from .predict import Predictions, iter_batches, predict

__all__ = [
    "DEFAULT_BOUNDS",
    "DriftBounds",
    "QuantizationSelection",
    "default_quantization_grid",
    "quantization_drift",
    "select_quantization",
]

_DELTA_METRICS = ("accuracy", "ece", "nll", "aurc")


@dataclass(frozen=True)
class DriftBounds:
    """
    Limits on how far a quantized model may drift from its reference (`None` switches a limit off).

    Args:
        max_delta_ece (`float`, *optional*, defaults to 0.005): largest allowed ECE increase, as a fraction
            (0.005 = 0.5 points). A decrease always passes.
        min_spearman (`float`, *optional*, defaults to 0.95): smallest Spearman correlation between the two
            models' uncertainties (in-distribution test + OOD splits).
        max_delta_nll (`float`, *optional*): largest allowed NLL increase (nats).
        max_delta_aurc (`float`, *optional*): largest allowed AURC increase (fraction; 0.001 = 0.1 x100 points).
        max_ood_auroc_drop (`float`, *optional*): largest allowed decrease of any OOD split's AUROC.
        min_top1_agreement (`float`, *optional*): smallest fraction of in-distribution predictions left unchanged.
    """

    max_delta_ece: float | None = 0.005
    min_spearman: float | None = 0.95
    max_delta_nll: float | None = None
    max_delta_aurc: float | None = None
    max_ood_auroc_drop: float | None = None
    min_top1_agreement: float | None = None

    @classmethod
    def coerce(cls, bounds: DriftBounds | Mapping[str, Any] | None) -> DriftBounds:
        if bounds is None:
            return cls()
        if isinstance(bounds, cls):
            return bounds
        if isinstance(bounds, Mapping):
            unknown = set(bounds) - {f.name for f in fields(cls)}
            if unknown:
                raise ValueError(f"unknown bound(s) {sorted(unknown)}; known: {[f.name for f in fields(cls)]}")
            return cls(**bounds)
        raise ValueError(f"`bounds` must be a DriftBounds or a dict of its fields, got {type(bounds).__name__}")

    def violations(self, drift: Mapping[str, Any]) -> list[str]:
        """Which limits a [`quantization_drift`] result breaks (a NaN measurement breaks its limit)."""
        out = []

        def above(key: str, limit: float | None, label: str) -> None:
            value = drift.get(key, math.nan)
            if limit is not None and not value <= limit:
                out.append(f"{label} {value:+.4f} > {limit:g}")

        def below(key: str, limit: float | None, label: str) -> None:
            value = drift.get(key, math.nan)
            if limit is not None and not value >= limit:
                out.append(f"{label} {value:.4f} < {limit:g}")

        above("delta_ece", self.max_delta_ece, "delta ECE")
        below("spearman", self.min_spearman, "Spearman")
        above("delta_nll", self.max_delta_nll, "delta NLL")
        above("delta_aurc", self.max_delta_aurc, "delta AURC")
        below("top1_agreement", self.min_top1_agreement, "top-1 agreement")
        if self.max_ood_auroc_drop is not None:
            for key, value in drift.items():
                if key.startswith("delta_ood_auroc/") and not -value <= self.max_ood_auroc_drop:
                    out.append(f"{key[6:]} drop {-value:.4f} > {self.max_ood_auroc_drop:g}")
        return out


#: The default limits: ECE rises by at most 0.5 points and the uncertainties keep Spearman >= 0.95.
DEFAULT_BOUNDS = DriftBounds()


# ------------------------------------------------------------------------------------------ drift


def _splits(datasets: Any, id_split: str, ood_splits: Sequence[str] | None) -> tuple[Any, dict[str, Any]]:
    if not isinstance(datasets, Mapping):
        raise ValueError(f"`datasets` must be a DatasetDict or a mapping of split names, got {type(datasets).__name__}")
    if id_split not in datasets:
        raise ValueError(f"no in-distribution split {id_split!r} in the datasets (splits: {sorted(datasets)})")
    if ood_splits is None:
        ood_splits = [name for name in datasets if name.startswith("ood")]
    missing = [name for name in ood_splits if name not in datasets]
    if missing:
        raise ValueError(f"OOD split(s) {missing} not in the datasets (splits: {sorted(datasets)})")
    return datasets[id_split], {name: datasets[name] for name in ood_splits}


def _predict_all(model: nn.Module, id_data: Any, ood_data: Mapping[str, Any], image_processor: Any,
                 batch_size: int) -> tuple[Predictions, dict[str, Predictions]]:
    kwargs = {"batch_size": batch_size, "progress": False, "num_threads": torch.get_num_threads()}
    return (predict(model, id_data, image_processor, **kwargs),
            {name: predict(model, data, image_processor, **kwargs) for name, data in ood_data.items()})


def _metrics(pred: Predictions, ood: Mapping[str, Predictions], n_bins: int) -> dict[str, float]:
    correct = pred.correct
    out = {
        "accuracy": float(correct.mean()),
        "ece": F.ece(pred.probs, pred.labels, n_bins=n_bins),
        "nll": F.nll(pred.logits, pred.labels, from_logits=True),
        "aurc": F.aurc(pred.uncertainty, correct),
    }
    for name, p in ood.items():
        out[f"ood_auroc/{name}"] = F.ood_auroc(pred.uncertainty, p.uncertainty)
    return out


def _latency_inputs(id_data: Any, image_processor: Any, batch_size: int) -> dict[str, torch.Tensor]:
    """`batch_size` rows of the split (cycled if it is smaller), as forward kwargs."""
    batch = next(iter_batches(id_data, image_processor, batch_size))
    batch.pop("labels", None)
    n = len(batch["pixel_values"])
    index = torch.arange(batch_size) % n
    return {k: v[index].contiguous() for k, v in batch.items()}


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel() - a.mean(), b.ravel() - b.mean()
    denom = float(np.sqrt(np.dot(a, a) * np.dot(b, b)))
    return float(np.dot(a, b) / denom) if denom > 0 else math.nan


def _drift(
    reference: nn.Module, quantized: nn.Module, id_data: Any, ood_data: Mapping[str, Any],
    ref_preds: tuple[Predictions, dict[str, Predictions]], *, image_processor: Any, batch_size: int,
    latency_batch_sizes: Sequence[int], latency_repeats: int, threads: int | None, n_bins: int, bootstrap: int,
) -> dict[str, Any]:
    ref_id, ref_ood = ref_preds
    q_id, q_ood = _predict_all(quantized, id_data, ood_data, image_processor, batch_size)
    ref_m, q_m = _metrics(ref_id, ref_ood, n_bins), _metrics(q_id, q_ood, n_bins)
    out: dict[str, Any] = {"reference": ref_m, "quantized": q_m}
    for name in _DELTA_METRICS:
        out[f"delta_{name}"] = q_m[name] - ref_m[name]
    ood_deltas = [q_m[f"ood_auroc/{n}"] - ref_m[f"ood_auroc/{n}"] for n in ood_data]
    out["delta_ood_auroc"] = float(np.mean(ood_deltas)) if ood_deltas else math.nan
    for name, delta in zip(ood_data, ood_deltas, strict=True):
        out[f"delta_ood_auroc/{name}"] = delta
    u_ref = np.concatenate([ref_id.uncertainty] + [p.uncertainty for p in ref_ood.values()])
    u_q = np.concatenate([q_id.uncertainty] + [p.uncertainty for p in q_ood.values()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a constant score gives NaN, which fails the bound
        out["spearman"] = F.fidelity(u_q, u_ref)
    out["top1_agreement"] = float(np.mean(q_id.prediction == ref_id.prediction))
    out["logits_pearson"] = _pearson(q_id.logits.astype(np.float64), ref_id.logits.astype(np.float64))
    ref_bytes, q_bytes = weight_bytes(reference), weight_bytes(quantized)
    out.update(weight_bytes_reference=ref_bytes, weight_bytes_quantized=q_bytes, weight_bytes_ratio=q_bytes / ref_bytes)
    out["latency"] = {}
    for size in latency_batch_sizes:
        inputs = _latency_inputs(id_data, image_processor, size)
        stats = compare_latency({"reference": reference, "quantized": quantized}, inputs,
                                repeats=latency_repeats, threads=threads)
        ratio = stats["quantized"].p50 / stats["reference"].p50
        out["latency"][size] = {"reference_s": stats["reference"].p50, "quantized_s": stats["quantized"].p50,
                                "ratio": ratio}
        out[f"latency_ratio@{size}"] = ratio
    out["n_samples"] = {"id": len(ref_id), **{name: len(p) for name, p in ref_ood.items()}}
    if bootstrap:
        from .scoring import score_difference

        out["intervals"] = score_difference(q_id, ref_id, ood=(q_ood, ref_ood), bootstrap=bootstrap)
    return out


def quantization_drift(
    reference_model: nn.Module,
    quantized_model: nn.Module,
    datasets: Mapping[str, Any],
    *,
    image_processor: Any | None = None,
    id_split: str = "test",
    ood_splits: Sequence[str] | None = None,
    batch_size: int = 64,
    latency_batch_sizes: Sequence[int] = (1, 32),
    latency_repeats: int = 30,
    threads: int | None = 1,
    n_bins: int = 15,
    bootstrap: int = 0,
) -> dict[str, Any]:
    """
    How far a quantized model's predictions, calibration and uncertainty drift from its reference, and what it saves.

    Both models are run over the same splits with [`predict`]; each model's own `uncertainty` (the default score
    of hf_uq models, `1 - max p` for plain classifiers) ranks samples for AURC, OOD AUROC and Spearman.

    Args:
        reference_model (`nn.Module`): the floating-point model.
        quantized_model (`nn.Module`): its quantized version (e.g. from [`hf_uq.quantize`]).
        datasets (`DatasetDict` or `Mapping[str, Dataset]`): holds `id_split` and the OOD splits, with raw
            `image` columns (then pass `image_processor`) or `pixel_values`.
        image_processor (*optional*): the models' image processor (a [`~hf_uq.DuoImageProcessor`] for duos).
        id_split (`str`, *optional*, defaults to `"test"`): the labelled in-distribution split.
        ood_splits (`list[str]`, *optional*): OOD splits; defaults to every split whose name starts with `"ood"`.
        batch_size (`int`, *optional*, defaults to 64): prediction batch size.
        latency_batch_sizes (`tuple[int]`, *optional*, defaults to `(1, 32)`): batch sizes timed with
            [`compare_latency`] (interleaved); `()` skips timing.
        latency_repeats (`int`, *optional*, defaults to 30): timed forwards per model and batch size.
        threads (`int`, *optional*, defaults to 1): torch threads for predictions and timing (`None`: leave as
            is); tiny models run much faster on one thread than on two contended ones.
        n_bins (`int`, *optional*, defaults to 15): ECE bins.
        bootstrap (`int`, *optional*, defaults to 0): when > 0, paired bootstrap intervals of every metric's
            difference (quantized - reference) from [`score_difference`], under `"intervals"`.

    Returns:
        `dict` with `reference` / `quantized` (accuracy, ece, nll, aurc, `ood_auroc/<split>`), `delta_accuracy`,
        `delta_ece`, `delta_nll`, `delta_aurc` (quantized - reference; fractions, ECE x100 = points),
        `delta_ood_auroc` (mean over OOD splits) and `delta_ood_auroc/<split>`, `spearman`, `top1_agreement`,
        `logits_pearson` (in-distribution logits), `weight_bytes_reference` / `_quantized` / `_ratio`, `latency`
        (`{batch: {reference_s, quantized_s, ratio}}`, p50 seconds) and `latency_ratio@<batch>`, `n_samples`.
    """
    for name, model in (("reference_model", reference_model), ("quantized_model", quantized_model)):
        if not isinstance(model, nn.Module):
            raise ValueError(f"`{name}` must be a torch.nn.Module, got {type(model).__name__}")
    id_data, ood_data = _splits(datasets, id_split, ood_splits)
    with _num_threads(threads):  # tiny models run far faster on 1 thread on a busy host
        ref_preds = _predict_all(reference_model, id_data, ood_data, image_processor, batch_size)
        return _drift(reference_model, quantized_model, id_data, ood_data, ref_preds, image_processor=image_processor,
                      batch_size=batch_size, latency_batch_sizes=tuple(latency_batch_sizes),
                      latency_repeats=latency_repeats, threads=threads, n_bins=n_bins, bootstrap=bootstrap)


# ------------------------------------------------------------------------------------------ selection


def default_quantization_grid(backends: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The settings [`select_quantization`] tries by default, for the installed backends.

    optimum-quanto: weights int8 / int4 x activations none / int8 x heads quantized / kept in float (8 settings);
    bitsandbytes: weights int8 / int4 x heads quantized / kept in float (4 settings).
    """
    from ..quantization import HEADS, available_backends

    backends = available_backends() if backends is None else list(backends)
    grid = []
    for backend in backends:
        activations = (None, "int8") if backend == "quanto" else (None,)
        for weights in ("int8", "int4"):
            for act in activations:
                for skip in ((), (HEADS,)):
                    grid.append({"backend": backend, "weights": weights, "activations": act, "skip": list(skip)})
    return grid


@dataclass
class QuantizationSelection:
    """
    The result of [`select_quantization`].

    Attributes:
        config (`dict` or `None`): the chosen settings (`backend`, `weights`, `activations`, `skip`), `None`
            when no setting stayed inside the bounds.
        model (`nn.Module` or `None`): the chosen quantized model.
        drift (`dict` or `None`): its [`quantization_drift`] report.
        table (`list[dict]`): one row per setting tried, in grid order: the settings, `label`, `passes`,
            `violations`, `error`, `weight_bytes_ratio`, `delta_ece`, `spearman`, ... and `chosen`.
        objective (`str`): `"size"` or `"latency"`.
        bounds ([`DriftBounds`]): the limits used.
    """

    config: dict[str, Any] | None
    model: nn.Module | None
    drift: dict[str, Any] | None
    table: list[dict[str, Any]] = field(default_factory=list)
    objective: str = "size"
    bounds: DriftBounds = DEFAULT_BOUNDS

    def format_table(self) -> str:
        """The table as aligned text (ECE in points, sizes and latencies as ratios to the float model)."""
        head = f"{'setting':<34}{'bytes':>7}{'lat@B':>7}{'dECE pt':>9}{'dNLL':>8}{'Spearman':>9}  verdict"
        lines = [head]
        for row in self.table:
            verdict = "ERROR " + row["error"] if row.get("error") else (
                ("CHOSEN" if row.get("chosen") else "ok") if row["passes"] else "; ".join(row["violations"]))
            lat = f"{row['latency_ratio']:>7.2f}" if "latency_ratio" in row else f"{'-':>7}"
            lines.append(f"{row['label']:<34}{row.get('weight_bytes_ratio', math.nan):>7.3f}{lat}"
                         f"{100 * row.get('delta_ece', math.nan):>+9.2f}{row.get('delta_nll', math.nan):>+8.4f}"
                         f"{row.get('spearman', math.nan):>9.4f}  {verdict}")
        return "\n".join(lines)


def _label(config: Mapping[str, Any]) -> str:
    from ..quantization import QuantizationInfo

    label = QuantizationInfo(config["backend"], config["weights"], config.get("activations")).label
    skip = config.get("skip") or []
    return label + (f" skip={','.join(skip)}" if skip else "")


def select_quantization(
    model: nn.Module,
    datasets: Mapping[str, Any],
    *,
    bounds: DriftBounds | Mapping[str, Any] | None = None,
    grid: Sequence[Mapping[str, Any]] | None = None,
    objective: str = "size",
    image_processor: Any | None = None,
    calibration_split: str = "validation",
    max_calibration_batches: int | None = 8,
    id_split: str = "test",
    ood_splits: Sequence[str] | None = None,
    latency_batch_size: int = 32,
    latency_repeats: int = 20,
    threads: int | None = 1,
    batch_size: int = 64,
) -> QuantizationSelection:
    """
    Try a small grid of quantization settings and keep the smallest (or fastest) whose uncertainty drift stays
    inside `bounds`.

    Each setting is applied to a copy of `model` with [`hf_uq.quantize`] (static int8 activations are
    calibrated on `calibration_split`), then compared with the float model by [`quantization_drift`] on
    `id_split` and the OOD splits. A setting a backend cannot apply (e.g. bitsandbytes on a model without any
    `nn.Linear` it can take) is listed with its error.

    Args:
        model (`nn.Module`): the floating-point classifier (not modified).
        datasets (`DatasetDict`): holds `id_split`, the OOD splits and `calibration_split`.
        bounds ([`DriftBounds`] or `dict`, *optional*): defaults to ECE increase <= 0.5 points, Spearman >= 0.95.
        grid (`list[dict]`, *optional*): settings, each with `backend`, `weights` and optionally `activations`,
            `skip` and backend `options`; defaults to [`default_quantization_grid`].
        objective (`str`, *optional*, defaults to `"size"`): `"size"` picks the fewest weight bytes (ties: grid
            order); `"latency"` picks the lowest latency at `latency_batch_size` (timed for every setting).
        image_processor (*optional*): the model's image processor for raw `image` splits.
        calibration_split (`str`, *optional*, defaults to `"validation"`): calibration data for activations.
        max_calibration_batches (`int`, *optional*, defaults to 8): calibration forwards per setting.
        id_split, ood_splits, batch_size: as in [`quantization_drift`].
        latency_batch_size, latency_repeats: timing settings (used when `objective="latency"`).
        threads (`int`, *optional*, defaults to 1): torch threads for everything (`None`: leave as is).

    Returns:
        [`QuantizationSelection`]: the chosen `config`, `model` and `drift` (all `None` if nothing passed) and
        the `table` of every setting tried.
    """
    if objective not in ("size", "latency"):
        raise ValueError(f"`objective` must be 'size' or 'latency', got {objective!r}")
    if not isinstance(model, nn.Module):
        raise ValueError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    limits = DriftBounds.coerce(bounds)
    grid = default_quantization_grid() if grid is None else [dict(c) for c in grid]
    if not grid:
        raise ValueError("the grid is empty: no quantization backend is installed (pip install 'hf_uq[quant]')")
    id_data, ood_data = _splits(datasets, id_split, ood_splits)
    with _num_threads(threads):  # tiny models run far faster on 1 thread on a busy host
        return _select(model, datasets, grid, limits, objective, image_processor, calibration_split,
                       max_calibration_batches, id_data, ood_data, latency_batch_size, latency_repeats, threads,
                       batch_size)


def _select(model, datasets, grid, limits, objective, image_processor, calibration_split, max_calibration_batches,
            id_data, ood_data, latency_batch_size, latency_repeats, threads, batch_size) -> QuantizationSelection:
    from ..quantization import quantize

    ref_preds = _predict_all(model, id_data, ood_data, image_processor, batch_size)
    timing = (latency_batch_size,) if objective == "latency" else ()
    best: tuple[float, int] | None = None
    table: list[dict[str, Any]] = []
    kept: tuple[nn.Module, dict[str, Any]] | None = None
    for index, config in enumerate(grid):
        unknown = set(config) - {"backend", "weights", "activations", "skip", "options"}
        if unknown or "backend" not in config or "weights" not in config:
            raise ValueError(f"grid entry {config} needs `backend` and `weights` (and only activations/skip/options)")
        row: dict[str, Any] = {**config, "label": _label(config), "passes": False, "violations": [], "error": None}
        table.append(row)
        calibration = datasets.get(calibration_split) if config.get("activations") else None
        if config.get("activations") and calibration is None:
            raise ValueError(f"activation quantization needs the calibration split {calibration_split!r}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # skipped layers are counted in the table instead
                quantized = quantize(model, config["backend"], config["weights"], config.get("activations"),
                                     calibration_dataset=calibration, skip=config.get("skip"),
                                     image_processor=image_processor, max_calibration_batches=max_calibration_batches,
                                     **dict(config.get("options") or {}))
        except ValueError as error:
            row["error"] = str(error)
            continue
        drift = _drift(model, quantized, id_data, ood_data, ref_preds, image_processor=image_processor,
                       batch_size=batch_size, latency_batch_sizes=timing, latency_repeats=latency_repeats,
                       threads=threads, n_bins=15, bootstrap=0)
        row.update({key: drift[key] for key in ("weight_bytes_ratio", "delta_accuracy", "delta_ece", "delta_nll",
                                                "delta_aurc", "delta_ood_auroc", "spearman", "top1_agreement")})
        row["skipped_layers"] = len(quantized.hf_uq_quantization.skipped)
        if timing:
            row["latency_ratio"] = drift[f"latency_ratio@{latency_batch_size}"]
        row["violations"] = limits.violations(drift)
        row["passes"] = not row["violations"]
        if row["passes"]:
            score = (row["latency_ratio"] if objective == "latency" else drift["weight_bytes_quantized"], index)
            if best is None or score < best:
                best, kept = score, (quantized, drift)
    if best is None:
        return QuantizationSelection(None, None, None, table, objective, limits)
    table[best[1]]["chosen"] = True
    config = {k: grid[best[1]].get(k) for k in ("backend", "weights", "activations", "skip", "options")}
    return QuantizationSelection(config, kept[0], kept[1], table, objective, limits)
