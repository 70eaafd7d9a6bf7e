"""The evidence table of issue 3: every single-model-cost route against the deep ensemble, on the embedded digits.

    python benchmarks/bench_digits_routes.py                       # seeds 0 1 2, ~10-15 min on 2 cores
    python benchmarks/bench_digits_routes.py --cache /tmp/hf_uq_bench   # keep / reuse the trained models
    python benchmarks/bench_digits_routes.py --seeds 0 --bootstrap 200  # a quick look

For every seed, on `load_digits_benchmark(seed)`:

- **deep ensemble**: 5 `tiny_vit` members differing by initialization and data-order seed;
- **single**: member 0;
- **single + TS**: member 0 with a temperature fit on the validation split (within [`--min-temperature`, 100]);
- **MC dropout**: member 0 with its dropout layers sampled 10 times (`tiny_vit` has `hidden_dropout_prob=0.1`);
- **Asymmetric Duo**: member 0 (large) + a `tiny_cnn` sidekick (small, 5-20% of the ViT's FLOPs, checked),
  both temperatures fit on the validation split (within [`--min-temperature`, 100]);
- **sidekick alone**: the small `tiny_cnn` by itself, for reference;
- **..., free fit**: TS and duo with the library's default bounds [0.01, 100], when `--min-temperature` > 0.01.

Why `--min-temperature 1` by default: the validation split has 144 images, and the duo's logit sum gets all
but 0-1 of them right. On (nearly) separable calibration data the NLL keeps falling as the temperatures go to 0,
so an unconstrained fit sharpens the fused logits ~50x and wrecks NLL and AURC on test and shift (the "free fit"
rows show it). Bounding the temperatures below by 1 lets the fit soften, never sharpen, the members' own logits.

Every route is evaluated on `test`, on the nine covariate-shift splits pooled (where errors are plentiful: the
clean test split has ~15 errors per seed) and against `ood_near` / `ood_far`. Metrics are the mean over seeds;
intervals are 95% percentile bootstrap intervals, resampling each seed's rows separately
(`hf_uq.evaluation.score_pooled`). The duo is then compared with its large member alone by a paired bootstrap
of the differences (`hf_uq.evaluation.score_difference`). FLOPs are counted by `hf_uq.evaluation.flops_per_image`
and given relative to the single model.

Models are trained in `--workers` processes with one thread each and saved to `--cache` (a temporary folder,
deleted at the end, unless given); nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import torch
from datasets import concatenate_datasets
from tqdm.auto import tqdm

import hf_uq
from hf_uq.data import OOD_SPLITS, SHIFT_SPLITS, load_digits_benchmark
from hf_uq.evaluation import (
    flops_per_image,
    format_interval,
    iter_batches,
    predict,
    score_difference,
    score_pooled,
)
from hf_uq.models.duo import DuoImageProcessor
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor
from hf_uq.training import fit_classifier

ROUTES = ("deep ensemble", "single", "single + TS", "MC dropout", "Asymmetric Duo", "sidekick alone")
#: The same fits with the library's default bounds [0.01, 100], shown when `--min-temperature` is above 0.01.
FREE_FIT_ROUTES = ("single + TS, free fit", "Asymmetric Duo, free fit")


# ------------------------------------------------------------------------------------------ training


def _member_seed(seed: int, member: int) -> int:
    return 1000 * seed + member


def _sidekick_tag(args: argparse.Namespace) -> str:
    channels = "-".join(str(c) for c in args.sidekick_channels)
    return f"cnn_c{channels}_s{args.sidekick_stem}_lr{args.sidekick_lr:g}_e{args.epochs:g}"


def _jobs(args: argparse.Namespace, cache: str) -> list[dict]:
    """Every model the run needs, with the folder it is (or will be) saved in."""
    jobs = []
    for seed in args.seeds:
        for member in range(args.members):
            jobs.append({"kind": "vit", "seed": seed, "model_seed": _member_seed(seed, member),
                         "path": os.path.join(cache, f"seed{seed}", f"vit_m{member}_e{args.epochs:g}")})
        jobs.append({"kind": "cnn", "seed": seed, "model_seed": _member_seed(seed, 500),
                     "path": os.path.join(cache, f"seed{seed}", _sidekick_tag(args)),
                     "channels": list(args.sidekick_channels), "stem": args.sidekick_stem, "lr": args.sidekick_lr})
    for job in jobs:
        job["epochs"] = args.epochs
    return jobs


def _train(job: dict) -> tuple[str, float, float]:
    """Train one model and save it to `job["path"]` (runs in a worker process, one thread)."""
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    bench = load_digits_benchmark(job["seed"], include_ood=False, shifts=())
    start = time.perf_counter()
    if job["kind"] == "vit":
        model, processor, lr = tiny_vit(seed=job["model_seed"]), tiny_vit_image_processor(), 3e-3
    else:
        model = tiny_cnn(seed=job["model_seed"], channels=tuple(job["channels"]), stem_width=job["stem"])
        processor, lr = tiny_cnn_image_processor(model), job["lr"]
    trained = fit_classifier(model, bench, processor, epochs=job["epochs"], learning_rate=lr,
                             seed=job["model_seed"], verbose=False, num_threads=1)
    accuracy = float(predict(trained, bench["validation"], processor, progress=False).correct.mean())
    trained.save_pretrained(job["path"] + ".tmp")
    os.replace(job["path"] + ".tmp", job["path"])
    return job["path"], time.perf_counter() - start, accuracy


def train_all(args: argparse.Namespace, cache: str) -> None:
    todo = [job for job in _jobs(args, cache) if not os.path.isdir(job["path"])]
    if not todo:
        return
    for job in todo:
        os.makedirs(os.path.dirname(job["path"]), exist_ok=True)
        shutil.rmtree(job["path"] + ".tmp", ignore_errors=True)
    bar = tqdm(total=len(todo), desc=f"training {len(todo)} models", unit="model")
    context = multiprocessing.get_context("spawn")  # no fork after torch has started its threads
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
        for path, seconds, accuracy in pool.map(_train, todo):
            bar.set_postfix_str(f"{os.path.basename(path)}: {seconds:.0f}s, val acc {accuracy:.3f}")
            bar.update()
    bar.close()


# ------------------------------------------------------------------------------------------ evaluation


def _load(path: str):
    from transformers import AutoModelForImageClassification

    return AutoModelForImageClassification.from_pretrained(path).eval()


def evaluate_seed(args: argparse.Namespace, cache: str, seed: int) -> dict:
    """Predictions of every route on test / shift / OOD, the fitted temperatures and the FLOPs, for one seed."""
    bench = load_digits_benchmark(seed)
    splits = {"test": bench["test"], "shift": concatenate_datasets([bench[s] for s in SHIFT_SPLITS])}
    splits.update({name: bench[name] for name in OOD_SPLITS})
    jobs = _jobs(args, cache)
    members = [_load(j["path"]) for j in jobs if j["kind"] == "vit" and j["seed"] == seed]
    sidekick = _load(next(j["path"] for j in jobs if j["kind"] == "cnn" and j["seed"] == seed))
    vit_proc, cnn_proc = tiny_vit_image_processor(), tiny_cnn_image_processor(sidekick)
    duo_proc = DuoImageProcessor.from_members(vit_proc, cnn_proc)

    def fitted(bounds: tuple[float, float]):
        ts = hf_uq.TemperatureScaledForImageClassification.from_model(members[0]).eval()
        ts.fit_temperature(iter_batches(bench["validation"], vit_proc, 256), bounds=bounds)
        duo = hf_uq.DuoForImageClassification.from_members(members[0], sidekick).eval()
        duo.fit_temperatures(iter_batches(bench["validation"], duo_proc, 256), bounds=bounds)
        return ts, duo

    ts, duo = fitted((args.min_temperature, 100.0))
    routes = {
        "deep ensemble": (hf_uq.DeepEnsembleForImageClassification.from_members(members).eval(), vit_proc),
        "single": (members[0], vit_proc),
        "single + TS": (ts, vit_proc),
        "MC dropout": (hf_uq.mc_dropout(members[0], num_samples=args.mc_samples, seed=seed), vit_proc),
        "Asymmetric Duo": (duo, duo_proc),
        "sidekick alone": (sidekick, cnn_proc),
    }
    temperatures = {"single + TS": [ts.config.temperature], "Asymmetric Duo": list(duo.config.temperatures)}
    if args.min_temperature > 0.01:
        free_ts, free_duo = fitted((0.01, 100.0))
        routes.update({FREE_FIT_ROUTES[0]: (free_ts, vit_proc), FREE_FIT_ROUTES[1]: (free_duo, duo_proc)})
        temperatures.update({FREE_FIT_ROUTES[0]: [free_ts.config.temperature],
                             FREE_FIT_ROUTES[1]: list(free_duo.config.temperatures)})
    # how separable the calibration split is: errors of the members and of the plain logit sum
    val = predict(duo, bench["validation"], duo_proc, progress=False, num_threads=1)
    large, small = val.member_logits
    errors = {"n": len(val), "large": int((large.argmax(1) != val.labels).sum()),
              "small": int((small.argmax(1) != val.labels).sum()),
              "sum": int(((large + small).argmax(1) != val.labels).sum())}
    example = next(iter_batches(bench["test"], vit_proc, 16))
    example_duo = next(iter_batches(bench["test"], duo_proc, 16))
    result = {"predictions": {}, "flops": {}, "temperatures": temperatures, "validation_errors": errors}
    for name, (model, processor) in routes.items():
        inputs = example_duo if processor is duo_proc else example
        inputs = {k: v for k, v in inputs.items() if k != "labels"}
        result["flops"][name] = flops_per_image(model, inputs)
        result["predictions"][name] = {
            split: predict(model, data, processor, batch_size=256, desc=f"seed {seed} {name} {split}", num_threads=1)
            for split, data in splits.items()
        }
    return result


# ------------------------------------------------------------------------------------------ report

COLUMNS = [("accuracy", "accuracy", 1.0), ("NLL", "nll", 1.0), ("ECE", "ece", 1.0), ("AURC x100", "aurc", 100.0),
           ("SAC@98", "sac", 1.0), ("CP-AUROC", "cp_auroc", 1.0)]
OOD_COLUMNS = [("OOD AUROC near", "ood_near/auroc", 1.0), ("OOD AUROC far", "ood_far/auroc", 1.0)]


def _table(title: str, scores: dict, flops: dict, columns: list) -> str:
    header = ["route", "FLOPs (x single)"] + [c[0] for c in columns]
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for route, metrics in scores.items():
        cells = [route, f"{flops[route] / flops['single']:.2f}"]
        cells += [format_interval(metrics[key], scale, 3 if scale == 1.0 else 2) for _, key, scale in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _verdict(diff, key: str, scale: float) -> str:
    est, low, high = (v * scale for v in diff[key])
    if high < 0:
        word = "duo better (interval below 0)"
    elif low > 0:
        word = "duo worse (interval above 0)"
    else:
        word = "no significant difference (interval contains 0)"
    return f"{est:+.4f} [{low:+.4f}, {high:+.4f}] -> {word}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--epochs", type=float, default=30)
    parser.add_argument("--mc-samples", type=int, default=10)
    parser.add_argument("--sidekick-channels", type=int, nargs=4, default=[8, 16, 32, 64])
    parser.add_argument("--sidekick-stem", type=int, default=4)
    parser.add_argument("--sidekick-lr", type=float, default=3e-3)
    parser.add_argument("--min-temperature", type=float, default=1.0,
                        help="lower bound of the temperatures fit on validation (TS and duo); 0.01 = library default")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--workers", type=int, default=2, help="training processes (one thread each)")
    parser.add_argument("--cache", default=None, help="folder to keep / reuse trained models (default: temporary)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    warnings.filterwarnings("ignore", category=UserWarning)
    # tiny models: torch's thread pool only adds overhead, and stalls when other jobs share the cores
    torch.set_num_threads(1)
    cache = args.cache or tempfile.mkdtemp(prefix="hf_uq_bench_routes_")
    try:
        train_all(args, cache)
        trained = time.perf_counter()
        per_seed = [evaluate_seed(args, cache, seed) for seed in tqdm(args.seeds, desc="evaluating seeds")]
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    evaluated = time.perf_counter()

    routes = list(per_seed[0]["predictions"])
    preds = {route: {split: [s["predictions"][route][split] for s in per_seed]
                     for split in ("test", "shift", *OOD_SPLITS)} for route in routes}
    flops = {route: per_seed[0]["flops"][route] for route in routes}
    test_scores, shift_scores = {}, {}
    for route in tqdm(routes, desc="bootstrap"):
        p = preds[route]
        test_scores[route] = score_pooled(p["test"], ood={s: p[s] for s in OOD_SPLITS}, bootstrap=args.bootstrap)
        shift_scores[route] = score_pooled(p["shift"], bootstrap=args.bootstrap)
    pairs = [("Asymmetric Duo", "single"), ("Asymmetric Duo", "single + TS")]
    if FREE_FIT_ROUTES[1] in preds:
        pairs.append((FREE_FIT_ROUTES[1], "single"))
    comparisons = {}
    for duo, other in pairs:
        for split in ("test", "shift"):
            comparisons[(duo, other, split)] = score_difference(
                preds[duo][split], preds[other][split], bootstrap=args.bootstrap)
    done = time.perf_counter()

    n_test = sum(len(p) for p in preds["single"]["test"])
    n_shift = sum(len(p) for p in preds["single"]["shift"])
    seeds = " ".join(str(s) for s in args.seeds)
    print(f"\n## Digits benchmark: routes vs deep ensemble (seeds {seeds}; mean over seeds, "
          f"95% bootstrap intervals, {args.bootstrap} resamples stratified by seed)\n")
    print(_table(f"Clean test ({n_test} samples over {len(args.seeds)} seeds) and OOD (near: digits 8/9, "
                 "far: photo patches)", test_scores, flops, COLUMNS + OOD_COLUMNS))
    print()
    print(_table(f"Covariate shift: the 9 shift splits pooled ({n_shift} samples over {len(args.seeds)} seeds)",
                 shift_scores, flops, COLUMNS))
    ratio = flops["sidekick alone"] / flops["single"]
    print(f"\nSidekick: tiny_cnn(channels={tuple(args.sidekick_channels)}, stem_width={args.sidekick_stem}), "
          f"{flops['sidekick alone']:,.0f} FLOPs/image = {100 * ratio:.1f}% of the ViT's {flops['single']:,.0f}.")
    print(f"Temperatures are fit on the validation split within [{args.min_temperature:g}, 100]"
          + (" (rows 'free fit': within the library default [0.01, 100])" if args.min_temperature > 0.01 else "")
          + ". Per seed:")
    for route in per_seed[0]["temperatures"]:
        values = ", ".join("(" + ", ".join(f"{t:.3g}" for t in s["temperatures"][route]) + ")" for s in per_seed)
        print(f"- {route}: {values}")
    errors = [s["validation_errors"] for s in per_seed]
    print("Validation errors per seed (of " + ", ".join(str(e["n"]) for e in errors) + "): large "
          + ", ".join(str(e["large"]) for e in errors) + "; small " + ", ".join(str(e["small"]) for e in errors)
          + "; logit sum z_large + z_small " + ", ".join(str(e["sum"]) for e in errors) + ".")
    print("\nDoes the Asymmetric Duo beat its large member alone? Paired bootstrap of duo - other (same rows), "
          "mean over seeds:\n")
    print("| duo | vs | split | NLL difference | AURC x100 difference |\n|---|---|---|---|---|")
    for (duo, other, split), diff in comparisons.items():
        print(f"| {duo} | {other} | {split} | {_verdict(diff, 'nll', 1.0)} | {_verdict(diff, 'aurc', 100.0)} |")
    for duo in dict.fromkeys(d for d, _, _ in comparisons):
        diffs = [comparisons[(duo, "single", split)][key] for split in ("test", "shift") for key in ("nll", "aurc")]
        verdict = ("yes, significantly (every interval below 0)" if all(d.high < 0 for d in diffs)
                   else "yes (point estimates)" if all(d.estimate < 0 for d in diffs) else "no")
        print(f"\n{duo} beats its large member alone on NLL and AURC, on test and on shift: {verdict}")
    cpu = sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
              for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(f"\nWall time: {done - start:.0f}s (training {trained - start:.0f}s, prediction {evaluated - trained:.0f}s, "
          f"bootstrap {done - evaluated:.0f}s); CPU time {cpu:.0f}s (this process and its training workers); "
          f"load average at the end {os.getloadavg()[0]:.1f}; torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{args.workers} training workers.")
    if args.cache:
        with open(os.path.join(args.cache, "last_run.json"), "w") as f:
            json.dump({"argv": sys.argv[1:], "wall_s": done - start}, f)


if __name__ == "__main__":
    main()
