"""`hf-uq evaluate`: the protocol on users' own checkpoints and datasets.

[`evaluate_checkpoints`] loads every checkpoint (any `AutoModelForImageClassification` folder or Hub id, hf_uq
models included, with the `AutoImageProcessor` saved next to it) and the data (a Hub id, a `save_to_disk` folder
or an image folder), checks that they fit together, predicts every split (sharded across processes under
`accelerate launch`), and, on the main process only, measures the budgets and writes `results.json`, the saved
predictions and the report.

Bad input raises `ValueError` or `FileNotFoundError` with a message naming the problem, before any prediction:
a missing folder, a missing label column, an unknown or empty split, models whose label spaces differ from each
other or from the dataset, and OOD images whose raw size or channel count differs from the in-distribution split's.
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict
from datasets import Image as ImageFeature
from PIL import Image as PILImage
from torch import nn
from tqdm.auto import tqdm

from ..data.adapter import load_image_dataset, looks_like_local_path, saved_splits

__all__ = [
    "DEFAULT_OUTPUT", "UserData", "UserModel", "check_dataset_labels", "check_label_spaces", "check_ood_images",
    "evaluate_checkpoints", "load_checkpoint", "load_user_data", "load_user_models", "raw_image_formats",
    "route_names",
]

logger = logging.getLogger(__name__)

#: Output folder of `hf-uq evaluate` when `--output` is not given.
DEFAULT_OUTPUT = "hf_uq_evaluate"
#: Split names `results.json` reserves (`test` holds the in-distribution metrics, `shift` the pooled shifts).
_RESERVED_SPLITS = ("test", "shift")


def _listed(items: Sequence[Any], limit: int = 8) -> str:
    more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
    return f"[{', '.join(repr(i) for i in list(items)[:limit])}{more}]"


# ------------------------------------------------------------------------------------------ models


@dataclass
class UserModel:
    """
    A checkpoint loaded for evaluation.

    Args:
        name (`str`): the route name (the folder name or Hub id, made unique).
        source (`str`): the folder or Hub id as given.
        model (`nn.Module`): the classifier, in eval mode.
        image_processor: its `AutoImageProcessor`.
        labels (`list[str]`): class names in id order (`config.id2label`).
    """

    name: str
    source: str
    model: nn.Module
    image_processor: Any
    labels: list[str]

    @property
    def default_labels(self) -> bool:
        """Whether the labels are transformers' placeholders `LABEL_0`, `LABEL_1`, ... (no class names saved)."""
        return all(label == f"LABEL_{i}" for i, label in enumerate(self.labels))


def route_names(sources: Sequence[str]) -> list[str]:
    """Unique display names for checkpoints: the folder name or Hub id, with parent folders added to tell equal
    folder names apart (`"run1/model"`, `"run2/model"`), and `" (2)"`, `" (3)"` for a source given twice."""
    parts = []
    for source in sources:
        local = os.path.exists(os.path.expanduser(source)) or looks_like_local_path(source)
        if local:
            path = os.path.normpath(os.path.abspath(os.path.expanduser(source)))
            parts.append([p for p in path.split(os.sep) if p] or [path])
        else:
            parts.append([source.strip("/")])
    depth = [1] * len(sources)
    while True:
        names = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        grow = [i for i, n in enumerate(names) if depth[i] < len(parts[i]) and any(
            m == n and parts[j] != parts[i] for j, m in enumerate(names))]
        if not grow:
            break
        for i in grow:
            depth[i] += 1
    return [name if names[:i].count(name) == 0 else f"{name} ({names[:i].count(name) + 1})"
            for i, name in enumerate(names)]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_checkpoint(source: str) -> tuple[nn.Module, Any]:
    """Loads an image classifier and its image processor from a local folder or a Hub id.

    Args:
        source (`str`):
            A folder written by `save_pretrained` (model and image processor) or a Hub model id. hf_uq model types
            load too (importing any part of hf_uq registers them).

    Returns:
        `tuple[nn.Module, Any]`: the model in eval mode and its `AutoImageProcessor`.

    Raises:
        `FileNotFoundError`: the folder does not exist.
        `ValueError`: the folder or id holds no image classifier, or no image processor.
    """
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    path = os.path.expanduser(source)
    local = os.path.exists(path) or looks_like_local_path(source)
    if local:
        if not os.path.exists(path):
            raise FileNotFoundError(f"Model folder {source!r} does not exist.")
        if not os.path.isdir(path):
            raise ValueError(f"{source!r} is a file; expected a model folder written by `save_pretrained`.")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ValueError(f"Model folder {source!r} has no config.json; expected a folder written by "
                             "`model.save_pretrained(folder)`.")
    try:
        model = AutoModelForImageClassification.from_pretrained(path)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"Cannot load an image classifier from {'folder' if local else 'Hub id'} {source!r}: "
                         f"{_first_line(error)}") from error
    hint = "save the one it was trained with next to it: `image_processor.save_pretrained(folder)`."
    try:  # timm checkpoints keep their preprocessing in config.json, others in preprocessor_config.json
        image_processor = AutoImageProcessor.from_pretrained(path)
    except (OSError, ValueError, KeyError) as error:
        missing = local and not os.path.isfile(os.path.join(path, "preprocessor_config.json"))
        reason = "no preprocessor_config.json" if missing else _first_line(error)
        raise ValueError(f"No image processor found for model {source!r} ({reason}); {hint}") from error
    return model.eval(), image_processor


def load_user_models(sources: Sequence[str], state: Any | None = None) -> list[UserModel]:
    """Loads every checkpoint ([`load_checkpoint`]) and names it ([`route_names`])."""
    loaded = []
    for source, name in zip(sources, route_names(sources), strict=True):
        with state.main_process_first() if state is not None else nullcontext():  # Hub downloads: once
            model, processor = load_checkpoint(source)
        id2label = getattr(model.config, "id2label", None) or {}
        labels = [str(id2label[k]) for k in sorted(id2label, key=int)]
        loaded.append(UserModel(name, source, model, processor, labels))
    return loaded


def _difference(a_name: str, a: list[str], b_name: str, b: list[str]) -> str:
    """Says how two label lists (id order) differ."""
    only_a = [x for x in a if x not in b]
    only_b = [x for x in b if x not in a]
    parts = []
    if only_a:
        parts.append(f"only {a_name} has {_listed(only_a)}")
    if only_b:
        parts.append(f"only {b_name} has {_listed(only_b)}")
    if not parts and len(a) != len(b):
        parts.append(f"{a_name} has {len(a)} labels, {b_name} {len(b)}")
    if not parts:
        moved = [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        shown = "; ".join(f"id {i} is {x!r} in {a_name} but {y!r} in {b_name}" for i, x, y in moved[:4])
        parts.append(f"same names in another order ({shown}{'; ...' if len(moved) > 4 else ''})")
    return "; ".join(parts)


def check_label_spaces(models: Sequence[UserModel]) -> None:
    """Raises a `ValueError` when two models do not share one label space (names in the same id order).

    Models without saved class names (`LABEL_0`, ...) are compared by their number of labels.
    """
    first = models[0]
    for other in models[1:]:
        by_count = first.default_labels or other.default_labels
        if (len(first.labels) != len(other.labels)) if by_count else (first.labels != other.labels):
            raise ValueError(
                f"Models {first.name!r} and {other.name!r} have different label spaces: "
                f"{_difference(repr(first.name), first.labels, repr(other.name), other.labels)}."
            )


# ------------------------------------------------------------------------------------------ data


@dataclass
class UserData:
    """
    The splits of an evaluation, with images in `image` and labels in `label` (OOD sets: images only).

    Args:
        name (`str`): the dataset id or folder as given.
        id_split (`str`): the in-distribution split's name.
        splits (`dict[str, datasets.Dataset]`): every split to predict: `id_split`, then the calibration split,
            then the OOD sets, under their names in `results.json`.
        ood_splits (`list[str]`): names of the OOD sets in `splits`.
        ood_sources (`dict[str, str]`): OOD set name -> where it came from (`source` or `source:split`).
        calibration_split (`str`, *optional*): the calibration split's name.
        labels (`list[str]`, *optional*): the dataset's class names (`ClassLabel`), or `None` for integer labels.
    """

    name: str
    id_split: str
    splits: dict[str, Dataset]
    ood_splits: list[str]
    ood_sources: dict[str, str] = field(default_factory=dict)
    calibration_split: str | None = None
    labels: list[str] | None = None


def _parse_ood(spec: str) -> tuple[str, str | None]:
    """`SOURCE` or `SOURCE:SPLIT` (an existing path is never split at a colon)."""
    if os.path.exists(os.path.expanduser(spec)) or ":" not in spec:
        return spec, None
    source, _, split = spec.rpartition(":")
    if not source or not split:
        raise ValueError(f"--ood {spec!r}: expected SOURCE or SOURCE:SPLIT")
    return source, split


def _base_name(source: str) -> str:
    return os.path.basename(os.path.normpath(os.path.expanduser(source))) or source


def _load(source: str, split: str | None, flag: str, **kwargs: Any) -> Dataset | DatasetDict:
    """[`load_image_dataset`] with its column hints in command-line words (`--label-column`, ...)."""
    try:
        return load_image_dataset(source, split=split, **kwargs)
    except ValueError as error:
        message = re.sub(r"Pass `(\w+)_column=` to choose another[^.]*\.",
                         lambda m: f"Choose another with --{flag}{m.group(1)}-column.", str(error))
        if message == str(error):
            raise
        raise ValueError(message) from error


def _choose(names: list[str], source: str, preferred: str) -> str:
    picks = [n for n in ([names[0]] if len(names) == 1 else [preferred, "test"]) if n in names]
    if not picks:
        raise ValueError(f"OOD dataset {source!r} has several splits {names} and none is named {preferred!r} or "
                         f"'test'; choose one with --ood {source}:SPLIT.")
    return picks[0]


def _load_ood(source: str, split: str | None, preferred: str, image_column: str) -> tuple[Dataset, str | None]:
    """An OOD set and its split: the given one; else the only one, else `preferred`, else `test`."""
    names = None
    if split is None and os.path.isdir(os.path.expanduser(source)):
        names = saved_splits(os.path.expanduser(source)) or None  # save_to_disk: load the chosen split only
        split = None if names is None else _choose(names, source, preferred)
    loaded = _load(source, split, "ood-", image_column=image_column, label_column=None)
    if isinstance(loaded, DatasetDict):
        names = list(loaded)
        split = _choose(names, source, preferred)
        loaded = loaded[split]
    return loaded, (split if names is None or len(names) > 1 else None)


def _class_names(dataset: Dataset) -> list[str] | None:
    feature = dataset.features.get("label")
    return [str(n) for n in feature.names] if isinstance(feature, ClassLabel) else None


def load_user_data(
    dataset: str,
    *,
    split: str = "test",
    calibration_split: str | None = None,
    ood: Sequence[str] = (),
    image_column: str = "image",
    label_column: str = "label",
    ood_image_column: str | None = None,
) -> UserData:
    """Loads the in-distribution split, the calibration split and the OOD sets of an evaluation.

    Args:
        dataset (`str`):
            A Hub dataset id, a `save_to_disk` folder or an image folder (see
            [`~hf_uq.data.load_image_dataset`]).
        split (`str`, *optional*, defaults to `"test"`):
            The labelled in-distribution split to score.
        calibration_split (`str`, *optional*):
            A labelled split of the same dataset; predicted and saved with the others (e.g. to fit temperatures
            later), not scored.
        ood (`Sequence[str]`):
            OOD sets, each `SOURCE` or `SOURCE:SPLIT` (SOURCE as for `dataset`). Without a split, a source with one
            split uses it, else the split named like `split`, else `test`. Labels of OOD sets are ignored.
        image_column (`str`, *optional*, defaults to `"image"`):
            The image column of `dataset`.
        label_column (`str`, *optional*, defaults to `"label"`):
            The label column of `dataset`.
        ood_image_column (`str`, *optional*):
            The image column of the OOD sets; defaults to `image_column`.

    Returns:
        [`UserData`]. An OOD set is named after its split when it comes from `dataset` itself, else after its
        folder name or Hub id (plus `_<split>` when a split was given); names are made unique.

    Raises:
        `ValueError`: a missing folder, column or split (the message lists what exists), or an empty split.
    """
    ood_image_column = ood_image_column or image_column

    def labelled(name: str) -> Dataset:
        loaded = _load(dataset, name, "", image_column=image_column, label_column=label_column)
        return loaded.select_columns(["image", "label"])

    splits = {split: labelled(split)}
    if calibration_split is not None:
        if calibration_split == split:
            raise ValueError(f"--calibration-split {calibration_split!r} is the evaluated split itself; "
                             "choose a held-out split.")
        splits[calibration_split] = labelled(calibration_split)

    ood_splits: list[str] = []
    sources: dict[str, str] = {}
    taken = set(splits) | set(_RESERVED_SPLITS)
    for spec in ood:
        source, ood_split = _parse_ood(spec)
        data, picked = _load_ood(source, ood_split, split, ood_image_column)
        if os.path.normpath(os.path.expanduser(source)) == os.path.normpath(os.path.expanduser(dataset)) and picked:
            name = picked
        else:
            name = _base_name(source) + (f"_{ood_split}" if ood_split else "")
        name = name.replace("/", "_").strip() or "ood"
        unique, k = name, 1
        while unique in taken:
            k += 1
            unique = f"{name}_{k}"
        taken.add(unique)
        ood_splits.append(unique)
        sources[unique] = f"{source}:{picked}" if picked else source
        splits[unique] = data.select_columns(["image"])
    if not ood_splits:
        raise ValueError("Give at least one OOD set with --ood: the uncertainty is judged on telling it apart.")
    return UserData(dataset, split, splits, ood_splits, sources, calibration_split, _class_names(splits[split]))


def check_dataset_labels(data: UserData, model: UserModel) -> None:
    """Raises a `ValueError` when the labelled splits' classes differ from `model`'s.

    With `ClassLabel` names (and a model with saved class names) the names must be equal in id order; otherwise the
    labels must lie in `[0, num_labels)`.
    """
    labelled = [data.id_split] + ([data.calibration_split] if data.calibration_split else [])
    for name in labelled:
        split = data.splits[name]
        names = _class_names(split)
        if names is not None and not model.default_labels:
            if names != model.labels:
                raise ValueError(
                    f"The labels of model {model.name!r} differ from those of split {name!r} of {data.name!r}: "
                    f"{_difference('the model', model.labels, 'the dataset', names)}."
                )
            continue
        values = np.asarray(split.with_format("numpy")["label"])
        low, high = int(values.min()), int(values.max())
        count = len(names) if names is not None else high + 1
        if low < 0:
            raise ValueError(f"Split {name!r} of {data.name!r} has rows without a label ({low}); the evaluated "
                             "split must be labelled.")
        if count != len(model.labels) and (names is not None or high >= len(model.labels)):
            raise ValueError(
                f"Model {model.name!r} has {len(model.labels)} labels but split {name!r} of {data.name!r} has "
                f"{count} classes (labels 0..{high})."
            )
        if count < len(model.labels):
            logger.warning("split %r of %r shows only labels 0..%d of model %r's %d", name, data.name, high,
                           model.name, len(model.labels))


def _channels(image: PILImage.Image) -> int:
    if image.mode in ("P", "PA"):
        return 4 if image.mode == "PA" or "transparency" in image.info else 3
    return len(image.getbands())


def raw_image_formats(dataset: Dataset, column: str = "image", batch_size: int = 512) -> Counter[tuple[int, int, int]]:
    """Counts the `(width, height, channels)` of the stored images, reading only their headers.

    Args:
        dataset (`datasets.Dataset`): data with an `Image` column.
        column (`str`, *optional*, defaults to `"image"`): the image column.
        batch_size (`int`, *optional*, defaults to 512): rows read at a time.

    Returns:
        `Counter[tuple[int, int, int]]`: how many images have each format (as stored, before any processor).
    """
    raw = dataset.select_columns([column]).cast_column(column, ImageFeature(decode=False))
    counts: Counter[tuple[int, int, int]] = Counter()
    starts = range(0, len(raw), batch_size)
    for start in tqdm(starts, desc="check images", unit="batch", leave=False, disable=len(starts) < 20):
        for item in raw[start : start + batch_size][column]:
            data = item.get("bytes")
            with PILImage.open(io.BytesIO(data) if data else item["path"]) as image:
                counts[(*image.size, _channels(image))] += 1
    return counts


def _describe(fmt: tuple[int, int, int]) -> str:
    width, height, channels = fmt
    return f"{width}x{height} pixels with {channels} channel{'s' if channels != 1 else ''}"


def check_ood_images(data: UserData) -> None:
    """Raises a `ValueError` when an OOD set's raw images differ in size or channel count from the id split's.

    The images are compared as stored, before any image processor resizes or converts them: an OOD set that only
    differs in format would be told apart by its format, not its content. When the id split's images come in
    several sizes only the channel counts are compared.
    """
    id_formats = raw_image_formats(data.splits[data.id_split])
    id_sizes = {fmt[:2] for fmt in id_formats}
    id_channels = {fmt[2] for fmt in id_formats}
    id_text = " or ".join(_describe(fmt) for fmt, _ in id_formats.most_common(3))
    for name in data.ood_splits:
        formats = raw_image_formats(data.splits[name])
        wrong = {
            fmt: n for fmt, n in formats.items()
            if fmt[2] not in id_channels or (len(id_sizes) == 1 and fmt[:2] not in id_sizes)
        }
        if wrong:
            fmt, n = max(wrong.items(), key=lambda item: item[1])
            raise ValueError(
                f"OOD set {name!r} ({data.ood_sources.get(name, name)}) has images of {_describe(fmt)} ({n} of "
                f"{sum(formats.values())}), but split {data.id_split!r} of {data.name!r} has {id_text}; OOD images "
                "must match the in-distribution images before preprocessing, or the format alone gives them away."
            )


# ------------------------------------------------------------------------------------------ orchestration


def _quantization(model: nn.Module) -> dict[str, Any] | None:
    info = getattr(model, "hf_uq_quantization", None)
    if info is not None:
        return {"backend": info.backend, "weights": info.weights, "activations": info.activations,
                "skipped": sorted(info.skipped)}
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    if config is None:
        return None
    method = config.get("quant_method") if isinstance(config, dict) else getattr(config, "quant_method", None)
    return {"backend": str(getattr(method, "value", method)), "weights": None, "activations": None, "skipped": []}


def _model_path(source: str, output: str) -> str:
    """The checkpoint as `results.json` records it: relative to the output folder when local, else the Hub id."""
    path = os.path.expanduser(source)
    if os.path.exists(path):
        return os.path.relpath(os.path.abspath(path), os.path.abspath(output))
    return source


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def evaluate_checkpoints(
    models: Sequence[str],
    dataset: str,
    *,
    ood: Sequence[str],
    teacher: str | None = None,
    split: str = "test",
    calibration_split: str | None = None,
    image_column: str = "image",
    label_column: str = "label",
    ood_image_column: str | None = None,
    output: str | os.PathLike = DEFAULT_OUTPUT,
    bootstrap: int = 1000,
    batch_size: int = 64,
    budget: str | None = None,
    measure_budget: bool = True,
    latency_repeats: int = 30,
    num_threads: int | None = None,
    cpu: bool = False,
    command: str | Sequence[str] | None = None,
    report: bool = True,
    progress: bool = True,
) -> dict[str, Any] | None:
    """Runs the evaluation protocol on checkpoints and writes `results.json`, the predictions and the report.

    Each checkpoint is a route of family `"user"` named after its folder or Hub id; the first of `models` is the
    reference every cost is relative to, and `teacher` (when given) the route the fidelity is measured against.
    Under `accelerate launch` with several processes every split is sharded across them and the predictions are
    gathered on the main process, which alone measures the budgets and writes the files.

    Args:
        models (`Sequence[str]`): model folders (written by `save_pretrained`, with the image processor) or Hub ids.
        dataset (`str`): a Hub dataset id, a `save_to_disk` folder or an image folder.
        ood (`Sequence[str]`): OOD sets, each `SOURCE` or `SOURCE:SPLIT` (see [`load_user_data`]).
        teacher (`str`, *optional*): a model folder or Hub id to measure the fidelity against (e.g. an ensemble).
        split (`str`, *optional*, defaults to `"test"`): the labelled in-distribution split.
        calibration_split (`str`, *optional*): a labelled split predicted and saved with the others, not scored.
        image_column, label_column (`str`, *optional*): columns of `dataset` (default `"image"`, `"label"`).
        ood_image_column (`str`, *optional*): image column of the OOD sets; defaults to `image_column`.
        output (`str` or `os.PathLike`, *optional*, defaults to `"hf_uq_evaluate"`): the folder to write.
        bootstrap (`int`, *optional*, defaults to 1000): bootstrap resamples per interval (0: estimates only).
        batch_size (`int`, *optional*, defaults to 64): images per forward pass while predicting.
        budget (`str`, *optional*): `"memory=1.2,latency=1.5"` (either or both), relative to the reference route.
        measure_budget (`bool`, *optional*, defaults to `True`): measure parameters, FLOPs, memory and latency.
        latency_repeats (`int`, *optional*, defaults to 30): timed forwards per route and batch size.
        num_threads (`int`, *optional*): torch threads while predicting; `None` keeps the current setting.
        cpu (`bool`, *optional*, defaults to `False`): predict on the CPU even when a GPU is visible.
        command (`str` or `Sequence[str]`, *optional*): the command line recorded in `results.json`.
        report (`bool`, *optional*, defaults to `True`): write `report.md`, `report.html` and the figures.
        progress (`bool`, *optional*, defaults to `True`): show progress bars (main process only).

    Returns:
        `dict[str, Any] | None`: the results document on the main process, `None` on the others.
    """
    from .distributed import distributed_state, predict_sharded
    from .protocol import RouteSpec, build_results, measure_budgets, parse_budget, predict_routes
    from .results_io import save_predictions, write_results

    if isinstance(models, str) or not models:
        raise ValueError("Give at least one model (--model).")
    _check_int("--bootstrap", bootstrap, 0)
    _check_int("--batch-size", batch_size, 1)
    _check_int("latency repeats", latency_repeats, 1)
    if num_threads is not None:
        _check_int("--num-threads", num_threads, 1)
    limits = parse_budget(budget) if budget is not None else None
    output = os.fspath(output)
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"--output {output!r} is a file; give a folder.")

    state = distributed_state(cpu)
    sources = list(models) + ([teacher] if teacher is not None else [])
    users = load_user_models(sources, state)
    check_label_spaces(users)
    with state.main_process_first():  # datasets caches a Hub or image-folder dataset once
        data = load_user_data(dataset, split=split, calibration_split=calibration_split, ood=ood,
                              image_column=image_column, label_column=label_column,
                              ood_image_column=ood_image_column)
    for user in users:
        check_dataset_labels(data, user)
    check_ood_images(data)

    for user in users if state.device.type != "cpu" else ():
        user.model.to(state.device)
    routes = [
        RouteSpec(name=user.name, family="user", model=user.model, image_processor=user.image_processor,
                  quantization=_quantization(user.model),
                  extra={"source": user.source, "architecture": type(user.model).__name__})
        for user in users
    ]
    predicted = predict_sharded(predict_routes, routes, data.splits, state, batch_size=batch_size,
                                progress=progress and state.is_main_process, num_threads=num_threads)
    if not state.is_main_process:  # the others are done: only the main process scores, measures and writes
        return None

    budgets = (measure_budgets(routes, data.splits[data.id_split], repeats=latency_repeats)
               if measure_budget else None)
    per_seed = {name: [splits] for name, splits in predicted.items()}
    meta = {
        route.name: {"family": route.family, "knob": None, "quantization": route.quantization,
                     "extra": route.extra, "models": {"0": _model_path(user.source, output)}}
        for route, user in zip(routes, users, strict=True)
    }
    data_info = {"name": dataset, "labels": data.labels or users[0].labels, "calibration_split": calibration_split,
                 "ood_sources": data.ood_sources, "num_samples": {k: len(v) for k, v in data.splits.items()}}
    if command is None:
        command = ["hf-uq", "evaluate", *[a for m in models for a in ("--model", m)], "--dataset", dataset,
                   *[a for o in ood for a in ("--ood", o)]]
    results = build_results(
        per_seed, budgets, meta, seeds=[0], reference=users[0].name,
        teacher=users[-1].name if teacher is not None else None, id_split=data.id_split,
        ood_splits=data.ood_splits, shift_splits=[], bootstrap=bootstrap, budget_limits=limits,
        command=command, data_info=data_info,
        settings_extra={"batch_size": batch_size, "num_processes": state.num_processes},
        progress=progress,
    )
    os.makedirs(output, exist_ok=True)
    save_predictions(os.path.join(output, "predictions"), per_seed, seeds=[0])
    write_results(results, output)
    if report:
        from .report import write_report

        write_report(results, output, per_seed)
    return results
