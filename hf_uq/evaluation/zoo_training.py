"""Training the embedded route zoo of `hf-uq benchmark`: cached training jobs and a dependency-aware process pool.

A [`TrainJob`] is one model to train (a teacher member, a sidekick, a BatchEnsembleViT fine-tune or a Dirichlet
student), described by a JSON-able *recipe*. [`train_model`] trains it in a worker process and saves it with
`save_pretrained`, together with its image processor and the recipe (`hf_uq_recipe.json`); a folder whose recipe
equals the job's is reused as is ([`is_cached`]), so a re-run of the benchmark only re-evaluates, and changing a
setting (epochs, sizes, ...) retrains exactly the models it affects: a dependent job's recipe embeds the recipes of
the models it is built from.

[`run_tasks`] runs any functions with dependencies between them (training jobs, then per-seed evaluations) in a
[`worker_pool`] (`spawn` processes, one torch thread each), submitting each task as soon as the tasks it depends on
are done.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import torch

from ._budget_common import filtered_stderr

__all__ = [
    "RECIPE_FILE", "Task", "TrainJob", "filtered_stderr", "is_cached", "run_tasks", "train_model", "worker_pool",
]

#: The file in every trained model folder that records how it was trained (the cache key).
RECIPE_FILE = "hf_uq_recipe.json"


@dataclass(frozen=True)
class TrainJob:
    """
    One model of the zoo to train and save.

    Args:
        key (`str`):
            Unique name of the job, e.g. `"seed0/member3"`.
        path (`str`):
            The folder the trained model is saved in.
        recipe (`dict`):
            JSON-able description of the training: `kind` (`"vit"`, `"cnn"`, `"batch_ensemble"` or `"student"`),
            the data seed, the model seed, epochs, sizes, and the paths of the models it starts from (relative to
            the folder holding `path`).
        deps (`tuple[str, ...]`, *optional*):
            Keys of the jobs whose models this one needs.
        label (`str`, *optional*):
            Short text for the progress bar.
    """

    key: str
    path: str
    recipe: dict[str, Any]
    deps: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class Task:
    """A function call for [`run_tasks`]: `function(payload)` once the tasks named in `deps` are done."""

    key: str
    function: Callable[[Any], Any]
    payload: Any
    deps: tuple[str, ...] = ()
    bar: str = "train"
    label: str = ""


def _canonical(recipe: Mapping[str, Any]) -> str:
    return json.dumps(recipe, sort_keys=True, default=str)


def is_cached(path: str, recipe: Mapping[str, Any]) -> bool:
    """Whether `path` holds a model trained with exactly `recipe` (its `hf_uq_recipe.json` and `config.json`)."""
    try:
        with open(os.path.join(path, RECIPE_FILE), encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        return False
    return os.path.isfile(os.path.join(path, "config.json")) and _canonical(saved) == _canonical(recipe)


# ------------------------------------------------------------------------------------------ workers


def quiet() -> None:
    """Silence the libraries' own progress bars and chatter (the benchmark draws its own bars)."""
    import datasets
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _init_worker() -> None:
    torch.set_num_threads(1)  # tiny models: one thread per worker is fastest, and workers share the cores
    quiet()


@functools.lru_cache(maxsize=4)
def _training_data(seed: int):
    from ..data import load_digits_benchmark

    return load_digits_benchmark(seed, include_ood=False, shifts=())


def _vit_processor():
    from ..models.tiny import tiny_vit_image_processor

    return tiny_vit_image_processor()


class _Rows(torch.utils.data.Dataset):
    """In-memory `{"pixel_values", "labels"}` rows (-100 marks the unlabelled extra inputs)."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor):
        self.pixels, self.labels = pixels, labels

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixels[index], "labels": self.labels[index]}


def mixup_inputs(pixels: torch.Tensor, labels: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """`count` blends of two training images of different classes (weights ~ U(0.3, 0.7)): inputs on which the
    teacher's members disagree, so that distribution distillation sees some of the ensemble's diversity."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    first = torch.randint(len(pixels), (count,), generator=generator)
    second = torch.randint(len(pixels), (count,), generator=generator)
    same = labels[first] == labels[second]
    shift = torch.randint(1, len(pixels), (int(same.sum()),), generator=generator)
    second[same] = (second[same] + shift) % len(pixels)
    weight = 0.3 + 0.4 * torch.rand(count, 1, 1, 1, generator=generator)
    return weight * pixels[first] + (1 - weight) * pixels[second]


def _train_student(recipe: Mapping[str, Any], bench: Any, processor: Any, seed_dir: str):
    from transformers import AutoModelForImageClassification, PrinterCallback

    from ..models.dirichlet_student import DirichletStudentForImageClassification
    from ..models.tiny import tiny_vit
    from ..trainer import EnsembleDistillationConfig, EnsembleDistillationTrainer
    from .predict import iter_batches

    batches = list(iter_batches(bench["train"], processor, batch_size=512))
    pixels = torch.cat([b["pixel_values"] for b in batches])
    labels = torch.cat([b["labels"] for b in batches])
    extra = mixup_inputs(pixels, labels, int(round(recipe["extra"] * len(pixels))), recipe["seed"])
    rows = _Rows(torch.cat([pixels, extra]), torch.cat([labels, torch.full((len(extra),), -100)]))
    teacher = [AutoModelForImageClassification.from_pretrained(os.path.join(seed_dir, p)).eval()
               for p in recipe["teacher"]]
    backbone = recipe.get("backbone")  # warm start from a member's weights, or a fresh tiny ViT
    student = DirichletStudentForImageClassification.from_backbone(
        os.path.join(seed_dir, backbone) if backbone else tiny_vit(seed=recipe["model_seed"])
    )
    with tempfile.TemporaryDirectory(prefix="hf_uq_student_") as scratch:
        args = EnsembleDistillationConfig(
            output_dir=scratch, distillation_loss="dirichlet_nll", initial_temperature=recipe["temperature"],
            annealing_fraction=0.5, target_smoothing=1e-4, num_train_epochs=recipe["epochs"],
            learning_rate=recipe["lr"], weight_decay=0.05, lr_scheduler_type="cosine", warmup_steps=0.1,
            per_device_train_batch_size=64, per_device_eval_batch_size=256, teacher_batch_size=512,
            seed=recipe["model_seed"], use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = EnsembleDistillationTrainer(model=student, teacher=teacher, args=args, train_dataset=rows)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return student.eval()


def _build_and_train(recipe: Mapping[str, Any], seed_dir: str) -> tuple[Any, Any]:
    """The trained model of `recipe` and its image processor (paths in `recipe` are relative to `seed_dir`)."""
    from ..models.batch_ensemble_vit import BatchEnsembleViTForImageClassification
    from ..models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit
    from ..training import fit_classifier

    kind, bench = recipe["kind"], _training_data(recipe["seed"])
    fit = dict(epochs=recipe["epochs"], learning_rate=recipe["lr"], seed=recipe["model_seed"], eval_split=None,
               verbose=False, num_threads=1)
    if kind == "vit":
        processor = _vit_processor()
        return fit_classifier(tiny_vit(seed=recipe["model_seed"]), bench, processor, **fit), processor
    if kind == "cnn":
        model = tiny_cnn(seed=recipe["model_seed"], channels=tuple(recipe["channels"]), stem_width=recipe["stem"])
        processor = tiny_cnn_image_processor(model)
        return fit_classifier(model, bench, processor, **fit), processor
    if kind == "batch_ensemble":
        blocks = recipe["blocks"]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe["model_seed"])
            model = BatchEnsembleViTForImageClassification.from_vit(
                os.path.join(seed_dir, recipe["source"]), recipe["members"], fast_weight_init="normal",
                ensemble_layers=None if blocks is None else list(range(-int(blocks), 0)),
            )
        processor = _vit_processor()
        return fit_classifier(model, bench, processor, **fit), processor
    if kind == "student":
        processor = _vit_processor()
        return _train_student(recipe, bench, processor, seed_dir), processor
    raise ValueError(f"unknown training job kind {kind!r}")


def train_model(job: TrainJob) -> dict[str, Any]:
    """Train `job`'s model and save it (model, image processor, recipe) to `job.path`; runs in a worker process.

    Returns:
        `dict`: `{"key", "seconds", "validation_accuracy"}`.
    """
    from .predict import predict

    start = time.perf_counter()
    model, processor = _build_and_train(job.recipe, os.path.dirname(job.path))
    seconds = time.perf_counter() - start
    bench = _training_data(job.recipe["seed"])
    accuracy = float(predict(model, bench["validation"], processor, progress=False, num_threads=1).correct.mean())
    tmp = job.path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    with open(os.path.join(tmp, RECIPE_FILE), "w", encoding="utf-8") as handle:
        json.dump(job.recipe, handle, indent=2, sort_keys=True)
    shutil.rmtree(job.path, ignore_errors=True)
    os.replace(tmp, job.path)
    return {"key": job.key, "seconds": seconds, "validation_accuracy": accuracy}


# ------------------------------------------------------------------------------------------ scheduler


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A `spawn` process pool of `workers` processes with one torch thread each; on an error its workers are
    stopped at once instead of finishing the queue."""
    context = multiprocessing.get_context("spawn")  # never fork a process whose torch threads have started
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for process in list((getattr(pool, "_processes", None) or {}).values()):  # our own workers
            process.terminate()
        raise
    pool.shutdown(wait=True)


def run_tasks(
    tasks: Sequence[Task],
    pool: ProcessPoolExecutor,
    *,
    done: Iterable[str] = (),
    bars: Mapping[str, str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run `tasks` in `pool` (see [`worker_pool`]), respecting their `deps`.

    Each task is submitted as soon as every task it depends on has finished (keys in `done` count as finished).
    The first failure is raised (leave the `worker_pool` block with it to stop the rest).

    Args:
        tasks (`Sequence[Task]`):
            The calls, in the order to start them when several are ready.
        pool (`ProcessPoolExecutor`):
            The workers.
        done (`Iterable[str]`, *optional*):
            Keys of dependencies already satisfied (cached models).
        bars (`Mapping[str, str]`, *optional*):
            Bar name -> description; one tqdm bar per name used by the tasks' `bar`.
        progress (`bool`, *optional*, defaults to `True`):
            Show the bars.

    Returns:
        `dict[str, Any]`: task key -> the function's return value.
    """
    from tqdm.auto import tqdm

    if not tasks:
        return {}
    finished = set(done)
    unknown = sorted({d for t in tasks for d in t.deps} - finished - {t.key for t in tasks})
    if unknown:
        raise ValueError(f"tasks depend on unknown keys {unknown}")
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.bar] = counts.get(task.bar, 0) + 1
    bars = dict(bars or {})
    progress_bars = {
        name: tqdm(total=count, desc=bars.get(name, name), unit="task", position=i, disable=not progress,
                   leave=True, dynamic_ncols=True)
        for i, (name, count) in enumerate(counts.items())
    }
    pending, running, results = list(tasks), {}, {}
    try:
        while pending or running:
            for task in [t for t in pending if all(d in finished for d in t.deps)]:
                pending.remove(task)
                running[pool.submit(task.function, task.payload)] = task
            if not running:
                raise ValueError(f"tasks {[t.key for t in pending]} wait on each other")
            completed, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in completed:
                task = running.pop(future)
                results[task.key] = _result(future, task)
                finished.add(task.key)
                bar = progress_bars[task.bar]
                bar.set_postfix_str(_postfix(task, results[task.key]), refresh=False)
                bar.update(1)
    finally:
        for bar in progress_bars.values():
            bar.close()
    return results


def _result(future: Future, task: Task) -> Any:
    try:
        return future.result()
    except Exception as error:
        raise RuntimeError(f"{task.label or task.key} failed: {type(error).__name__}: {error}") from error


def _postfix(task: Task, result: Any) -> str:
    text = task.label or task.key
    if isinstance(result, Mapping) and "seconds" in result:
        accuracy = result.get("validation_accuracy")
        text += f" {result['seconds']:.0f}s"
        if isinstance(accuracy, float) and not math.isnan(accuracy):
            text += f", val acc {accuracy:.3f}"
    return text

