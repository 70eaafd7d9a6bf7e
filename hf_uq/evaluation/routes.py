"""The embedded default route zoo of `hf-uq benchmark`: which models to train per seed, and the routes built on them.

Per training seed, on `load_digits_benchmark(seed)`:

- **teacher**: a deep ensemble of `members` `tiny_vit`s that differ by initialization and data order;
- **single**: member 0; **single + TS**: member 0 with a temperature fit on the validation split;
  **MC dropout**: member 0 with its dropout sampled `mc_samples` times;
- **Asymmetric Duo**: member 0 + a `tiny_cnn` sidekick, both temperatures fit on validation; knob *sidekick size*
  (the sidekick's stage widths), swept over `sidekicks`; each sidekick alone is a route too;
- **BatchEnsembleViT**: member 0 converted by `from_vit` and fine-tuned; knob *ensembled blocks* ("all" or the
  last k, a latent-space ensemble), swept over `be_blocks`;
- **Dirichlet student**: a `tiny_vit` backbone warm-started from member 0 and distilled from the teacher (Dirichlet
  NLL of the members' predictions on the training digits plus as many mixups of two training digits as
  `student_extra` says per image); knob *distillation temperature* (the initial annealing temperature), swept over
  `student_temperatures`. Measured on seed 0: from member 0, 4 epochs reach 0.95 test accuracy and a fidelity of
  0.6-0.66; from a fresh backbone 10 epochs reach only 0.83 and 0.12;
- **quantized**: optimum-quanto weight-only versions of the single model and of the first duo; knob *bit width*.

Temperatures are bounded below by `min_temperature` (1 by default): the 144-image validation split is nearly
separable, and an unbounded fit sharpens the logits without limit (see `benchmarks/bench_digits_routes.py`).
Trained models live in `<models>/seed<k>/` ([`plan_training`]); the post-hoc routes (TS, MC dropout, duos,
quantized models, the teacher) are rebuilt from them by [`build_routes`] on every run and saved next to them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .protocol import RouteSpec
from .zoo_training import TrainJob

__all__ = [
    "DEFAULT_ZOO",
    "HEAVY_FAMILIES",
    "QUICK_ZOO",
    "ZooConfig",
    "build_routes",
    "evaluate_seed",
    "evaluation_splits",
    "plan_training",
]


@dataclass(frozen=True)
class ZooConfig:
    """
    What the embedded benchmark trains and sweeps (see the module docstring).

    Args:
        members (`int`): teacher members (deep ensemble size).
        epochs (`float`): training epochs of each member. lr (`float`): their learning rate.
        sidekicks (`tuple`): `(channels, stem_width)` of each duo sidekick (`tiny_cnn`), the *sidekick size* knob.
        sidekick_epochs (`float`): training epochs of each sidekick.
        mc_samples (`int`): MC dropout samples.
        be_members (`int`): BatchEnsembleViT members.
        be_blocks (`tuple`): ensembled blocks per BatchEnsembleViT route: `None` for all, `k` for the last k.
        be_epochs (`float`): fine-tuning epochs of each BatchEnsembleViT.
        student_temperatures (`tuple[float, ...]`): initial annealing temperatures of the Dirichlet students.
        student_epochs (`float`): distillation epochs. student_extra (`float`): mixups per training image.
        quantized (`tuple`): `(base route, bits)` pairs, base `"single"` or `"duo"` (the first sidekick size).
        min_temperature (`float`): lower bound of every fitted temperature.
        shift_severities (`tuple[int, ...]`): severities of the covariate-shift splits (every corruption).
        latency_repeats (`int`): timed forwards per route and batch size.
    """

    members: int = 5
    epochs: float = 20
    lr: float = 3e-3
    sidekicks: tuple[tuple[tuple[int, ...], int], ...] = (((8, 16, 32, 64), 4), ((4, 8, 16, 32), 4))
    sidekick_epochs: float = 15
    mc_samples: int = 10
    be_members: int = 4
    be_blocks: tuple[int | None, ...] = (None, 2)
    be_epochs: float = 4
    student_temperatures: tuple[float, ...] = (1.0, 2.5)
    student_epochs: float = 4
    student_extra: float = 2.0
    quantized: tuple[tuple[str, int], ...] = (("single", 8), ("single", 4), ("duo", 8))
    min_temperature: float = 1.0
    shift_severities: tuple[int, ...] = (1, 2, 3)
    latency_repeats: int = 30

    def to_dict(self) -> dict[str, Any]:
        """JSON-able settings (tuples as lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ZooConfig:
        """The inverse of [`to_dict`]."""
        values = dict(data)
        values["sidekicks"] = tuple((tuple(c), int(s)) for c, s in values["sidekicks"])
        values["quantized"] = tuple((str(b), int(k)) for b, k in values["quantized"])
        for key in ("be_blocks", "student_temperatures", "shift_severities"):
            values[key] = tuple(values[key])
        return cls(**values)


#: The full demo: 3 seeds of this run in about 6 minutes on 2 cores.
DEFAULT_ZOO = ZooConfig()
#: `--quick`: every route family, smaller sweeps, fewer epochs and shift splits; about a minute on 2 cores.
QUICK_ZOO = ZooConfig(
    epochs=8, sidekicks=(((4, 8, 16, 32), 4),), sidekick_epochs=8, be_epochs=1, student_temperatures=(2.5,),
    student_epochs=2, student_extra=1.0, quantized=(("single", 8), ("duo", 8)), shift_severities=(2,),
    latency_repeats=10,
)


# ------------------------------------------------------------------------------------------ names


def sidekick_name(channels: Sequence[int]) -> str:
    """The *sidekick size* knob value, e.g. `"8-16-32-64"` (stage widths)."""
    return "-".join(str(c) for c in channels)


def _blocks_name(blocks: int | None) -> str:
    return "all" if blocks is None else f"last {blocks}"


def _duo_name(size: str) -> str:
    return f"Asymmetric Duo (sidekick {size})"


def member_dir(seed_dir: str, member: int) -> str:
    return os.path.join(seed_dir, "members", f"member{member}")


def _sidekick_dir(seed_dir: str, size: str) -> str:
    return os.path.join(seed_dir, f"sidekick_{size}")


def _be_dir(seed_dir: str, blocks: int | None) -> str:
    return os.path.join(seed_dir, "batch_ensemble_all" if blocks is None else f"batch_ensemble_last{blocks}")


def _student_dir(seed_dir: str, temperature: float) -> str:
    return os.path.join(seed_dir, f"dirichlet_t{temperature:g}")


# ------------------------------------------------------------------------------------------ training plan


def _relative(path: str, seed_dir: str) -> str:
    """Paths inside recipes are relative to the seed folder, so that a moved output folder keeps its cache."""
    return os.path.relpath(path, seed_dir).replace(os.sep, "/")


def plan_training(zoo: ZooConfig, seeds: Sequence[int], models_dir: str) -> list[TrainJob]:
    """Every model the zoo trains, per seed, in a good start order (member 0 and the sidekicks first).

    Args:
        zoo ([`ZooConfig`]): the settings.
        seeds (`Sequence[int]`): training seeds (also the data seeds).
        models_dir (`str`): `<output>/models`; seed k's models go to `<models_dir>/seed<k>/`.

    Returns:
        `list[TrainJob]`: members (key `seed<k>/member<m>`), sidekicks (`seed<k>/sidekick_<size>`), BatchEnsembleViT
        fine-tunes (`seed<k>/batch_ensemble_<all|lastK>`, after member 0) and Dirichlet students
        (`seed<k>/dirichlet_t<T0>`, after every member).
    """
    jobs: list[TrainJob] = []
    for seed in seeds:
        seed_dir = os.path.join(models_dir, f"seed{seed}")
        members = []
        for m in range(zoo.members):
            recipe = {"kind": "vit", "seed": seed, "model_seed": 1000 * seed + m, "epochs": zoo.epochs,
                      "lr": zoo.lr, "version": 1}
            members.append(TrainJob(f"seed{seed}/member{m}", member_dir(seed_dir, m), recipe,
                                    label=f"seed {seed} member {m}"))
        sidekicks = []
        for i, (channels, stem) in enumerate(zoo.sidekicks):
            size = sidekick_name(channels)
            recipe = {"kind": "cnn", "seed": seed, "model_seed": 1000 * seed + 500 + i, "channels": list(channels),
                      "stem": stem, "epochs": zoo.sidekick_epochs, "lr": zoo.lr, "version": 1}
            sidekicks.append(TrainJob(f"seed{seed}/sidekick_{size}", _sidekick_dir(seed_dir, size), recipe,
                                      label=f"seed {seed} sidekick {size}"))
        dependents = []
        for blocks in zoo.be_blocks:
            recipe = {"kind": "batch_ensemble", "seed": seed, "model_seed": 1000 * seed + 600,
                      "source": _relative(members[0].path, seed_dir), "source_recipe": members[0].recipe, "blocks": blocks,
                      "members": zoo.be_members, "epochs": zoo.be_epochs, "lr": zoo.lr, "version": 1}
            path = _be_dir(seed_dir, blocks)
            dependents.append(TrainJob(f"seed{seed}/{os.path.basename(path)}", path, recipe,
                                       deps=(members[0].key,),
                                       label=f"seed {seed} BatchEnsembleViT {_blocks_name(blocks)}"))
        for temperature in zoo.student_temperatures:
            recipe = {"kind": "student", "seed": seed, "model_seed": 1000 * seed + 777, "temperature": temperature,
                      "backbone": _relative(members[0].path, seed_dir),
                      "teacher": [_relative(j.path, seed_dir) for j in members],
                      "teacher_recipes": [j.recipe for j in members],
                      "epochs": zoo.student_epochs, "extra": zoo.student_extra, "lr": zoo.lr, "version": 1}
            path = _student_dir(seed_dir, temperature)
            dependents.append(TrainJob(f"seed{seed}/{os.path.basename(path)}", path, recipe,
                                       deps=tuple(j.key for j in members),
                                       label=f"seed {seed} Dirichlet student T0={temperature:g}"))
        jobs += members[:1] + sidekicks + members[1:] + dependents
    return jobs


# ------------------------------------------------------------------------------------------ data


def evaluation_splits(benchmark: Any, zoo: ZooConfig) -> tuple[dict[str, Any], list[str], list[str]]:
    """The scored splits of a digits benchmark: `({name: split}, ood_splits, shift_splits)` (test first)."""
    from ..data import OOD_SPLITS

    shift = [name for name in benchmark if name.startswith("shift_")]
    ood = [name for name in OOD_SPLITS if name in benchmark]
    return {name: benchmark[name] for name in ["test", *ood, *shift]}, ood, shift


def digits_benchmark(zoo: ZooConfig, seed: int) -> Any:
    """`load_digits_benchmark(seed)` with the zoo's shift severities."""
    from ..data import load_digits_benchmark

    return load_digits_benchmark(seed, severities=zoo.shift_severities)


# ------------------------------------------------------------------------------------------ routes


@dataclass
class BuiltRoute:
    """A [`RouteSpec`] plus where its model lives (relative to the seed folder) and how to save it there."""

    spec: RouteSpec
    folder: str
    save: Any = None  # (model, image processor, extra files) for post-hoc routes; None for trained folders


def _load(path: str) -> Any:
    from transformers import AutoModelForImageClassification

    return AutoModelForImageClassification.from_pretrained(path).eval()


def _validation_logits(model: Any, calibration: Any, processor: Any) -> Any:
    """The model's raw predictions on the calibration split (what `fit_temperature(s)` would collect), quietly."""
    from .predict import predict

    return predict(model, calibration, processor, batch_size=256, progress=False)


def _save(folder: str, model: Any, processor: Any, files: Mapping[str, Any] | None = None) -> None:
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    for name, content in (files or {}).items():
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=2)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _quantization_meta(model: Any) -> dict[str, Any]:
    info = model.hf_uq_quantization
    return {"backend": info.backend, "weights": info.weights, "activations": info.activations,
            "skipped": sorted(info.skipped)}


def build_routes(zoo: ZooConfig, seed: int, seed_dir: str, calibration: Any, *, save: bool) -> list[BuiltRoute]:
    """Every route of one seed, from the trained models in `seed_dir`; the post-hoc ones are fit on `calibration`.

    Args:
        zoo ([`ZooConfig`]): the settings.
        seed (`int`): the training seed (also MC dropout's sampling seed).
        seed_dir (`str`): `<models>/seed<k>`, holding the trained models of [`plan_training`].
        calibration (`datasets.Dataset`): the validation split (temperatures are fit on it; never on test).
        save (`bool`): save the post-hoc routes' models (teacher, single, TS, MC dropout, duos, quantized) into
            their folders under `seed_dir`.

    Returns:
        `list[BuiltRoute]`, in display order.
    """
    from ..calibration import fit_temperatures
    from ..mc_dropout import mc_dropout
    from ..models.deep_ensemble import DeepEnsembleForImageClassification
    from ..models.duo import DuoForImageClassification, DuoImageProcessor
    from ..models.temperature_scaled import TemperatureScaledForImageClassification
    from ..models.tiny import tiny_cnn_image_processor, tiny_vit_image_processor
    from ..quantization import quantize

    vit_processor = tiny_vit_image_processor()
    bounds = (zoo.min_temperature, 100.0)
    members = [_load(member_dir(seed_dir, m)) for m in range(zoo.members)]
    single = members[0]
    routes: list[BuiltRoute] = []

    def add(spec: RouteSpec, folder: str, saved: Any = None) -> None:
        routes.append(BuiltRoute(spec, folder, saved))

    teacher = DeepEnsembleForImageClassification.from_members(members).eval()
    add(RouteSpec("deep ensemble", "teacher", teacher, vit_processor, extra={"members": zoo.members}),
        "deep_ensemble", (teacher, vit_processor, None))
    add(RouteSpec("single", "single", single, vit_processor), "single",
        (single, vit_processor, None))
    raw = _validation_logits(single, calibration, vit_processor)
    scaled = TemperatureScaledForImageClassification.from_model(single).eval()
    (temperature,) = fit_temperatures([raw.logits], raw.labels, bounds=bounds)
    scaled.config.temperature = float(temperature)
    add(RouteSpec("single + TS", "temperature", scaled, vit_processor, extra={"temperature": float(temperature)}),
        "single_ts", (scaled, vit_processor, None))
    sampled = mc_dropout(single, num_samples=zoo.mc_samples, seed=seed)
    add(RouteSpec("MC dropout", "mc_dropout", sampled, vit_processor, extra={"samples": zoo.mc_samples}),
        "mc_dropout", (single, vit_processor, {"mc_dropout.json": {"num_samples": zoo.mc_samples, "seed": seed}}))
    duos, sidekicks = [], []
    for channels, stem in zoo.sidekicks:
        size = sidekick_name(channels)
        sidekick = _load(_sidekick_dir(seed_dir, size))
        cnn_processor = tiny_cnn_image_processor(sidekick)
        duo_processor = DuoImageProcessor.from_members(vit_processor, cnn_processor)
        duo = DuoForImageClassification.from_members(single, sidekick).eval()
        small = _validation_logits(sidekick, calibration, cnn_processor)
        temperatures = [float(t) for t in fit_temperatures([raw.logits, small.logits], raw.labels, bounds=bounds)]
        duo.config.temperatures = list(temperatures)
        knob = {"name": "sidekick size", "value": size}
        duos.append(BuiltRoute(
            RouteSpec(_duo_name(size), "duo", duo, duo_processor, knob=dict(knob),
                      extra={"temperatures": list(temperatures), "sidekick_stem_width": stem}),
            f"duo_{size}", (duo, duo_processor, None)))
        sidekicks.append(BuiltRoute(
            RouteSpec(f"sidekick {size} alone", "sidekick", sidekick, cnn_processor, knob=dict(knob)),
            os.path.basename(_sidekick_dir(seed_dir, size))))
    routes += duos + sidekicks
    for blocks in zoo.be_blocks:
        name = "BatchEnsembleViT (all blocks)" if blocks is None else f"BatchEnsembleViT (last {blocks} blocks)"
        add(RouteSpec(name, "batch_ensemble", _load(_be_dir(seed_dir, blocks)), vit_processor,
                      knob={"name": "ensembled blocks", "value": _blocks_name(blocks)},
                      extra={"members": zoo.be_members, "fine_tune_epochs": zoo.be_epochs}),
            os.path.basename(_be_dir(seed_dir, blocks)))
    for t0 in zoo.student_temperatures:
        add(RouteSpec(f"Dirichlet student (T0 {t0:g})", "dirichlet", _load(_student_dir(seed_dir, t0)), vit_processor,
                      knob={"name": "distillation temperature", "value": t0},
                      extra={"epochs": zoo.student_epochs, "mixups_per_image": zoo.student_extra}),
            os.path.basename(_student_dir(seed_dir, t0)))
    for base, bits in zoo.quantized:
        source = routes[1] if base == "single" else duos[0] if base == "duo" and duos else None
        if source is None:
            raise ValueError(f"cannot quantize route {base!r}: use 'single' or 'duo' (with a sidekick)")
        model = quantize(source.spec.model, backend="quanto", weights=f"int{bits}")
        name = f"single (int{bits})" if base == "single" else f"{source.spec.name[:-1]}, int{bits})"
        add(RouteSpec(name, source.spec.family, model, source.spec.image_processor,
                      knob={"name": "bit width", "value": bits}, quantization=_quantization_meta(model),
                      extra={"base_route": source.spec.name}),
            f"{source.folder}_int{bits}", (model, source.spec.image_processor, None))
    if save:
        for route in routes:
            if route.save is not None:
                _save(os.path.join(seed_dir, route.folder), *route.save)
    return routes


#: `extra` entries that differ between seeds: `results.json` lists them per seed.
PER_SEED_EXTRA: tuple[str, ...] = ("temperature", "temperatures")


def preprocessed(split: Any, processor: Any) -> Any:
    """`split` run through `processor` once, as an in-memory `datasets.Dataset` of float32 `pixel_values*` columns
    and `label`, so that every route sharing the processor skips the image preprocessing."""
    import numpy as np
    from datasets import Array3D, Dataset, Features, Value

    from .predict import iter_batches

    batches = list(iter_batches(split, processor, batch_size=512))
    columns = {k: np.concatenate([b[k].numpy() for b in batches]).astype(np.float32)
               for k in batches[0] if k != "labels"}
    features = {k: Array3D(shape=tuple(v.shape[1:]), dtype="float32") for k, v in columns.items()}
    labels = np.concatenate([b["labels"].numpy() for b in batches])
    dataset = Dataset.from_dict({**columns, "label": labels}, features=Features({**features, "label": Value("int64")}))
    return dataset.with_format("numpy")


def _processor_key(processor: Any) -> str:
    """Equal keys for image processors that preprocess alike (same class and settings)."""
    try:
        return f"{type(processor).__name__}:{processor.to_json_string()}"
    except (AttributeError, TypeError, ValueError):
        return f"id:{id(processor)}"


def predict_built_routes(routes: Sequence[BuiltRoute], splits: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """[`~hf_uq.evaluation.protocol.predict_routes`] of every route, preprocessing each split once per distinct
    image processor (one thread, no progress bar); the same predictions as from the raw images."""
    from .protocol import predict_routes

    groups: dict[str, list[BuiltRoute]] = {}
    for route in routes:
        groups.setdefault(_processor_key(route.spec.image_processor), []).append(route)
    predictions: dict[str, dict[str, Any]] = {}
    for group in groups.values():
        processor = group[0].spec.image_processor
        ready = {name: preprocessed(split, processor) for name, split in splits.items()}
        specs = [dataclasses.replace(r.spec, image_processor=None) for r in group]
        predictions.update(predict_routes(specs, ready, batch_size=256, progress=False, num_threads=1))
    return {r.spec.name: predictions[r.spec.name] for r in routes}


#: Route families whose prediction costs many forwards; [`evaluate_seed`] can predict them in a task of their own.
HEAVY_FAMILIES: tuple[str, ...] = ("teacher", "mc_dropout")


def evaluate_seed(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Build one seed's routes and predict every scored split with some or all of them (a worker-process task).

    Args:
        payload (`Mapping`): `{"zoo": ZooConfig.to_dict(), "seed": int, "seed_dir": str, "families": list or
            None, "exclude": bool, "save": bool}`: predict the routes whose family is in `families` (or, with
            `exclude`, not in it; every route when `families` is None); save the post-hoc routes' models when
            `save`.

    Returns:
        `dict`: `{"seed", "seconds", "predictions": {route: {split: Predictions}}, "meta": {route: {"family",
        "knob", "quantization", "extra", "folder"}}}` for the predicted routes, and `"order"`: every route's name
        in display order.
    """
    from .zoo_training import filtered_stderr

    start = time.perf_counter()
    zoo = ZooConfig.from_dict(payload["zoo"])
    families, exclude = payload.get("families"), payload.get("exclude", False)
    with filtered_stderr():
        benchmark = digits_benchmark(zoo, payload["seed"])
        routes = build_routes(zoo, payload["seed"], payload["seed_dir"], benchmark["validation"],
                              save=payload.get("save", True))
        order = [r.spec.name for r in routes]
        if families is not None:
            routes = [r for r in routes if (r.spec.family in families) != exclude]
        splits, _, _ = evaluation_splits(benchmark, zoo)
        predictions = predict_built_routes(routes, splits)
    meta = {
        r.spec.name: {"family": r.spec.family, "knob": r.spec.knob, "quantization": r.spec.quantization,
                      "extra": r.spec.extra, "folder": r.folder}
        for r in routes
    }
    return {"seed": payload["seed"], "seconds": time.perf_counter() - start, "predictions": predictions,
            "meta": meta, "order": order}
