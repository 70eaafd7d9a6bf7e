"""BatchEnsembleViT on the embedded digits: full and latent BatchEnsembles next to the single ViT and a 4-member
deep ensemble, over several seeds, with bootstrap intervals and relative cost.

    python benchmarks/bench_digits_batch_ensemble.py                           # seeds 0 1 2, ~10-15 min, 2 cores
    python benchmarks/bench_digits_batch_ensemble.py --cache /tmp/hf_uq_be     # keep / reuse the trained models
    python benchmarks/bench_digits_batch_ensemble.py --seeds 0 --bootstrap 200 --epochs 5 --finetune-epochs 2

For every seed, on `load_digits_benchmark(seed)`:

- **single ViT**: `tiny_vit` (4 blocks, width 64) trained `--epochs` epochs with `fit_classifier`;
- **deep ensemble**: `DeepEnsembleForImageClassification` of 4 such ViTs (the single ViT is member 0; the others
  differ by initialization and data-order seed);
- **BE full**: `BatchEnsembleViTForImageClassification.from_vit(single, 4, fast_weight_init="normal")` (every
  block and the head; fast weights N(1, 0.5^2), so members start as perturbations of the trained ViT), fine-tuned
  `--finetune-epochs` epochs with `fit_classifier` (the stock Trainer);
- **BE last 2**: the latent ensemble `from_vit(single, 4, ensemble_layers=[-2, -1])` with the default
  random-sign fast weights (only the last two blocks and the head are re-drawn; the first two keep the ViT's
  features), fine-tuned the same way.

Metrics (`hf_uq.evaluation.score_pooled`: mean over seeds, 95% bootstrap intervals resampling each seed's rows):
accuracy, NLL, ECE, AURC (x100) and SAC@98 on the clean test split and on the nine covariate-shift splits pooled
(the clean split has only a handful of errors per seed), and OOD AUROC of the model's uncertainty (1 - max p for
the ViT, predictive entropy for the ensembles) against `ood_near` (digits 8-9) and `ood_far` (photo patches).
Cost relative to the single ViT: parameters, weight bytes and FLOPs per image. Training runs in `--workers`
processes with one thread each; trained models are saved to `--cache` (a temporary folder unless given).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import torch
from datasets import concatenate_datasets

from hf_uq.data import SHIFT_SPLITS, load_digits_benchmark
from hf_uq.evaluation import (
    count_parameters,
    flops_per_image,
    format_interval,
    predict,
    score_pooled,
    weight_bytes,
)
from hf_uq.models.batch_ensemble_vit import BatchEnsembleViTForImageClassification
from hf_uq.models.deep_ensemble import DeepEnsembleForImageClassification
from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor
from hf_uq.training import fit_classifier

ROUTES = ("single ViT", "deep ensemble", "BE full", "BE last 2")
MEMBERS = 4


def _path(cache: str, seed: int, name: str) -> str:
    return os.path.join(cache, f"seed{seed}", name)


def _jobs(args: argparse.Namespace, cache: str) -> tuple[list[dict], list[dict]]:
    """Phase 1: the ViTs (members of the deep ensemble; member 0 is the single ViT). Phase 2: the BatchEnsembles."""
    vits, batch_ensembles = [], []
    for seed in args.seeds:
        for member in range(MEMBERS):
            vits.append({"kind": "vit", "seed": seed, "model_seed": 1000 * seed + member, "epochs": args.epochs,
                         "path": _path(cache, seed, f"vit_m{member}_e{args.epochs:g}")})
        source = vits[-MEMBERS]["path"]
        for kind, layers, init in (("be_full", None, "normal"), ("be_last2", [-2, -1], "random_sign")):
            batch_ensembles.append({
                "kind": kind, "seed": seed, "model_seed": 1000 * seed, "epochs": args.finetune_epochs,
                "source": source, "layers": layers, "init": init,
                "path": _path(cache, seed, f"{kind}_e{args.epochs:g}_ft{args.finetune_epochs:g}"),
            })
    return vits, batch_ensembles


def _train(job: dict) -> tuple[str, float]:
    """Train one model and save it to `job["path"]` (in a worker process, one thread)."""
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    bench = load_digits_benchmark(job["seed"], include_ood=False, shifts=())
    start = time.perf_counter()
    if job["kind"] == "vit":
        model = tiny_vit(seed=job["model_seed"])
    else:
        torch.manual_seed(job["model_seed"])
        model = BatchEnsembleViTForImageClassification.from_vit(
            job["source"], MEMBERS, ensemble_layers=job["layers"], fast_weight_init=job["init"]
        )
    trained = fit_classifier(model, bench, tiny_vit_image_processor(), epochs=job["epochs"],
                             seed=job["model_seed"], verbose=False, num_threads=1)
    trained.save_pretrained(job["path"] + ".tmp")
    os.replace(job["path"] + ".tmp", job["path"])
    return job["path"], time.perf_counter() - start


def train_all(jobs: list[dict], workers: int) -> dict[str, float]:
    todo = [job for job in jobs if not os.path.isdir(job["path"])]
    seconds = {}
    if not todo:
        return seconds
    for job in todo:
        os.makedirs(os.path.dirname(job["path"]), exist_ok=True)
        shutil.rmtree(job["path"] + ".tmp", ignore_errors=True)
    context = multiprocessing.get_context("spawn")  # no fork after torch has started its threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for path, elapsed in pool.map(_train, todo):
            seconds[path] = elapsed
            print(f"  trained {os.path.relpath(path, os.path.dirname(os.path.dirname(path)))} in {elapsed:.0f} s",
                  flush=True)
    return seconds


def _load(path: str):
    from transformers import AutoModelForImageClassification

    return AutoModelForImageClassification.from_pretrained(path).eval()


def predict_all(args: argparse.Namespace, vits: list[dict], batch_ensembles: list[dict]) -> dict:
    """predictions[route][split] = list over seeds of `Predictions`; also the models of the first seed."""
    processor = tiny_vit_image_processor()
    predictions = {route: {} for route in ROUTES}
    first = {}
    for seed in args.seeds:
        bench = load_digits_benchmark(seed)
        splits = {"test": bench["test"], "shift": concatenate_datasets([bench[s] for s in SHIFT_SPLITS]),
                  "ood_near": bench["ood_near"], "ood_far": bench["ood_far"]}
        members = [_load(job["path"]) for job in vits if job["seed"] == seed]
        be = {job["kind"]: _load(job["path"]) for job in batch_ensembles if job["seed"] == seed}
        models = {
            "single ViT": members[0],
            "deep ensemble": DeepEnsembleForImageClassification.from_members(members).eval(),
            "BE full": be["be_full"],
            "BE last 2": be["be_last2"],
        }
        first = first or models
        for route, model in models.items():
            for split, data in splits.items():
                predictions[route].setdefault(split, []).append(
                    predict(model, data, processor, progress=False, num_threads=args.threads)
                )
    return predictions, first


def cost_table(models: dict) -> None:
    example = torch.zeros(1, 3, 16, 16)
    single = models["single ViT"]
    base = count_parameters(single), weight_bytes(single), flops_per_image(single, example)
    print(f"\n{'cost vs single ViT':18s} {'params':>8s} {'weights':>8s} {'FLOPs':>8s}")
    for route, model in models.items():
        ratios = (count_parameters(model) / base[0], weight_bytes(model) / base[1],
                  flops_per_image(model, example) / base[2])
        print(f"{route:18s} " + " ".join(f"{r:>7.3f}x" for r in ratios))


def metric_table(title: str, scores: dict, columns: list[tuple[str, str, float]]) -> None:
    cells = {route: [format_interval(s[key], scale, 3 if scale == 1 else 2) for _, key, scale in columns]
             for route, s in scores.items()}
    widths = [max(len(name), *(len(c[j]) for c in cells.values())) for j, (name, _, _) in enumerate(columns)]
    print(f"\n{title}")
    print(f"{'':15s} " + "  ".join(f"{name:>{w}s}" for (name, _, _), w in zip(columns, widths, strict=True)))
    for route, row in cells.items():
        print(f"{route:15s} " + "  ".join(f"{c:>{w}s}" for c, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=float, default=20, help="training epochs of every ViT (default 20)")
    parser.add_argument("--finetune-epochs", type=float, default=8, help="BatchEnsemble fine-tuning (default 8)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="training processes (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for prediction (default 1)")
    parser.add_argument("--cache", default=None, help="folder for the trained models (default: temporary)")
    args = parser.parse_args()
    start = time.perf_counter()
    cache = args.cache or tempfile.mkdtemp(prefix="hf_uq_bench_be_")
    try:
        vits, batch_ensembles = _jobs(args, cache)
        print(f"training {len(vits)} ViTs, then {len(batch_ensembles)} BatchEnsemble fine-tunes ({args.workers} workers)")
        seconds = train_all(vits, args.workers)
        seconds.update(train_all(batch_ensembles, args.workers))
        predictions, models = predict_all(args, vits, batch_ensembles)
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    if seconds:
        per_route = {"single ViT": [j for j in vits if j["path"].rpartition("_m")[2].startswith("0_")],
                     "BE full": [j for j in batch_ensembles if j["kind"] == "be_full"],
                     "BE last 2": [j for j in batch_ensembles if j["kind"] == "be_last2"]}
        print("mean training seconds per seed (1 thread, busy machine): " + ", ".join(
            f"{route} {sum(seconds.get(j['path'], float('nan')) for j in jobs) / len(jobs):.0f}"
            for route, jobs in per_route.items()) + " (BE times are the fine-tuning on top of the single ViT)")

    print(f"\nseeds {args.seeds}; ViTs {args.epochs:g} epochs, BatchEnsembles +{args.finetune_epochs:g} epochs of "
          f"fine-tuning; {MEMBERS} members; means over seeds with 95% bootstrap intervals ({args.bootstrap} resamples)")
    cost_table(models)
    test = {route: score_pooled(p["test"], ood={"near": p["ood_near"], "far": p["ood_far"]},
                                bootstrap=args.bootstrap) for route, p in predictions.items()}
    shift = {route: score_pooled(p["shift"], bootstrap=args.bootstrap) for route, p in predictions.items()}
    id_columns = [("accuracy", "accuracy", 1.0), ("NLL", "nll", 1.0), ("ECE", "ece", 1.0),
                  ("AURC x100", "aurc", 100.0), ("SAC@98", "sac", 1.0)]
    metric_table("clean test split (433 images per seed)", test, id_columns)
    metric_table("OOD detection (AUROC of the uncertainty; in-distribution = test split)", test,
                 [("near (digits 8-9)", "near/auroc", 1.0), ("far (photo patches)", "far/auroc", 1.0),
                  ("FPR@95 near", "near/fpr_at_95", 1.0)])
    metric_table("covariate shift (9 corruption splits pooled)", shift, id_columns)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
