"""Ensemble Distribution Distillation on the embedded digits: does one Dirichlet student keep the ensemble's
uncertainty?

    python benchmarks/bench_digits_distillation.py                          # seeds 0 1 2, ~10-25 min on 2 cores
    python benchmarks/bench_digits_distillation.py --cache /tmp/hf_uq_edd   # keep / reuse the trained models
    python benchmarks/bench_digits_distillation.py --seeds 0 --bootstrap 200  # a quick look

For every seed, on `load_digits_benchmark(seed)`:

- **teacher**: a deep ensemble of 5 `tiny_vit` members (seeds `1000 * seed + m`, `fit_classifier`, 30 epochs);
- **single**: member 0 alone;
- **EnD^2 student**: a `DirichletStudentForImageClassification` with a fresh `tiny_vit` backbone (same size as a
  member: one forward of one member at inference), trained by `EnsembleDistillationTrainer` with the Dirichlet NLL
  of the 5 members' predictions, temperature annealed from `--temperature` to 1 over the first half of training;
- **mean-KL student**: the same student trained by classic distillation of the ensemble's mean prediction.

Both students see the training split plus `--extra` unlabelled inputs per training image, built from the training
images only (no test or OOD data): *mixup* of two training digits of different classes, and *augmented* digits
(random rotation, shift, noise and erased patches). The teacher's members disagree on such inputs, and
distribution distillation can only learn the ensemble's diversity where it sees some (Malinin et al. 2020, section
on "auxiliary data"); on the clean training digits the members agree almost perfectly. `--extra 0` trains on the
training split alone.

Reported (mean over seeds, 95% percentile bootstrap intervals stratified by seed, `hf_uq.evaluation.score_pooled`):
accuracy, NLL, ECE, AURC, SAC@98 on the clean test split and on the nine covariate-shift splits pooled, and OOD
AUROC (near: digits 8/9, far: photo patches) of each model's default `uncertainty` (total predictive entropy for
the teacher and the students, 1 - max p for the single model). **Fidelity**: Spearman correlation
(`hf_uq.functional.fidelity`) between the student's epistemic uncertainty and the teacher's mutual information on
test + ood_near + ood_far, per seed (target >= 0.7). **Latency**: the student's P50 over its bare backbone's
(a `ViTForImageClassification`; the same module, so only the Dirichlet head differs), interleaved in one run on one
thread (`hf_uq.evaluation.compare_latency`; target <= 1.05), with the median over rounds of the paired ratio next to
it. Two backbones: the trained digits student (a 0.14M-parameter ViT whose forward is a few milliseconds, so the
head's ~15 small-tensor operations, a fixed ~0.1-0.5 ms depending on machine load, weigh several percent), and a
ViT-Tiny-shaped student (hidden 192, 12 layers, 32x32 inputs, random weights: latency does not depend on them), the
size at which `benchmarks/bench_duo.py` measures too.

Models are trained in `--workers` processes with one thread each and saved to `--cache` (a temporary folder,
deleted at the end, unless given); nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch
from datasets import concatenate_datasets
from tqdm.auto import tqdm

import hf_uq
from hf_uq.data import OOD_SPLITS, SHIFT_SPLITS, load_digits_benchmark
from hf_uq.evaluation import compare_latency, format_interval, iter_batches, predict, score_pooled
from hf_uq.functional import fidelity
from hf_uq.models.dirichlet_student import DirichletStudent
from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor
from hf_uq.training import fit_classifier

MODELS = ("teacher", "EnD^2 student", "mean-KL student", "single")
STUDENTS = {"EnD^2 student": "dirichlet_nll", "mean-KL student": "mean_kl"}


# ------------------------------------------------------------------------------------------ data


def split_tensors(split) -> tuple[torch.Tensor, torch.Tensor]:
    """(pixel_values (N, 3, 16, 16), labels (N,)) of a digits split, preprocessed for `tiny_vit`."""
    batches = list(iter_batches(split, tiny_vit_image_processor(), batch_size=512))
    return torch.cat([b["pixel_values"] for b in batches]), torch.cat([b["labels"] for b in batches])


def _mixup(pixels, labels, n, generator):
    """Two training digits of different classes, blended with weight ~ U(0.3, 0.7)."""
    first = torch.randint(len(pixels), (n,), generator=generator)
    second = torch.randint(len(pixels), (n,), generator=generator)
    same = labels[first] == labels[second]
    second[same] = (second[same] + torch.randint(1, len(pixels), (int(same.sum()),), generator=generator)) % len(pixels)
    weight = 0.3 + 0.4 * torch.rand(n, 1, 1, 1, generator=generator)
    return weight * pixels[first] + (1 - weight) * pixels[second]


def _augment(pixels, labels, n, generator):
    """A training digit rotated (up to 40 degrees), shifted (up to 3 px), noised, and with one 6x6 patch erased
    with probability 1/2."""
    source = pixels[torch.randint(len(pixels), (n,), generator=generator)]
    angle = (torch.rand(n, generator=generator) * 2 - 1) * math.radians(40)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 1], theta[:, 1, 0], theta[:, 1, 1] = angle.cos(), -angle.sin(), angle.sin(), angle.cos()
    theta[:, :, 2] = (torch.rand(n, 2, generator=generator) * 2 - 1) * (3 / 8)
    background = pixels.amin()  # the normalized value of a blank pixel
    grid = torch.nn.functional.affine_grid(theta, list(source.shape), align_corners=False)
    moved = torch.nn.functional.grid_sample(source - background, grid, align_corners=False) + background
    moved = moved + 0.3 * torch.randn(moved.shape, generator=generator)
    for i in torch.nonzero(torch.rand(n, generator=generator) < 0.5).flatten().tolist():
        y, x = torch.randint(0, 11, (2,), generator=generator).tolist()
        moved[i, :, y : y + 6, x : x + 6] = background
    return moved


def _scramble(pixels, labels, n, generator):
    """A training digit cut into its 16 patches of 4x4 pixels (the ViT's patches), shuffled: digit strokes
    without a digit's layout."""
    source = pixels[torch.randint(len(pixels), (n,), generator=generator)]
    patches = source.unfold(2, 4, 4).unfold(3, 4, 4).reshape(n, 3, 16, 4, 4)
    order = torch.argsort(torch.rand(n, 16, generator=generator), dim=1)
    patches = patches[torch.arange(n)[:, None], :, order].permute(0, 2, 1, 3, 4)  # (n, 3, 16, 4, 4)
    return patches.reshape(n, 3, 4, 4, 4, 4).permute(0, 1, 2, 4, 3, 5).reshape(n, 3, 16, 16)


EXTRA_KINDS = {"mixup": _mixup, "augment": _augment, "scramble": _scramble}


def extra_inputs(
    pixels: torch.Tensor, labels: torch.Tensor, per_image: float, seed: int, kinds: tuple[str, ...] = ("mixup", "augment")
) -> torch.Tensor:
    """`per_image * len(pixels)` unlabelled inputs derived from the training images alone, split evenly between
    `kinds` (see `EXTRA_KINDS`)."""
    n = int(round(per_image * len(pixels)))
    generator = torch.Generator().manual_seed(10_000 + seed)
    counts = [n // len(kinds) + (i < n % len(kinds)) for i in range(len(kinds))]
    parts = [EXTRA_KINDS[kind](pixels, labels, count, generator)
             for kind, count in zip(kinds, counts, strict=True) if count > 0]
    return torch.cat([pixels[:0], *parts])


class Rows(torch.utils.data.Dataset):
    """In-memory `{"pixel_values", "labels"}` rows (-100 for unlabelled ones)."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor):
        self.pixels, self.labels = pixels, labels

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixels[i], "labels": self.labels[i]}


# ------------------------------------------------------------------------------------------ training


def _member_path(cache: str, seed: int, member: int, epochs: float) -> str:
    return os.path.join(cache, f"seed{seed}", f"vit_m{member}_e{epochs:g}")


def _student_tag(args: argparse.Namespace, loss: str) -> str:
    kinds = "" if tuple(args.extra_kinds) == ("mixup", "augment") else "_" + "-".join(args.extra_kinds)
    return (f"student_{loss}_x{args.extra:g}{kinds}_e{args.student_epochs:g}_t{args.temperature:g}_"
            f"s{args.smoothing:g}_lr{args.student_lr:g}")


def _train_member(job: dict) -> tuple[str, float]:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    bench = load_digits_benchmark(job["seed"], include_ood=False, shifts=())
    start = time.perf_counter()
    model = fit_classifier(tiny_vit(seed=job["model_seed"]), bench, tiny_vit_image_processor(), epochs=job["epochs"],
                           seed=job["model_seed"], verbose=False, num_threads=1)
    model.save_pretrained(job["path"] + ".tmp")
    os.replace(job["path"] + ".tmp", job["path"])
    return job["path"], time.perf_counter() - start


def _train_student(job: dict) -> tuple[str, float]:
    """Distill the seed's 5-member teacher into a fresh tiny-ViT Dirichlet student."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from transformers import AutoModelForImageClassification, PrinterCallback

    from hf_uq.trainer import EnsembleDistillationConfig, EnsembleDistillationTrainer

    seed = job["seed"]
    bench = load_digits_benchmark(seed, include_ood=False, shifts=())
    pixels, labels = split_tensors(bench["train"])
    extra = extra_inputs(pixels, labels, job["extra"], seed, tuple(job["extra_kinds"]))
    train = Rows(torch.cat([pixels, extra]), torch.cat([labels, torch.full((len(extra),), -100)]))
    members = [AutoModelForImageClassification.from_pretrained(p).eval() for p in job["members"]]
    student = DirichletStudent.from_backbone(tiny_vit(seed=1000 * seed + 777))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        args = EnsembleDistillationConfig(
            output_dir=scratch, distillation_loss=job["loss"], initial_temperature=job["temperature"],
            target_smoothing=job["smoothing"], num_train_epochs=job["epochs"], learning_rate=job["lr"],
            per_device_train_batch_size=64, per_device_eval_batch_size=256, weight_decay=0.05,
            lr_scheduler_type="cosine", warmup_steps=0.1, seed=seed, use_cpu=True, report_to="none",
            save_strategy="no", logging_strategy="no", disable_tqdm=True, teacher_batch_size=512,
        )
        trainer = EnsembleDistillationTrainer(model=student, teacher=members, args=args, train_dataset=train)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    student.save_pretrained(job["path"] + ".tmp")
    os.replace(job["path"] + ".tmp", job["path"])
    return job["path"], time.perf_counter() - start


def _run(jobs: list[dict], function, workers: int, desc: str) -> None:
    todo = [job for job in jobs if not os.path.isdir(job["path"])]
    if not todo:
        return
    for job in todo:
        os.makedirs(os.path.dirname(job["path"]), exist_ok=True)
        shutil.rmtree(job["path"] + ".tmp", ignore_errors=True)
    bar = tqdm(total=len(todo), desc=f"{desc}: {len(todo)} models", unit="model")
    context = multiprocessing.get_context("spawn")  # no fork after torch has started its threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for path, seconds in pool.map(function, todo):
            bar.set_postfix_str(f"{os.path.basename(path)}: {seconds:.0f}s")
            bar.update()
    bar.close()


def train_all(args: argparse.Namespace, cache: str) -> dict:
    members = {seed: [_member_path(cache, seed, m, args.epochs) for m in range(args.members)] for seed in args.seeds}
    _run([{"seed": seed, "model_seed": 1000 * seed + m, "epochs": args.epochs, "path": path}
          for seed in args.seeds for m, path in enumerate(members[seed])], _train_member, args.workers, "members")
    students = {(seed, loss): os.path.join(cache, f"seed{seed}", _student_tag(args, loss))
                for seed in args.seeds for loss in STUDENTS.values()}
    _run([{"seed": seed, "loss": loss, "path": path, "members": members[seed], "extra": args.extra,
           "extra_kinds": args.extra_kinds,
           "epochs": args.student_epochs, "lr": args.student_lr, "temperature": args.temperature,
           "smoothing": args.smoothing} for (seed, loss), path in students.items()],
         _train_student, args.workers, "students")
    return {"members": members, "students": students}


# ------------------------------------------------------------------------------------------ evaluation


def _load(path: str):
    from transformers import AutoModelForImageClassification

    return AutoModelForImageClassification.from_pretrained(path).eval()


def evaluate_seed(paths: dict, seed: int) -> dict:
    bench = load_digits_benchmark(seed)
    splits = {"test": bench["test"], "shift": concatenate_datasets([bench[s] for s in SHIFT_SPLITS])}
    splits.update({name: bench[name] for name in OOD_SPLITS})
    members = [_load(p) for p in paths["members"][seed]]
    models = {
        "teacher": hf_uq.DeepEnsembleForImageClassification.from_members(members).eval(),
        "EnD^2 student": _load(paths["students"][(seed, "dirichlet_nll")]),
        "mean-KL student": _load(paths["students"][(seed, "mean_kl")]),
        "single": members[0],
    }
    processor = tiny_vit_image_processor()
    predictions = {name: {split: predict(model, data, processor, batch_size=256, progress=False, num_threads=1)
                          for split, data in splits.items()} for name, model in models.items()}
    union = ("test", *OOD_SPLITS)
    teacher_mi = np.concatenate([predictions["teacher"][s].epistemic_uncertainty for s in union])
    student = predictions["EnD^2 student"]
    fid = {"epistemic vs MI": fidelity(np.concatenate([student[s].epistemic_uncertainty for s in union]), teacher_mi),
           "total vs total": fidelity(np.concatenate([student[s].total_uncertainty for s in union]),
                                      np.concatenate([predictions["teacher"][s].total_uncertainty for s in union]))}
    return {"predictions": predictions, "fidelity": fid, "student": models["EnD^2 student"]}


def latency(models: dict, repeats: dict) -> list[dict]:
    """Per student and batch size: P50 of the student and of its bare backbone (the same module), interleaved on
    one thread, and the median over rounds of the paired ratio student / backbone (each round times both back to
    back, so the paired ratio is robust to load changes between rounds on a shared machine)."""
    rows = []
    for name, (student, image_size) in models.items():
        for batch_size, n in repeats[name].items():
            pixel_values = torch.randn(batch_size, 3, image_size, image_size, generator=torch.Generator().manual_seed(0))
            stats = compare_latency({"backbone": student.backbone, "student": student}, pixel_values, warmup=5,
                                    repeats=n, threads=1)
            paired = np.median(np.asarray(stats["student"].times) / np.asarray(stats["backbone"].times))
            rows.append({"model": name, "batch": batch_size, "repeats": n, "backbone": stats["backbone"].p50,
                         "student": stats["student"].p50, "paired": float(paired)})
    return rows


def latency_models(trained_student) -> tuple[dict, dict]:
    """The trained digits student and a ViT-Tiny-shaped one, with the batch sizes and repeats to time them at."""
    shape = dict(image_size=32, hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768)
    vit_tiny = DirichletStudent.from_backbone(tiny_vit(seed=0, **shape)).eval()
    models = {"digits student (tiny ViT, 16x16)": (trained_student, 16), "ViT-Tiny shape (192x12, 32x32)": (vit_tiny, 32)}
    repeats = {"digits student (tiny ViT, 16x16)": {64: 300, 1: 300}, "ViT-Tiny shape (192x12, 32x32)": {8: 40, 1: 100}}
    return models, repeats


# ------------------------------------------------------------------------------------------ report

COLUMNS = [("accuracy", "accuracy", 1.0), ("NLL", "nll", 1.0), ("ECE", "ece", 1.0), ("AURC x100", "aurc", 100.0),
           ("SAC@98", "sac", 1.0)]
OOD_COLUMNS = [("OOD AUROC near", "ood_near/auroc", 1.0), ("OOD AUROC far", "ood_far/auroc", 1.0)]


def _table(title: str, scores: dict, columns: list) -> str:
    header = ["model"] + [c[0] for c in columns]
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, metrics in scores.items():
        cells = [name] + [format_interval(metrics[key], scale, 3 if scale == 1.0 else 2) for _, key, scale in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--epochs", type=float, default=30, help="epochs of each teacher member")
    parser.add_argument("--student-epochs", type=float, default=30)
    parser.add_argument("--student-lr", type=float, default=3e-3)
    parser.add_argument("--extra", type=float, default=4.0, help="unlabelled extra inputs per training image")
    parser.add_argument("--extra-kinds", nargs="+", default=["mixup", "augment"], choices=sorted(EXTRA_KINDS),
                        help="kinds of extra inputs, in equal shares")
    parser.add_argument("--temperature", type=float, default=2.5, help="initial distillation temperature")
    parser.add_argument("--smoothing", type=float, default=1e-4, help="central smoothing of the teacher targets")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--workers", type=int, default=2, help="training processes (one thread each)")
    parser.add_argument("--cache", default=None, help="folder to keep / reuse trained models (default: temporary)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(1)
    cache = args.cache or tempfile.mkdtemp(prefix="hf_uq_bench_edd_")
    try:
        paths = train_all(args, cache)
        trained = time.perf_counter()
        per_seed = [evaluate_seed(paths, seed) for seed in tqdm(args.seeds, desc="evaluating seeds")]
        timings = latency(*latency_models(per_seed[0]["student"]))
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    evaluated = time.perf_counter()

    preds = {name: {split: [s["predictions"][name][split] for s in per_seed] for split in ("test", "shift", *OOD_SPLITS)}
             for name in MODELS}
    test_scores, shift_scores = {}, {}
    for name in tqdm(MODELS, desc="bootstrap"):
        p = preds[name]
        test_scores[name] = score_pooled(p["test"], ood={s: p[s] for s in OOD_SPLITS}, bootstrap=args.bootstrap)
        shift_scores[name] = score_pooled(p["shift"], bootstrap=args.bootstrap)
    done = time.perf_counter()

    seeds = " ".join(str(s) for s in args.seeds)
    print(f"\n## Digits: ensemble distribution distillation (seeds {seeds}; mean over seeds, 95% bootstrap intervals, "
          f"{args.bootstrap} resamples stratified by seed)\n")
    print(f"Students: tiny ViT backbone, {args.student_epochs:g} epochs, lr {args.student_lr:g}, T0 {args.temperature:g} "
          f"(linear to 1 over half of training), smoothing {args.smoothing:g}, {args.extra:g} extra unlabelled "
          f"inputs per training image ({' + '.join(args.extra_kinds)} of training digits).\n")
    n_test = sum(len(p) for p in preds["single"]["test"])
    print(_table(f"Clean test ({n_test} samples over {len(args.seeds)} seeds) and OOD (near: digits 8/9, far: "
                 "photo patches); OOD score = each model's default `uncertainty`", test_scores, COLUMNS + OOD_COLUMNS))
    print()
    print(_table("Covariate shift: the 9 shift splits pooled", shift_scores, COLUMNS))
    fids = {key: [s["fidelity"][key] for s in per_seed] for key in per_seed[0]["fidelity"]}
    print("\nFidelity (Spearman, test + ood_near + ood_far, per seed; target >= 0.7 for epistemic vs MI):")
    for key, values in fids.items():
        print(f"- student {key}: " + ", ".join(f"{v:.3f}" for v in values) + f" (mean {np.mean(values):.3f}, "
              f"min {np.min(values):.3f})")
    gaps = {split: 100 * (test_scores['EnD^2 student'][f'{split}/auroc'].estimate
                          - test_scores['teacher'][f'{split}/auroc'].estimate) for split in OOD_SPLITS}
    print("OOD AUROC, student - teacher (points): " + ", ".join(f"{k} {v:+.1f}" for k, v in gaps.items())
          + " (target >= -3)")
    print("\nLatency, student / backbone (1 thread, interleaved; target <= 1.05):\n")
    print("| model | batch | rounds | P50 backbone [ms] | P50 student [ms] | ratio of P50s | median paired ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in timings:
        print(f"| {row['model']} | {row['batch']} | {row['repeats']} | {1e3 * row['backbone']:.3f} | "
              f"{1e3 * row['student']:.3f} | {row['student'] / row['backbone']:.3f} | {row['paired']:.3f} |")
    print(f"\n(load average at the end of the latency check: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"\nWall time: {done - start:.0f}s (training {trained - start:.0f}s, prediction + latency "
          f"{evaluated - trained:.0f}s, bootstrap {done - evaluated:.0f}s); torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, {args.workers} training workers.")
    return {"test": test_scores, "shift": shift_scores, "fidelity": fids, "ood_gap": gaps, "latency": timings}


if __name__ == "__main__":
    main()
