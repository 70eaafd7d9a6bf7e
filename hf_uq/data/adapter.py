"""Loads image-classification datasets from the Hub or from disk into hf_uq's `image` / `label` layout."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict, Image, Value, load_dataset, load_from_disk
from PIL import Image as PILImage

__all__ = ["load_image_dataset", "looks_like_local_path", "saved_splits", "with_pixel_values"]

#: Value used in `labels` for samples without a label (ignored by `torch.nn.CrossEntropyLoss`).
IGNORE_INDEX = -100


def looks_like_local_path(path_or_id: str | os.PathLike) -> bool:
    """Whether `path_or_id` names a local path rather than a Hub id such as `"cifar10"` or `"uoft-cs/cifar10"`."""
    if isinstance(path_or_id, os.PathLike):
        return True
    text = str(path_or_id)
    return (
        os.path.isabs(text)
        or text.startswith((".", "~"))
        or "\\" in text
        or text.endswith("/")
        or text.count("/") > 1
    )


def saved_splits(folder: str) -> list[str] | None:
    """Split names of a `DatasetDict.save_to_disk` folder; `[]` for a single saved `Dataset`; `None` otherwise."""
    dict_file = os.path.join(folder, "dataset_dict.json")
    if os.path.isfile(dict_file):
        with open(dict_file, encoding="utf-8") as f:
            return list(json.load(f)["splits"])
    if os.path.isfile(os.path.join(folder, "state.json")) and os.path.isfile(
        os.path.join(folder, "dataset_info.json")
    ):
        return []
    return None


def _load_saved_split(folder: str, name: str, source: str, **kwargs) -> Dataset:
    """Loads one saved split, reporting an empty one clearly (datasets cannot reload a split with no data files)."""
    with open(os.path.join(folder, "state.json"), encoding="utf-8") as f:
        if not json.load(f).get("_data_files"):
            raise ValueError(f"Split {name!r} of {source!r} is empty (0 rows).")
    return load_from_disk(folder, **kwargs)


def _load_local(folder: str, split: str | None, source: str, **kwargs) -> Dataset | DatasetDict:
    if not os.path.exists(folder):
        raise ValueError(f"Dataset folder {source!r} does not exist.")
    if not os.path.isdir(folder):
        raise ValueError(
            f"{source!r} is a file; expected a folder written by `save_to_disk` or an image folder with one "
            "subfolder per class."
        )
    splits = saved_splits(folder)
    if splits == []:
        return _load_saved_split(folder, split or "dataset", source, **kwargs)
    if splits is not None:
        if split is not None:
            if split not in splits:
                raise ValueError(
                    f"Unknown split {split!r} in {source!r}; available splits: {splits}."
                )
            splits = [split]
        return DatasetDict(
            {
                name: _load_saved_split(os.path.join(folder, name), name, source, **kwargs)
                for name in splits
            }
        )
    if not any(files for _, _, files in os.walk(folder)):
        raise ValueError(f"Dataset folder {source!r} contains no files.")
    return load_dataset("imagefolder", data_dir=folder, **kwargs)


def _load_hub(dataset_id: str, split: str | None, **kwargs) -> Dataset | DatasetDict:
    try:
        return load_dataset(dataset_id, split=split, **kwargs)
    except ValueError as err:
        if split is not None and "Unknown split" in str(err):
            raise ValueError(f"Unknown split {split!r} for dataset {dataset_id!r}: {err}") from err
        raise
    except (ConnectionError, FileNotFoundError) as err:
        raise ValueError(
            f"{dataset_id!r} is neither an existing local folder nor a dataset that could be loaded from the Hub: "
            f"{err}"
        ) from err


def _prepare_split(
    dataset: Dataset, name: str, source: str, image_column: str, label_column: str | None
) -> Dataset:
    """Checks one split and renames its columns to `image` / `label`."""
    columns = list(dataset.column_names)
    if dataset.num_rows == 0:
        raise ValueError(f"Split {name!r} of {source!r} is empty (0 rows).")
    if image_column not in columns:
        raise ValueError(
            f"Image column {image_column!r} not found in split {name!r} of {source!r}; available columns: {columns}. "
            "Pass `image_column=` to choose another."
        )
    if label_column is not None and label_column not in columns:
        raise ValueError(
            f"Label column {label_column!r} not found in split {name!r} of {source!r}; available columns: {columns}. "
            "Pass `label_column=` to choose another (or `label_column=None` for unlabeled data)."
        )

    renames = {image_column: "image"}
    if label_column is not None:
        renames[label_column] = "label"
    renames = {old: new for old, new in renames.items() if old != new}
    for old, new in renames.items():
        if new in columns and new not in renames:
            raise ValueError(
                f"Cannot rename column {old!r} to {new!r} in split {name!r} of {source!r}: a column {new!r} already "
                f"exists (columns: {columns})."
            )
    if renames:
        dataset = dataset.rename_columns(renames)

    feature = dataset.features["image"]
    if not isinstance(feature, Image):
        if isinstance(feature, Value) and feature.dtype in (
            "string",
            "large_string",
            "binary",
            "large_binary",
        ):
            dataset = dataset.cast_column("image", Image())
        else:
            raise ValueError(
                f"Column {image_column!r} of split {name!r} of {source!r} holds {feature}, not images; expected a "
                "`datasets.Image()` feature or image paths."
            )
    return dataset


def load_image_dataset(
    path_or_id: str | os.PathLike,
    split: str | None = None,
    image_column: str = "image",
    label_column: str | None = "label",
    **kwargs,
) -> Dataset | DatasetDict:
    """Loads an image-classification dataset and renames its columns to `image` and `label`.

    The source is resolved in this order: an existing local folder written by `save_to_disk` (read with
    `datasets.load_from_disk`); any other existing local folder, read as an image folder with one subfolder per class
    (`load_dataset("imagefolder", data_dir=...)`); otherwise a Hub dataset id (`datasets.load_dataset`). Strings that
    look like paths (absolute, starting with `.` or `~`, or with more than one `/`) are never sent to the Hub.

    Args:
        path_or_id (`str` or `os.PathLike`):
            A Hub dataset id (e.g. `"uoft-cs/cifar10"`), a `save_to_disk` folder or an image folder.
        split (`str`, *optional*):
            The split to return. If `None`, every split is returned in a `DatasetDict`.
        image_column (`str`, *optional*, defaults to `"image"`):
            The column holding the images; renamed to `image`.
        label_column (`str`, *optional*, defaults to `"label"`):
            The column holding the class labels; renamed to `label`. `None` for unlabeled data (e.g. an OOD set).
        kwargs (*optional*):
            Passed to `datasets.load_dataset` (Hub ids, image folders) or `datasets.load_from_disk`.

    Returns:
        `datasets.Dataset` when `split` is given (or when the folder holds a single saved `Dataset`), else
        `datasets.DatasetDict`.

    Raises:
        `ValueError`: if the folder does not exist, the image or label column is missing (the message lists the
        columns that exist), the requested split does not exist (the message lists the available splits), or a split
        is empty.

    Example:

    ```python
    >>> from hf_uq.data import load_image_dataset
    >>> cifar = load_image_dataset("uoft-cs/cifar10", split="test", image_column="img")  # doctest: +SKIP
    ```
    """
    if kwargs.get("streaming"):
        raise ValueError(
            "Streaming datasets are not supported by `load_image_dataset`; drop `streaming=True`."
        )
    source = os.fspath(path_or_id)
    expanded = os.path.expanduser(source)
    if os.path.exists(expanded) or looks_like_local_path(path_or_id):
        loaded = _load_local(expanded, split, source, **kwargs)
    else:
        loaded = _load_hub(source, split, **kwargs)

    if isinstance(loaded, DatasetDict):
        if split is not None:
            if split not in loaded:
                raise ValueError(
                    f"Unknown split {split!r} in {source!r}; available splits: {list(loaded)}."
                )
            return _prepare_split(loaded[split], split, source, image_column, label_column)
        if not loaded:
            raise ValueError(f"{source!r} holds no splits.")
        return DatasetDict(
            {
                name: _prepare_split(ds, name, source, image_column, label_column)
                for name, ds in loaded.items()
            }
        )

    own_split = str(loaded.split) if loaded.split is not None else None
    if split is not None and own_split is not None and split != own_split:
        raise ValueError(
            f"Unknown split {split!r} in {source!r}; available splits: [{own_split!r}]."
        )
    return _prepare_split(
        loaded, split or own_split or "dataset", source, image_column, label_column
    )


def processor_num_channels(image_processor: Any) -> int | None:
    """Number of input channels an image processor produces, when it can be told."""
    data_config = getattr(image_processor, "data_config", None)  # timm-based processors
    if isinstance(data_config, Mapping) and "input_size" in data_config:
        return int(data_config["input_size"][0])
    mean = getattr(image_processor, "image_mean", None)
    if isinstance(mean, Sequence) and not isinstance(mean, str):
        return len(mean)
    return None


class _PixelValuesTransform:
    """Batch transform turning `image` / `label` columns into `pixel_values` / `labels` (picklable)."""

    def __init__(
        self, image_processor: Any, image_column: str, label_column: str | None, mode: str | None
    ):
        self.image_processor = image_processor
        self.image_column = image_column
        self.label_column = label_column
        self.mode = mode

    def _to_pil(self, image: Any) -> PILImage.Image:
        if not isinstance(image, PILImage.Image):
            image = PILImage.fromarray(np.asarray(image))
        if self.mode is not None and image.mode != self.mode:
            image = image.convert(self.mode)
        return image

    def __call__(self, batch: dict[str, list]) -> dict[str, torch.Tensor]:
        images = [self._to_pil(image) for image in batch[self.image_column]]
        pixel_values = self.image_processor(images, return_tensors="pt")["pixel_values"]
        output = {"pixel_values": pixel_values}
        if self.label_column is not None and self.label_column in batch:
            labels = torch.as_tensor(batch[self.label_column], dtype=torch.long)
            output["labels"] = torch.where(
                labels < 0, torch.full_like(labels, IGNORE_INDEX), labels
            )
        return output


def with_pixel_values(
    dataset: Dataset | DatasetDict,
    image_processor: Any,
    *,
    image_column: str = "image",
    label_column: str | None = "label",
    num_channels: int | None = None,
) -> Dataset | DatasetDict:
    """Returns a view of `dataset` that applies `image_processor` lazily, giving `pixel_values` and `labels`.

    The transform runs on access (`Dataset.with_transform`), so nothing is precomputed or cached, and `dataset`
    itself is left untouched. Images are converted to the processor's channel count first (grayscale to RGB when it
    expects 3 channels), so 8x8 grayscale digits work with any RGB model. The output is ready for
    `transformers.Trainer` (which then needs `remove_unused_columns=False`).

    Args:
        dataset (`datasets.Dataset` or `datasets.DatasetDict`):
            Data with an image column (PIL images, or arrays).
        image_processor:
            A transformers image processor (including `TimmWrapperImageProcessor`) or any callable mapping a list
            of PIL images and `return_tensors="pt"` to a dict with `pixel_values`.
        image_column (`str`, *optional*, defaults to `"image"`):
            The image column.
        label_column (`str`, *optional*, defaults to `"label"`):
            The label column, returned as `labels` (int64). Negative labels (datasets' "no label", used by the OOD
            splits) become -100, the index `CrossEntropyLoss` ignores. `None`, or a missing column, gives no
            `labels`.
        num_channels (`int`, *optional*):
            Channels the processor expects (1 or 3). Defaults to what the processor declares (timm's `input_size`,
            else the length of `image_mean`), else 3.

    Returns:
        The same type as `dataset`, yielding `{"pixel_values": Tensor[C, H, W], "labels": int}` per row.
    """
    if num_channels is None:
        num_channels = processor_num_channels(image_processor) or 3
    if num_channels not in (1, 3):
        raise ValueError(f"num_channels must be 1 or 3, got {num_channels}")
    columns = dataset.column_names
    names = columns.values() if isinstance(dataset, DatasetDict) else [columns]
    for split_columns in names:
        if image_column not in split_columns:
            raise ValueError(
                f"Image column {image_column!r} not found; available columns: {split_columns}."
            )
    transform = _PixelValuesTransform(
        image_processor, image_column, label_column, "RGB" if num_channels == 3 else "L"
    )
    return dataset.with_transform(transform)
