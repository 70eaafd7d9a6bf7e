"""`hf-uq benchmark`: the five-step UQ-fidelity protocol end to end on the embedded digits benchmark.

[`run_benchmark`] trains (or reloads from `<output>/models`) the route zoo of [`~hf_uq.evaluation.routes`] for every
seed, predicts every scored split with every route, measures the budget of seed 0's routes, scores everything with
[`~hf_uq.evaluation.protocol.build_results`], and writes the output folder:

```
<output>/
  results.json                 every number, with intervals (docs/results_format.md)
  predictions/<route>/seed<k>.npz
  report.md, report.html, plots/*.png
  models/seed<k>/<route>/      save_pretrained + image processor + README.md (the uncertainty model card)
  models/seed<k>/members/      the teacher's members (training cache)
```

Training, the per-seed predictions and the scoring run in a `spawn` process pool (`workers` processes, one torch
thread each); the budget is measured in this process, on one thread, while the workers idle. The budget is that of
the first seed's models only (`settings["budget_note"]` says so).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .routes import (
    DEFAULT_ZOO,
    HEAVY_FAMILIES,
    PER_SEED_EXTRA,
    QUICK_ZOO,
    ZooConfig,
    build_routes,
    digits_benchmark,
    evaluate_seed,
    plan_training,
)
from .zoo_training import Task, filtered_stderr, is_cached, run_tasks, train_model, worker_pool

__all__ = ["DEFAULT_BOOTSTRAP", "DEFAULT_OUTPUT", "QUICK_BOOTSTRAP", "run_benchmark"]

#: Default output folder of `hf-uq benchmark`.
DEFAULT_OUTPUT = "hf_uq_benchmark"
#: Bootstrap resamples per interval of the full run and of `--quick`.
DEFAULT_BOOTSTRAP = 1000
QUICK_BOOTSTRAP = 200
#: The route every cost is relative to, and the route the fidelity is measured against.
REFERENCE, TEACHER = "single", "deep ensemble"


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"--seeds must list at least one seed, got {seeds!r}")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1_000_000:
            raise ValueError(f"--seeds must be integers in [0, 1000000), got {seed!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must be distinct, got {list(seeds)}")
    return list(seeds)


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """No transformers / datasets progress bars or warnings while the benchmark draws its own bars."""
    import datasets
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    datasets_bars = datasets.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if datasets_bars:
            datasets.enable_progress_bars()


def _join_parts(seed: int, parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One seed's `evaluate_seed` results (several parts, each some of the routes) as one, in display order."""
    predictions = {k: v for part in parts for k, v in part["predictions"].items()}
    meta = {k: v for part in parts for k, v in part["meta"].items()}
    names = [name for name in parts[0]["order"] if name in meta]
    return {"seed": seed, "seconds": sum(part["seconds"] for part in parts),
            "predictions": {n: predictions[n] for n in names}, "meta": {n: meta[n] for n in names}}


def _merge_meta(per_seed: list[Mapping[str, Any]], seeds: list[int]) -> dict[str, dict[str, Any]]:
    """The `meta` of `build_results`: per-seed facts listed over seeds, model folders relative to the output."""
    meta = {}
    for name, first in per_seed[0]["meta"].items():
        extra = {key: value for key, value in first["extra"].items() if key not in PER_SEED_EXTRA}
        for key in PER_SEED_EXTRA:
            if key in first["extra"]:
                extra[key] = [run["meta"][name]["extra"][key] for run in per_seed]
        meta[name] = {
            "family": first["family"], "knob": first["knob"], "quantization": first["quantization"], "extra": extra,
            "models": {str(seed): f"models/seed{seed}/{run['meta'][name]['folder']}"
                       for seed, run in zip(seeds, per_seed, strict=True)},
        }
    return meta


def _score_chunk(payload: Mapping[str, Any]) -> dict[str, Any]:
    """`build_results` of some of the routes (always with the teacher and the reference); a worker-process task."""
    from .protocol import build_results

    return build_results(payload["predictions"], payload["budgets"], payload["meta"], **payload["options"])


def _score(
    predictions: Mapping[str, Any], budgets: Mapping[str, Any], meta: Mapping[str, Any], options: Mapping[str, Any],
    pool: Any, workers: int, progress: bool,
) -> dict[str, Any]:
    """[`~hf_uq.evaluation.protocol.build_results`], its routes scored in `workers` parallel chunks.

    Every chunk holds the teacher and the reference (fidelity and relative costs need them) plus a share of the
    other routes; every route's numbers depend only on its own predictions and the teacher's (each bootstrap is
    seeded), so the merged document equals a single call's.
    """
    names = list(predictions)
    others = [n for n in names if n not in (REFERENCE, TEACHER)]
    chunks = [others[i::workers] for i in range(workers) if others[i::workers]] or [[]]
    tasks = []
    for i, chunk in enumerate(chunks):
        keep = [n for n in names if n in (REFERENCE, TEACHER) or n in chunk]
        payload = {"predictions": {n: predictions[n] for n in keep}, "budgets": {n: budgets[n] for n in keep},
                   "meta": {n: meta[n] for n in keep}, "options": dict(options)}
        tasks.append(Task(f"score/{i}", _score_chunk, payload, bar="score", label=f"{len(keep)} routes"))
    documents = run_tasks(tasks, pool, progress=progress,
                          bars={"score": f"scoring {len(names)} routes ({options['bootstrap']} bootstrap resamples)"})
    entries = {entry["name"]: entry for document in documents.values() for entry in document["routes"]}
    results = dict(documents["score/0"])
    results["routes"] = [entries[name] for name in names]
    return results


def run_benchmark(
    output: str | os.PathLike = DEFAULT_OUTPUT,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    quick: bool = False,
    budget: str | Mapping[str, float] | None = None,
    bootstrap: int | None = None,
    workers: int = 2,
    command: str | Sequence[str] | None = None,
    zoo: ZooConfig | None = None,
    report: bool = True,
    cards: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the embedded benchmark and write `output` (see the module docstring).

    Models already in `<output>/models` that were trained with the same recipe are reused, so a second run only
    re-evaluates (its `timings["models_trained"]` is 0).

    Args:
        output (`str` or `os.PathLike`, *optional*, defaults to `"hf_uq_benchmark"`):
            The folder to write (created; an existing one is updated in place).
        seeds (`Sequence[int]`, *optional*, defaults to `(0, 1, 2)`):
            Training seeds (each also seeds its data split); the budget is measured on the first seed's models.
        quick (`bool`, *optional*, defaults to `False`):
            The small configuration [`QUICK_ZOO`] (every route family, smaller sweeps, fewer epochs) and
            `QUICK_BOOTSTRAP` resamples: about a minute on 2 cores with one seed.
        budget (`str` or `Mapping[str, float]`, *optional*):
            `"memory=1.2,latency=1.5"` (either or both): marks the routes within these multiples of the single
            model's peak memory and P99 latency.
        bootstrap (`int`, *optional*):
            Bootstrap resamples per 95% interval; defaults to 1000 (200 with `quick`); 0 for estimates only.
        workers (`int`, *optional*, defaults to 2):
            Processes that train models and predict seeds (one torch thread each).
        command (`str` or `Sequence[str]`, *optional*):
            The command line recorded in `results.json`; defaults to the equivalent `hf-uq benchmark` call.
        zoo ([`ZooConfig`], *optional*):
            Overrides the zoo settings of `quick`.
        report (`bool`, *optional*, defaults to `True`):
            Write `report.md`, `report.html` and `plots/`.
        cards (`bool`, *optional*, defaults to `True`):
            Write an uncertainty model card (README.md) into every route's model folder.
        progress (`bool`, *optional*, defaults to `True`):
            Show progress bars.

    Returns:
        `dict[str, Any]`: the results document as written to `results.json`, whose extra `timings` key holds the
        seconds spent per stage and the number of models trained and reused.
    """
    from .protocol import measure_budgets, parse_budget
    from .results_io import save_predictions, write_results

    start = time.perf_counter()
    seeds = _check_seeds(list(seeds))
    _check_int("--workers", workers, 1)
    bootstrap = (QUICK_BOOTSTRAP if quick else DEFAULT_BOOTSTRAP) if bootstrap is None else bootstrap
    _check_int("--bootstrap", bootstrap, 0)
    limits = parse_budget(budget) if isinstance(budget, str) else (dict(budget) if budget is not None else None)
    zoo = zoo or (QUICK_ZOO if quick else DEFAULT_ZOO)
    output = os.path.abspath(os.fspath(output))
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"--output {output} is a file; give a folder")
    models_dir = os.path.join(output, "models")
    if command is None:
        command = ["hf-uq", "benchmark", "--output", os.fspath(output)] + (["--quick"] if quick else [])

    with _quiet_libraries(), worker_pool(workers) as pool:
        # 1. train what is not cached, then build and predict every seed's routes, in the process pool
        jobs = plan_training(zoo, seeds, models_dir)
        cached = {job.key for job in jobs if is_cached(job.path, job.recipe)}
        todo = [job for job in jobs if job.key not in cached]
        for job in todo:
            os.makedirs(os.path.dirname(job.path), exist_ok=True)
        tasks = [Task(job.key, train_model, job, job.deps, "train", job.label) for job in todo]
        evaluations = []
        for seed in seeds:
            deps = tuple(job.key for job in jobs if job.recipe["seed"] == seed)
            for part, (exclude, save) in enumerate(((False, False), (True, True))):  # the heavy routes, the rest
                key = f"evaluate/seed{seed}/{part}"
                payload = {"zoo": zoo.to_dict(), "seed": seed, "seed_dir": os.path.join(models_dir, f"seed{seed}"),
                           "families": list(HEAVY_FAMILIES), "exclude": exclude, "save": save}
                tasks.append(Task(key, evaluate_seed, payload, deps, "predict", f"seed {seed} part {part + 1}/2"))
                evaluations.append((seed, key))
        done = run_tasks(tasks, pool, done=cached, progress=progress,
                         bars={"train": f"training {len(todo)} models ({len(cached)} cached)",
                               "predict": f"building and predicting the routes of {len(seeds)} seed(s)"})
        per_seed = [_join_parts(seed, [done[key] for s, key in evaluations if s == seed]) for seed in seeds]
        evaluated = time.perf_counter()

        # 2. the budget of the first seed's routes, measured here while the workers idle (1 thread, interleaved)
        benchmark = digits_benchmark(zoo, seeds[0])
        with filtered_stderr(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the workers met the same fitting and quantization warnings
            routes = build_routes(zoo, seeds[0], os.path.join(models_dir, f"seed{seeds[0]}"),
                                  benchmark["validation"], save=False)
            budgets = measure_budgets([r.spec for r in routes], benchmark["test"], batch_sizes=(1, 32),
                                      num_threads=1, repeats=zoo.latency_repeats)
        del routes
        measured = time.perf_counter()

        # 3. score (the routes split between the workers), write results.json and the predictions
        names = list(per_seed[0]["predictions"])
        predictions = {name: [run["predictions"][name] for run in per_seed] for name in names}
        data_info = {
            "name": "digits (embedded)", "labels": [str(label) for label in benchmark["test"].features["label"].names],
            "calibration_split": "validation",
            "num_samples": {s: len(benchmark[s]) for s in ("train", "validation")},
        }
        settings = {
            "quick": quick, "workers": workers, "zoo": zoo.to_dict(), "budget_seed": seeds[0],
            "budget_note": f"budgets are measured on seed {seeds[0]}'s models only (latency on 1 thread, "
                           f"{zoo.latency_repeats} timed forwards per route and batch size, interleaved)",
        }
        options = dict(
            seeds=seeds, reference=REFERENCE, teacher=TEACHER, id_split="test",
            ood_splits=[s for s in ("ood_near", "ood_far") if s in benchmark],
            shift_splits=[s for s in benchmark if s.startswith("shift_")], bootstrap=bootstrap, budget_limits=limits,
            command=command, data_info=data_info, settings_extra=settings,
        )
        results = _score(predictions, budgets, _merge_meta(per_seed, seeds), options, pool, workers, progress)
        save_predictions(os.path.join(output, "predictions"), predictions, seeds=seeds)
        write_results(results, output)
        scored = time.perf_counter()

        # 4. the report and a card per saved route model
        if report:
            from .report import write_report

            write_report(results, output, predictions)
        if cards:
            from ..hub import write_model_card

            plots = os.path.join(output, "plots") if report else None
            for route in results["routes"]:
                for folder in route["models"].values():
                    write_model_card(os.path.join(output, folder), results, route["name"], plots_dir=plots)
    done_time = time.perf_counter()
    trained = [done[job.key] for job in todo]
    results["timings"] = {
        "total_s": done_time - start,
        "training_and_prediction_s": evaluated - start,
        "training_cpu_s": sum(r["seconds"] for r in trained),
        "training_s_by_model": {r["key"]: r["seconds"] for r in trained},
        "prediction_cpu_s": sum(run["seconds"] for run in per_seed),
        "budget_s": measured - evaluated,
        "scoring_s": scored - measured,
        "report_s": done_time - scored,
        "models_trained": len(trained),
        "models_cached": len(cached),
        "workers": workers,
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    write_results(results, output)
    return results
