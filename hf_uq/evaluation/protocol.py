"""The protocol core: routes + datasets -> predictions, budgets and the `results.json` document.

`docs/results_format.md` is the contract. The pipeline, per training seed: [`predict_routes`] runs every
[`RouteSpec`] over every split; [`measure_budgets`] measures each route's cost (parameters, FLOPs, weight bytes,
peak memory, interleaved latencies). Then, over all seeds, [`build_results`] scores everything
([`score_pooled`] for the metrics, [`~hf_uq.functional.fidelity`] with a seed-stratified bootstrap for the
fidelity to the teacher), relates costs to the reference route and checks the `--budget`. Reading and writing
live in `results_io` ([`write_results`], [`load_results`], [`save_predictions`], [`load_predictions`]).
"""

from __future__ import annotations

import math
import shlex
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from torch import nn

from ..functional.bootstrap import bootstrap_interval
from ..functional.fidelity import FIDELITY_THRESHOLD, fidelity
from ._budget_common import _num_threads
from .budget import _batch_of
from .counting import count_parameters, flops_per_image, weight_bytes
from .predict import Predictions, iter_batches, predict
from .results_io import (
    BUDGET_KEYS,
    SCHEMA,
    _check_limit,
    _relative,
    collect_versions,
    fits_budget,
    jsonable,
    parse_budget,
)
from .scoring import score_pooled
from .timing import compare_latency, peak_memory

__all__ = [
    "BUDGET_KEYS",
    "FAMILIES",
    "RouteSpec",
    "build_results",
    "fits_budget",
    "measure_budgets",
    "parse_budget",
    "predict_routes",
]

#: The route families of `results.json` (`route["family"]`).
FAMILIES: tuple[str, ...] = (
    "teacher", "single", "temperature", "mc_dropout", "duo", "batch_ensemble", "dirichlet", "sidekick", "user",
)


@dataclass
class RouteSpec:
    """
    One route (a model and how to feed it) for one training seed.

    Args:
        name (`str`):
            Display name, unique within a run, e.g. `"Asymmetric Duo (sidekick s)"`.
        family (`str`):
            One of [`FAMILIES`].
        model (`nn.Module`):
            The classifier, called as `model(pixel_values=...)`.
        image_processor (*optional*):
            Its image processor (see [`predict`]); `None` when the splits already yield `pixel_values`.
        knob (`dict`, *optional*):
            The swept parameter, `{"name": ..., "value": ...}`.
        quantization (`dict`, *optional*):
            `{"backend", "weights", "activations", "skipped"}` when the route is quantized.
        extra (`dict`, *optional*):
            JSON-able facts about the route (e.g. fitted temperatures).
    """

    name: str
    family: str
    model: nn.Module
    image_processor: Any = None
    knob: dict[str, Any] | None = None
    quantization: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a route name must be a non-empty string, got {self.name!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"route {self.name!r}: family must be one of {FAMILIES}, got {self.family!r}")
        if not isinstance(self.model, nn.Module):
            raise ValueError(f"route {self.name!r}: model must be a torch.nn.Module, got {type(self.model).__name__}")
        if self.knob is not None and (not isinstance(self.knob, Mapping) or set(self.knob) != {"name", "value"}):
            raise ValueError(f"route {self.name!r}: knob must be None or {{'name': ..., 'value': ...}}, got {self.knob!r}")


def _check_routes(routes: Any) -> list[RouteSpec]:
    if isinstance(routes, RouteSpec) or not isinstance(routes, Sequence) or not routes:
        raise ValueError("`routes` must be a non-empty sequence of RouteSpec")
    for i, route in enumerate(routes):
        if not isinstance(route, RouteSpec):
            raise ValueError(f"routes[{i}] must be a RouteSpec, got {type(route).__name__}")
    names = [route.name for route in routes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"route names must be unique, repeated: {duplicates}")
    return list(routes)


# ------------------------------------------------------------------------------------------ predictions


def predict_routes(
    routes: Sequence[RouteSpec],
    splits: Mapping[str, Dataset],
    *,
    batch_size: int = 256,
    progress: bool = True,
    num_threads: int | None = None,
) -> dict[str, dict[str, Predictions]]:
    """Predict every split with every route (one seed) using [`predict`].

    Args:
        routes (`Sequence[RouteSpec]`):
            The routes, names unique.
        splits (`Mapping[str, datasets.Dataset]`):
            Split name -> data (raw `image` / `label`, or already yielding `pixel_values`), e.g. `test`, `ood_near`,
            `shift_noise_1`. Names must not contain `/`.
        batch_size (`int`, *optional*, defaults to 256):
            Images per forward pass.
        progress (`bool`, *optional*, defaults to `True`):
            Show one tqdm bar over routes x splits.
        num_threads (`int`, *optional*):
            torch intra-op threads while predicting (see [`predict`]); `None` keeps the current setting.

    Returns:
        `dict[str, dict[str, Predictions]]`: route name -> split name -> [`Predictions`], in the given orders.
    """
    from tqdm.auto import tqdm

    routes = _check_routes(routes)
    if not isinstance(splits, Mapping) or not splits:
        raise ValueError("`splits` must be a non-empty mapping of split name -> datasets.Dataset")
    for name, split in splits.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"split names must be non-empty strings without '/', got {name!r}")
        if not isinstance(split, Dataset):
            raise ValueError(f"split {name!r} must be a datasets.Dataset, got {type(split).__name__}")
    result: dict[str, dict[str, Predictions]] = {}
    with tqdm(total=len(routes) * len(splits), desc="predict", unit="split", disable=not progress) as bar:
        for route in routes:
            result[route.name] = {}
            for name, split in splits.items():
                bar.set_postfix_str(f"{route.name} / {name}", refresh=False)
                result[route.name][name] = predict(
                    route.model, split, route.image_processor, batch_size=batch_size, progress=False,
                    num_threads=num_threads,
                )
                bar.update(1)
    return result


# ------------------------------------------------------------------------------------------ budgets


class _BoundInputs(nn.Module):
    """`model(**inputs)` behind a one-argument forward, so [`compare_latency`] can time routes whose inputs differ."""

    def __init__(self, model: nn.Module, inputs: dict[str, Any]):
        super().__init__()
        self.model = model
        self.inputs = inputs

    def forward(self, _: torch.Tensor) -> Any:
        return self.model(**self.inputs)


def _example_inputs(route: RouteSpec, example_split: Dataset, size: int) -> dict[str, Any]:
    batch = next(iter_batches(example_split, route.image_processor, batch_size=size))
    batch.pop("labels")
    device = next((t.device for t in route.model.parameters()), torch.device("cpu"))
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in _batch_of(batch, size).items()}


def measure_budgets(
    routes: Sequence[RouteSpec],
    example_split: Dataset,
    *,
    batch_sizes: Sequence[int] = (1, 32),
    num_threads: int | None = 1,
    repeats: int = 30,
    warmup: int = 3,
) -> dict[str, dict[str, Any]]:
    """The `budget` entry of `results.json` for every route: parameters, FLOPs, weight bytes, memory, latency.

    Inputs are the first rows of `example_split` (cycled when it is shorter than a batch), processed by each
    route's own image processor. Latencies of all routes are measured interleaved, round-robin, one batch size
    at a time ([`compare_latency`]), so machine noise hits every route alike.

    Args:
        routes (`Sequence[RouteSpec]`):
            The routes (one seed).
        example_split (`datasets.Dataset`):
            A split to draw the example images from (e.g. `test`).
        batch_sizes (`Sequence[int]`, *optional*, defaults to `(1, 32)`):
            Batch sizes of the latency measurement; peak memory is measured at the largest, FLOPs per image at the
            smallest.
        num_threads (`int`, *optional*, defaults to 1):
            torch intra-op threads during every measurement (restored after); `None` keeps the current setting.
        repeats (`int`, *optional*, defaults to 30):
            Timed forwards per route and batch size.
        warmup (`int`, *optional*, defaults to 3):
            Untimed rounds before the timed ones.

    Returns:
        `dict[str, dict]`: route name -> `{"parameters", "flops", "weight_bytes", "peak_memory_bytes",
        "latency_ms": {"<batch size>": {"p50", "p99"}}}` (FLOPs per image, milliseconds).
    """
    routes = _check_routes(routes)
    if not isinstance(example_split, Dataset):
        raise ValueError(f"`example_split` must be a datasets.Dataset, got {type(example_split).__name__}")
    if isinstance(batch_sizes, int) or not batch_sizes or any(
        isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in batch_sizes
    ):
        raise ValueError(f"`batch_sizes` must be a non-empty sequence of positive integers, got {batch_sizes!r}")
    sizes = sorted({int(b) for b in batch_sizes})
    largest = sizes[-1]
    with _num_threads(num_threads):
        inputs = {route.name: _example_inputs(route, example_split, largest) for route in routes}
        budgets: dict[str, dict[str, Any]] = {}
        for route in routes:
            full = inputs[route.name]
            budgets[route.name] = {
                "parameters": count_parameters(route.model),
                "flops": float(flops_per_image(route.model, _batch_of(full, sizes[0]))),
                "weight_bytes": weight_bytes(route.model),
                "peak_memory_bytes": peak_memory(route.model, full).total_peak,
                "latency_ms": {},
            }
    for size in sizes:
        bound = {route.name: _BoundInputs(route.model, _batch_of(inputs[route.name], size)) for route in routes}
        stats = compare_latency(bound, torch.zeros(size), warmup=warmup, repeats=repeats, threads=num_threads)
        for name, stat in stats.items():
            budgets[name]["latency_ms"][str(size)] = {"p50": stat.p50 * 1e3, "p99": stat.p99 * 1e3}
    return budgets


# ------------------------------------------------------------------------------------------ build_results


def _interval(value: Any) -> list[float]:
    return [float(v) for v in value]


def _check_predictions(
    predictions: Any, seeds: list[int], splits: list[str]
) -> dict[str, list[Mapping[str, Predictions]]]:
    if not isinstance(predictions, Mapping) or not predictions:
        raise ValueError("`predictions` must be a non-empty mapping of route name -> list over seeds of {split: ...}")
    checked = {}
    for route, per_seed in predictions.items():
        if not isinstance(route, str) or not route:
            raise ValueError(f"route names must be non-empty strings, got {route!r}")
        if isinstance(per_seed, (Mapping, str, bytes)) or not isinstance(per_seed, Sequence):
            raise ValueError(f"predictions of route {route!r} must be a list over seeds, got {type(per_seed).__name__}")
        if len(per_seed) != len(seeds):
            raise ValueError(
                f"route {route!r} has predictions of {len(per_seed)} seeds but `seeds` lists {len(seeds)}: {seeds}"
            )
        for seed, value in zip(seeds, per_seed, strict=True):
            if not isinstance(value, Mapping):
                raise ValueError(f"route {route!r}, seed {seed}: expected {{split: Predictions}}, got {type(value).__name__}")
            missing = [s for s in splits if s not in value]
            if missing:
                raise ValueError(f"route {route!r}, seed {seed}: predictions of split(s) {missing} are missing")
            for split in splits:
                if not isinstance(value[split], Predictions):
                    raise ValueError(
                        f"route {route!r}, seed {seed}, split {split!r}: expected a Predictions, "
                        f"got {type(value[split]).__name__}"
                    )
        checked[route] = list(per_seed)
    first = next(iter(checked))
    for route, per_seed in checked.items():
        for k, seed in enumerate(seeds):
            for split in splits:
                a, b = checked[first][k][split].labels, per_seed[k][split].labels
                if len(a) != len(b) or not np.array_equal(a, b):
                    raise ValueError(
                        f"the labels of route {route!r} differ from route {first!r} on split {split!r}, seed {seed}: "
                        "every route must predict the same rows"
                    )
    return checked


def _check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"`seeds` must be a non-empty list of integers, got {seeds!r}")
    if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in seeds):
        raise ValueError(f"`seeds` must be integers, got {list(seeds)!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"`seeds` must be distinct, got {list(seeds)!r}")
    return [int(s) for s in seeds]


def _check_splits(id_split: str, ood_splits: Sequence[str], shift_splits: Sequence[str]) -> tuple[list[str], list[str]]:
    ood, shift = list(ood_splits or ()), list(shift_splits or ())
    names = [id_split] + ood + shift
    for name in names:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"split names must be non-empty strings without '/', got {name!r}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"split names must be distinct across id_split, ood_splits and shift_splits: {duplicates}")
    if "shift" in names:
        raise ValueError("no split may be named 'shift': that key holds the pooled shift splits")
    if "test" in ood + shift:
        raise ValueError("an OOD or shift split may not be named 'test': that key holds the in-distribution split")
    return ood, shift


def _pooled_fidelity(
    u_route: list[np.ndarray], u_teacher: list[np.ndarray], bootstrap: int, confidence: float
) -> list[float]:
    """Mean over seeds of fidelity(u_route[k], u_teacher[k]), with a seed-stratified paired bootstrap."""
    lengths = [len(u) for u in u_route]
    bounds = np.cumsum([0] + lengths)
    groups = np.repeat(np.arange(len(lengths)), lengths)

    def statistic(a: np.ndarray, b: np.ndarray) -> float:
        values = [fidelity(a[s:e], b[s:e]) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
        return float(np.nanmean(values)) if not np.isnan(values).all() else math.nan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant resamples: NaN, left out of the interval
        result = bootstrap_interval(
            statistic, np.concatenate(u_route), np.concatenate(u_teacher), n_resamples=bootstrap,
            confidence=confidence, seed=0, groups=groups,
        )
    return _interval(result)


def build_results(
    predictions: Mapping[str, Sequence[Mapping[str, Predictions]]],
    budgets: Mapping[str, Mapping[str, Any] | None] | None,
    meta: Mapping[str, Mapping[str, Any]],
    *,
    seeds: Sequence[int],
    reference: str | None,
    teacher: str | None,
    id_split: str = "test",
    ood_splits: Sequence[str],
    shift_splits: Sequence[str],
    bootstrap: int = 1000,
    confidence: float = 0.95,
    n_bins: int = 15,
    sac_accuracy: float = 0.98,
    fidelity_threshold: float = FIDELITY_THRESHOLD,
    budget_limits: Mapping[str, float] | None = None,
    command: str | Sequence[str],
    data_info: Mapping[str, Any],
    settings_extra: Mapping[str, Any] | None = None,
    predictions_dir: str | None = "predictions",
    progress: bool = False,
) -> dict[str, Any]:
    """Score every route and assemble the `results.json` document of `docs/results_format.md`.

    Metrics: [`score_pooled`] over seeds on `id_split` (with every OOD split; stored under the key `"test"` whatever
    the split is called), on each shift split (in-distribution metrics only), and on `"shift"` (each seed's shift
    splits concatenated). Fidelity: per seed `fidelity(u_route, u_teacher)` on the
    same rows (`test`, pooled `shift`, and `ood` = the OOD splits concatenated), averaged over seeds, with a
    seed-stratified paired bootstrap. Budgets are related to the `reference` route and checked against
    `budget_limits`. NaN and infinities come out as `None`.

    Args:
        predictions (`Mapping[str, Sequence[Mapping[str, Predictions]]]`):
            Route name (display order) -> list over `seeds` of `{split: Predictions}` holding at least
            `id_split`, `ood_splits` and `shift_splits`. Every route must have the same labels on a split and seed.
        budgets (`Mapping[str, dict | None]`, *optional*):
            Route name -> [`measure_budgets`] entry (`None` for a route, or `budgets=None`: not measured, then
            `budget`, `relative` and `fits_budget` are `null`).
        meta (`Mapping[str, Mapping[str, Any]]`):
            Route name -> `{"family", "knob", "quantization", "extra", "models"}` (`models`: seed -> saved folder,
            relative to the results folder); only `family` is required.
        seeds (`Sequence[int]`):
            The training seeds, in the order of each route's list.
        reference (`str`, *optional*):
            Route every cost is relative to; `None` for no `relative`.
        teacher (`str`, *optional*):
            Route the fidelity is measured against; `None` for no fidelity.
        id_split (`str`, *optional*, defaults to `"test"`):
            The labelled in-distribution split.
        ood_splits (`Sequence[str]`):
            OOD splits (may be empty).
        shift_splits (`Sequence[str]`):
            Covariate-shift splits (may be empty).
        bootstrap (`int`, *optional*, defaults to 1000):
            Bootstrap resamples of every interval; 0 gives estimates with `null` bounds.
        confidence (`float`, *optional*, defaults to 0.95):
            Coverage of the intervals.
        n_bins (`int`, *optional*, defaults to 15):
            ECE bins.
        sac_accuracy (`float`, *optional*, defaults to 0.98):
            Target selective accuracy of SAC.
        fidelity_threshold (`float`, *optional*, defaults to 0.7):
            `fidelity.below_threshold` is whether the test estimate is below this.
        budget_limits (`Mapping[str, float]`, *optional*):
            `{"memory": ..., "latency": ...}` (either or both, see [`parse_budget`]); `None` for no `--budget`.
        command (`str` or `Sequence[str]`):
            The command line as typed (a list is joined shell-style).
        data_info (`Mapping[str, Any]`):
            `name`, `labels` (id2label order), `calibration_split`, optionally `num_samples` of other splits and
            any other facts; the split lists and per-split sizes (first seed) are filled in here.
        settings_extra (`Mapping[str, Any]`, *optional*):
            Run-specific settings (`quick`, `epochs`, `members`, ...), merged into `settings`.
        predictions_dir (`str`, *optional*, defaults to `"predictions"`):
            Where [`save_predictions`] wrote the predictions, relative to the results folder; `None` when not saved.
        progress (`bool`, *optional*, defaults to `False`):
            Show a tqdm bar over routes.

    Returns:
        `dict[str, Any]`: the results document, ready for [`write_results`].
    """
    from tqdm.auto import tqdm

    seeds = _check_seeds(seeds)
    ood_splits, shift_splits = _check_splits(id_split, ood_splits, shift_splits)
    preds = _check_predictions(predictions, seeds, [id_split] + ood_splits + shift_splits)
    routes = list(preds)
    for role, name in (("teacher", teacher), ("reference", reference)):
        if name is not None and name not in preds:
            raise ValueError(f"unknown {role} route {name!r}; routes: {routes}")
    if not isinstance(meta, Mapping) or set(meta) != set(routes):
        given = sorted(meta) if isinstance(meta, Mapping) else meta
        raise ValueError(f"`meta` must describe exactly the routes of `predictions`: got {given}, routes {routes}")
    for name in routes:
        if not isinstance(meta[name], Mapping) or meta[name].get("family") not in FAMILIES:
            raise ValueError(f"meta of route {name!r}: family must be one of {FAMILIES}")
    if budgets is not None:
        if not isinstance(budgets, Mapping):
            raise ValueError(f"`budgets` must be a mapping of route name -> budget, got {type(budgets).__name__}")
        missing = [name for name in routes if name not in budgets]
        if missing:
            raise ValueError(f"`budgets` lacks route(s) {missing}: pass None for a route whose budget was not measured")
        for name in routes:
            if budgets[name] is not None and not isinstance(budgets[name], Mapping):
                raise ValueError(f"budget of route {name!r} must be a mapping (from measure_budgets) or None")
    if budget_limits is not None:
        if not isinstance(budget_limits, Mapping) or set(budget_limits) - set(BUDGET_KEYS):
            raise ValueError(f"`budget_limits` takes the keys {BUDGET_KEYS}, got {budget_limits!r}")
        budget_limits = {k: _check_limit(k, v) for k, v in budget_limits.items() if v is not None} or None
    if not isinstance(data_info, Mapping):
        raise ValueError(f"`data_info` must be a mapping, got {type(data_info).__name__}")

    budget_of = {name: (None if budgets is None else budgets[name]) for name in routes}
    options = dict(bootstrap=bootstrap, confidence=confidence, n_bins=n_bins, sac_accuracy=sac_accuracy)
    entries = []
    for name in tqdm(routes, desc="score", unit="route", disable=not progress):
        per_seed = preds[name]
        metrics: dict[str, Any] = {}
        scored = score_pooled(
            [p[id_split] for p in per_seed], ood={s: [p[s] for p in per_seed] for s in ood_splits}, **options
        )
        metrics["test"] = {key: _interval(value) for key, value in scored.items()}  # whatever id_split is called
        if shift_splits:
            pooled = [Predictions.concatenate([p[s] for s in shift_splits]) for p in per_seed]
            metrics["shift"] = {k: _interval(v) for k, v in score_pooled(pooled, **options).items()}
            for split in shift_splits:
                scored = score_pooled([p[split] for p in per_seed], **options)
                metrics[split] = {key: _interval(value) for key, value in scored.items()}
        entry = {
            "name": name,
            "family": meta[name]["family"],
            "knob": meta[name].get("knob"),
            "quantization": meta[name].get("quantization"),
            "role": "teacher" if name == teacher else "reference" if name == reference else None,
            "models": {str(k): v for k, v in (meta[name].get("models") or {}).items()},
            "extra": dict(meta[name].get("extra") or {}),
            "metrics": metrics,
            "fidelity": _fidelity_entry(name, preds, teacher, id_split, ood_splits, shift_splits, fidelity_threshold,
                                        bootstrap, confidence),
            "budget": budget_of[name],
            "relative": _relative(budget_of[name], None if reference is None else budget_of[reference]),
        }
        entry["fits_budget"] = fits_budget(entry, **(budget_limits or {}))
        entries.append(entry)

    first = preds[routes[0]][0]
    num_samples = dict(data_info.get("num_samples") or {})
    num_samples.update({s: len(first[s]) for s in [id_split] + ood_splits + shift_splits})
    data = {
        "name": data_info.get("name"),
        "id_split": id_split,
        "calibration_split": data_info.get("calibration_split"),
        "ood_splits": ood_splits,
        "shift_splits": shift_splits,
        "labels": list(data_info.get("labels") or [str(i) for i in range(first[id_split].num_classes)]),
        **{k: v for k, v in data_info.items() if k not in ("name", "calibration_split", "labels", "num_samples")},
        "num_samples": num_samples,
    }
    sizes = sorted({int(s) for b in budget_of.values() if b for s in (b.get("latency_ms") or {})})
    settings = {
        **options,
        "fidelity_threshold": fidelity_threshold,
        "budget": budget_limits,
        "latency_batch_sizes": sizes,
        "reference": reference,
        "teacher": teacher,
        "quick": False,
        **dict(settings_extra or {}),
    }
    return jsonable({
        "schema": SCHEMA,
        "command": command if isinstance(command, str) else shlex.join(str(c) for c in command),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": collect_versions(),
        "seeds": seeds,
        "settings": settings,
        "data": data,
        "routes": entries,
        "predictions": predictions_dir,
    })


def _fidelity_entry(
    name: str, preds: Mapping[str, list[Mapping[str, Predictions]]], teacher: str | None, id_split: str,
    ood_splits: list[str], shift_splits: list[str], threshold: float, bootstrap: int, confidence: float,
) -> dict[str, Any] | None:
    if teacher is None:
        return None
    sets = {"test": [id_split]}
    if shift_splits:
        sets["shift"] = shift_splits
    if ood_splits:
        sets["ood"] = ood_splits
    entry: dict[str, Any] = {}
    for key, splits in sets.items():
        if name == teacher:
            entry[key] = [1.0, 1.0, 1.0]
            continue
        u_route = [np.concatenate([p[s].uncertainty for s in splits]) for p in preds[name]]
        u_teacher = [np.concatenate([p[s].uncertainty for s in splits]) for p in preds[teacher]]
        entry[key] = _pooled_fidelity(u_route, u_teacher, bootstrap, confidence)
        if math.isnan(entry[key][0]):
            warnings.warn(f"fidelity of route {name!r} on {key!r} is undefined (a constant uncertainty)",
                          RuntimeWarning, stacklevel=3)
    estimate = entry["test"][0]
    entry["below_threshold"] = None if math.isnan(estimate) else bool(estimate < threshold)
    return entry
