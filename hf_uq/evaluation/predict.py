"""Run any image classifier over a dataset split and collect what the metrics need, as numpy arrays.

[`predict`] works for plain transformers / timm classifiers (their uncertainty is the maximum-softmax-probability
score, `1 - max p`) and for every hf_uq model (deep ensembles, duos, temperature-scaled models, MC dropout,
...), whose [`~hf_uq.UncertaintyClassifierOutput`] carries its own `uncertainty`, member logits and
decomposition. The result, a [`Predictions`], is what [`~hf_uq.evaluation.score_split`] scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from PIL import Image as PILImage
from torch import nn

from ..data.adapter import processor_num_channels
from ..functional.classification import top_label
from ..functional.scores import msp
from ._budget_common import _check_int, _eval_mode, _model_device, _num_threads

__all__ = ["Predictions", "iter_batches", "predict"]

_PER_SAMPLE = ("uncertainty", "total_uncertainty", "aleatoric_uncertainty", "epistemic_uncertainty")


@dataclass(frozen=True)
class Predictions:
    """
    A model's predictions on one dataset split, as numpy arrays (N samples, C classes, M members).

    Args:
        logits (`np.ndarray` of shape `(N, C)`):
            The usable prediction's logits (for ensembles: log mean member probabilities), float32.
        probs (`np.ndarray` of shape `(N, C)`):
            `softmax(logits)`, computed in float64.
        labels (`np.ndarray` of shape `(N,)`):
            Integer labels; -1 where a sample has none (OOD splits).
        uncertainty (`np.ndarray` of shape `(N,)`):
            The model's default uncertainty score, higher = less trustworthy (`1 - max p` for plain classifiers).
        member_logits (`np.ndarray` of shape `(M, N, C)`, *optional*):
            Member / sample logits of ensembles, duos and MC dropout.
        total_uncertainty, aleatoric_uncertainty, epistemic_uncertainty (`np.ndarray` of shape `(N,)`, *optional*):
            The model's decomposition of its predictive uncertainty, where it has one.
    """

    logits: np.ndarray
    probs: np.ndarray
    labels: np.ndarray
    uncertainty: np.ndarray
    member_logits: np.ndarray | None = None
    total_uncertainty: np.ndarray | None = None
    aleatoric_uncertainty: np.ndarray | None = None
    epistemic_uncertainty: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("logits", "probs"):
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.ndim != 2:
                raise ValueError(f"`{name}` must be a 2-D numpy array (N, C), got {_shape_of(value)}")
        n, c = self.logits.shape
        if self.probs.shape != (n, c):
            raise ValueError(f"`probs` has shape {self.probs.shape} but `logits` has {(n, c)}")
        for name in ("labels",) + _PER_SAMPLE:
            value = getattr(self, name)
            if value is None and name not in ("labels", "uncertainty"):
                continue
            if not isinstance(value, np.ndarray) or value.shape != (n,):
                raise ValueError(f"`{name}` must have shape ({n},) like `logits`, got {_shape_of(value)}")
        if self.labels.dtype.kind not in "iu":
            raise ValueError(f"`labels` must be integers, got dtype {self.labels.dtype}")
        if self.member_logits is not None and (
            not isinstance(self.member_logits, np.ndarray)
            or self.member_logits.ndim != 3
            or self.member_logits.shape[1:] != (n, c)
        ):
            raise ValueError(
                f"`member_logits` must have shape (M, {n}, {c}), got {_shape_of(self.member_logits)}"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        """The number of classes C."""
        return self.logits.shape[1]

    @property
    def confidence(self) -> np.ndarray:
        """(N,) top-label probability."""
        return top_label(self.probs)[0]

    @property
    def prediction(self) -> np.ndarray:
        """(N,) predicted class (argmax, lowest index on ties)."""
        return top_label(self.probs)[1]

    @property
    def correct(self) -> np.ndarray:
        """(N,) whether the prediction equals the label (always False where there is no label)."""
        return self.prediction == self.labels

    @property
    def has_labels(self) -> bool:
        """Whether every sample has a label (no negative entries)."""
        return bool(len(self.labels)) and int(self.labels.min()) >= 0

    def select(self, indices: Any) -> Predictions:
        """The predictions of the samples at `indices` (an index array or a boolean mask)."""
        changes = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, value in changes.items():
            if value is not None:
                changes[name] = value[:, indices] if name == "member_logits" else value[indices]
        return Predictions(**changes)

    @classmethod
    def concatenate(cls, predictions: Sequence[Predictions]) -> Predictions:
        """Join the predictions of several splits (e.g. every covariate-shift split) made by one model.

        Optional fields are kept only when every part has them (with the same number of members).
        """
        parts = list(predictions)
        if not parts:
            raise ValueError("`predictions` is empty: nothing to concatenate")
        if len({p.num_classes for p in parts}) > 1:
            raise ValueError(f"the parts have different numbers of classes: {[p.num_classes for p in parts]}")
        joined = {}
        for f in dataclasses.fields(cls):
            values = [getattr(p, f.name) for p in parts]
            if any(v is None for v in values):
                joined[f.name] = None
            elif f.name == "member_logits":
                if len({v.shape[0] for v in values}) > 1:
                    joined[f.name] = None
                else:
                    joined[f.name] = np.concatenate(values, axis=1)
            else:
                joined[f.name] = np.concatenate(values)
        return cls(**joined)


def _shape_of(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"shape {value.shape}"
    return f"{type(value).__name__}"


# ------------------------------------------------------------------------------------------ batches


def _to_pil(image: Any, mode: str) -> PILImage.Image:
    if not isinstance(image, PILImage.Image):
        image = PILImage.fromarray(np.asarray(image))
    return image if image.mode == mode else image.convert(mode)


def _label_key(row: Mapping[str, Any]) -> str | None:
    return "labels" if "labels" in row else "label" if "label" in row else None


def _split_name(dataset: Any) -> str:
    split = getattr(dataset, "split", None)
    return f"split {str(split)!r}" if split is not None else "`dataset_split`"


def iter_batches(
    dataset_split: Dataset,
    image_processor: Any | None = None,
    batch_size: int = 64,
) -> Iterator[dict[str, torch.Tensor]]:
    """An iterator of `{"pixel_values", ..., "labels"}` batches of a split, ready for `model(**inputs)`.

    This is also the dataloader that `fit_temperature(s)` of hf_uq models accept. The split and the arguments are
    checked when this is called; images are processed lazily, batch by batch.

    Args:
        dataset_split (`datasets.Dataset`):
            Either raw data with an `image` column (and optionally `label`), or data already yielding
            `pixel_values` (e.g. [`~hf_uq.data.with_pixel_values`]'s view; then `image_processor` must be `None`).
        image_processor (*optional*):
            Applied to each batch of images (converted to RGB unless the processor declares one channel). Every
            output named in its `model_input_names` is kept, so a [`~hf_uq.DuoImageProcessor`] also gives
            `pixel_values_small`.
        batch_size (`int`, *optional*, defaults to 64):
            Rows per batch.

    Returns:
        `Iterator[dict[str, torch.Tensor]]`: per batch, the model inputs and `labels` (int64; -1 where a row has
        no label).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}")
    if not isinstance(dataset_split, Dataset):
        raise TypeError(
            f"`dataset_split` must be a datasets.Dataset (one split), got {type(dataset_split).__name__}"
        )
    n = len(dataset_split)
    if n == 0:
        raise ValueError(f"{_split_name(dataset_split)} is empty (0 rows): nothing to predict")
    first = dataset_split[0:1]
    preprocessed = "pixel_values" in first
    if preprocessed and image_processor is not None:
        raise ValueError(
            f"{_split_name(dataset_split)} already yields `pixel_values`; pass `image_processor=None`"
        )
    if not preprocessed:
        if image_processor is None:
            raise ValueError(
                f"{_split_name(dataset_split)} yields no `pixel_values` (columns: {list(first)}); "
                "pass an `image_processor`"
            )
        if "image" not in first:
            raise ValueError(f"{_split_name(dataset_split)} has no `image` column (columns: {list(first)})")
    return _generate_batches(dataset_split, image_processor, batch_size, preprocessed, _label_key(first))


def _generate_batches(
    dataset_split: Dataset, image_processor: Any, batch_size: int, preprocessed: bool, label_key: str | None
) -> Iterator[dict[str, torch.Tensor]]:
    mode = "L" if processor_num_channels(image_processor) == 1 else "RGB"
    input_names = list(getattr(image_processor, "model_input_names", None) or ["pixel_values"])
    for start in range(0, len(dataset_split), batch_size):
        rows = dataset_split[start : start + batch_size]
        if preprocessed:
            inputs = {
                k: v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v), dtype=torch.float32)
                for k, v in rows.items()
                if k.startswith("pixel_values")
            }
        else:
            images = [_to_pil(image, mode) for image in rows["image"]]
            features = image_processor(images, return_tensors="pt")
            inputs = {k: features[k] for k in input_names if k in features}
        count = len(inputs["pixel_values"])
        if label_key is None:
            labels = torch.full((count,), -1, dtype=torch.long)
        else:
            labels = torch.as_tensor(rows[label_key], dtype=torch.long).clamp_min(-1)
        yield {**inputs, "labels": labels}


# ------------------------------------------------------------------------------------------ predict


def _read_output(output: Any) -> dict[str, torch.Tensor | None]:
    """Logits and, where the model gives them, its uncertainty fields."""
    if isinstance(output, torch.Tensor):
        fields = {"logits": output}
    elif isinstance(output, (tuple, list)) and not hasattr(output, "logits"):
        fields = {"logits": output[0] if output else None}
    else:
        fields = {name: getattr(output, name, None) for name in ("logits", "member_logits") + _PER_SAMPLE}
    logits = fields["logits"]
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(
            "the model must return (batch, num_labels) logits (a tensor, an output with `.logits`, or a tuple "
            f"starting with them), got {type(output).__name__}"
        )
    return {k: (v.detach().float().cpu() if isinstance(v, torch.Tensor) else None) for k, v in fields.items()}


def predict(
    model: nn.Module,
    dataset_split: Dataset,
    image_processor: Any | None = None,
    *,
    batch_size: int = 64,
    progress: bool = True,
    desc: str | None = None,
    num_threads: int | None = None,
) -> Predictions:
    """Predict a whole split with `model` under `torch.inference_mode()`, in eval mode.

    The model's modes are restored afterwards (MC dropout wrappers still sample their dropout layers: they
    switch them on inside their own forward). Inputs are moved to the model's device; results come back as
    numpy arrays on the CPU.

    Args:
        model (`nn.Module`):
            Any image classifier called as `model(pixel_values=...)`: transformers or timm-wrapper models (their
            uncertainty is `1 - max softmax probability`), or hf_uq models (their own `uncertainty` and
            ensemble fields are kept).
        dataset_split (`datasets.Dataset`):
            Raw `image` / `label` data, or data already yielding `pixel_values` (see [`iter_batches`]).
        image_processor (*optional*):
            The model's image processor. For a [`~hf_uq.DuoForImageClassification`], its
            [`~hf_uq.DuoImageProcessor`] (the members' own preprocessings), or one processor shared by both.
        batch_size (`int`, *optional*, defaults to 64):
            Images per forward pass.
        progress (`bool`, *optional*, defaults to `True`):
            Show a tqdm progress bar.
        desc (`str`, *optional*):
            The progress bar's description; defaults to the model's class name.
        num_threads (`int`, *optional*):
            torch intra-op threads during prediction, restored afterwards. Tiny models run fastest with 1,
            especially on a busy machine; `None` keeps the current setting.

    Returns:
        [`Predictions`]

    Example:

    ```python
    >>> from hf_uq.data import load_digits_benchmark
    >>> from hf_uq.evaluation import predict
    >>> from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor
    >>> split = load_digits_benchmark(seed=0)["test"]
    >>> predictions = predict(tiny_vit(), split, tiny_vit_image_processor(), progress=False)
    >>> predictions.probs.shape
    (433, 8)
    ```
    """
    from tqdm.auto import tqdm

    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    batches = iter_batches(dataset_split, image_processor, batch_size)
    device = _model_device(model)
    collected: dict[str, list[torch.Tensor]] = {}
    labels: list[torch.Tensor] = []
    bar = tqdm(total=len(dataset_split), desc=desc or type(model).__name__, unit="img",
               leave=False, disable=not progress)
    if num_threads is not None:
        _check_int("num_threads", num_threads, 1)
    with bar, _num_threads(num_threads), _eval_mode(model), torch.inference_mode():
        for batch in batches:
            labels.append(batch.pop("labels"))
            inputs = {k: v.to(device) for k, v in batch.items()}
            for name, value in _read_output(model(**inputs)).items():
                collected.setdefault(name, []).append(value)
            bar.update(len(labels[-1]))

    def joined(name: str, axis: int = 0) -> np.ndarray | None:
        values = collected.get(name)
        if not values or any(v is None for v in values):
            return None
        return torch.cat(values, dim=axis).numpy()

    logits = joined("logits")
    probs = torch.from_numpy(logits).double().softmax(-1).numpy()
    uncertainty = joined("uncertainty")
    if uncertainty is None:
        uncertainty = msp(probs)
    return Predictions(
        logits=logits,
        probs=probs,
        labels=torch.cat(labels).numpy().astype(np.int64),
        uncertainty=np.asarray(uncertainty, dtype=np.float64),
        member_logits=joined("member_logits", axis=1),
        total_uncertainty=joined("total_uncertainty"),
        aleatoric_uncertainty=joined("aleatoric_uncertainty"),
        epistemic_uncertainty=joined("epistemic_uncertainty"),
    )
