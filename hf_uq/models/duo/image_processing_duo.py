"""Image processor of the Asymmetric Duo: the large member's and the small member's preprocessing in one object."""

from __future__ import annotations

import copy
import importlib
import json
import os
from typing import Any

from PIL import Image
from transformers import AutoImageProcessor, TimmWrapperImageProcessor
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature
from transformers.models.auto.image_processing_auto import get_image_processor_class_from_name

_MEMBERS = ("large_processor", "small_processor")


def member_processor_to_dict(processor: BaseImageProcessor) -> dict[str, Any]:
    """A member image processor as a JSON-ready dict that [`member_processor_from_dict`] rebuilds.

    `TimmWrapperImageProcessor` keeps its settings in the model's `pretrained_cfg` (its own `save_pretrained`
    writes nothing); its resolved `data_config` is stored as the `pretrained_cfg` to rebuild it from.
    """
    if not isinstance(processor, BaseImageProcessor):
        raise TypeError(f"expected an image processor, got {type(processor).__name__}")
    if isinstance(processor, TimmWrapperImageProcessor):
        output = {
            "image_processor_type": type(processor).__name__,
            "architecture": getattr(processor, "architecture", None),
            "pretrained_cfg": dict(processor.data_config),
        }
    else:
        output = processor.to_dict()
    output.pop("auto_map", None)
    return json.loads(json.dumps(output, sort_keys=True, default=_json_default))


def member_processor_from_dict(processor_dict: dict[str, Any]) -> BaseImageProcessor:
    """Rebuild a member image processor from [`member_processor_to_dict`]'s output."""
    name = processor_dict.get("image_processor_type")
    processor_class = get_image_processor_class_from_name(name) if name else None
    if processor_class is None:
        raise ValueError(
            f"unknown member image processor type {name!r}: it must be a transformers image processor or one "
            "registered with AutoImageProcessor"
        )
    return processor_class.from_dict(dict(processor_dict))


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _load_member(
    processor: BaseImageProcessor | dict | str | os.PathLike, name: str, **kwargs: Any
):
    if isinstance(processor, BaseImageProcessor):
        return processor
    if isinstance(processor, dict):
        return member_processor_from_dict(processor)
    if isinstance(processor, (str, os.PathLike)):
        return AutoImageProcessor.from_pretrained(os.fspath(processor), **kwargs)
    raise TypeError(
        f"`{name}` must be an image processor, a dict or a folder, got {type(processor).__name__}"
    )


class DuoImageProcessor(BaseImageProcessor):
    r"""
    Image processor of a [`DuoForImageClassification`]: runs the large member's and the small member's own
    image processors on the same images.

    Returns `pixel_values` (the large member's input) and, only when the two preprocessings differ,
    `pixel_values_small` (the small member's input), the keyword arguments of
    [`DuoForImageClassification.forward`]. Both member processors are stored in `preprocessor_config.json`,
    timm members (`TimmWrapperImageProcessor`) included, so the processor round-trips through
    `save_pretrained` and `AutoImageProcessor.from_pretrained` (after `import hf_uq`, or with
    `trust_remote_code=True` without hf_uq) and serves `pipeline("image-classification", model=folder)`.

    Args:
        large_processor (`BaseImageProcessor` or `dict`):
            The large member's image processor, or its dict from [`member_processor_to_dict`].
        small_processor (`BaseImageProcessor` or `dict`, *optional*):
            The small member's image processor; defaults to the large one's (shared preprocessing).
        do_convert_rgb (`bool`, *optional*, defaults to `True`):
            Convert PIL images to RGB before either member sees them (timm's transforms do not).

    Example:

    ```python
    >>> from hf_uq.models.duo import DuoImageProcessor
    >>> from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit_image_processor
    >>> processor = DuoImageProcessor.from_members(tiny_vit_image_processor(), tiny_cnn_image_processor(tiny_cnn()))
    >>> sorted(processor(images, return_tensors="pt").keys())  # doctest: +SKIP
    ['pixel_values', 'pixel_values_small']
    ```
    """

    model_input_names = ["pixel_values", "pixel_values_small"]

    def __init__(
        self,
        large_processor: BaseImageProcessor | dict[str, Any] | None = None,
        small_processor: BaseImageProcessor | dict[str, Any] | None = None,
        do_convert_rgb: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("image_processor_type", None)
        super().__init__(**kwargs)
        if large_processor is None:
            raise ValueError("`large_processor` is required")
        self.large_processor = _load_member(large_processor, "large_processor")
        self.small_processor = (
            self.large_processor
            if small_processor is None
            else _load_member(small_processor, "small_processor")
        )
        self.do_convert_rgb = bool(do_convert_rgb)

    @classmethod
    def from_members(
        cls,
        large_processor: BaseImageProcessor | str | os.PathLike,
        small_processor: BaseImageProcessor | str | os.PathLike | None = None,
        *,
        do_convert_rgb: bool = True,
        **from_pretrained_kwargs: Any,
    ) -> DuoImageProcessor:
        """Pair the members' image processors (instances, or folders / Hub ids loaded with `AutoImageProcessor`).

        Args:
            large_processor: the large member's image processor.
            small_processor: the small member's; `None` when it shares the large member's preprocessing.
            do_convert_rgb: see [`DuoImageProcessor`].
            from_pretrained_kwargs: passed to `AutoImageProcessor.from_pretrained` for folders and Hub ids.

        The member processors are copied, so later changes to the instances passed in do not leak in.
        """
        large = copy.deepcopy(
            _load_member(large_processor, "large_processor", **from_pretrained_kwargs)
        )
        small = None
        if small_processor is not None:
            small = copy.deepcopy(
                _load_member(small_processor, "small_processor", **from_pretrained_kwargs)
            )
        return cls(large_processor=large, small_processor=small, do_convert_rgb=do_convert_rgb)

    @property
    def shares_preprocessing(self) -> bool:
        """Whether both members see the same input (then `pixel_values_small` is not returned)."""
        return self.small_processor is self.large_processor or member_processor_to_dict(
            self.large_processor
        ) == member_processor_to_dict(self.small_processor)

    def _convert_rgb(self, images: Any) -> Any:
        if isinstance(images, (list, tuple)):
            return [self._convert_rgb(image) for image in images]
        if isinstance(images, Image.Image) and images.mode != "RGB":
            return images.convert("RGB")
        return images

    def preprocess(
        self, images: Any, return_tensors: str | None = "pt", **kwargs: Any
    ) -> BatchFeature:
        """
        Preprocess an image or a batch of images for both members.

        Args:
            images (`ImageInput`):
                PIL images, numpy arrays or tensors, single or batched, as the member processors accept them.
            return_tensors (`str`, *optional*, defaults to `"pt"`):
                Tensor type of the outputs (timm members support `"pt"` only).
            kwargs:
                Passed to both member processors.

        Returns:
            [`BatchFeature`] with `pixel_values` and, when the preprocessings differ, `pixel_values_small`.
        """
        if self.do_convert_rgb:
            images = self._convert_rgb(images)
        data = {
            "pixel_values": self.large_processor(images, return_tensors=return_tensors, **kwargs)[
                "pixel_values"
            ]
        }
        if not self.shares_preprocessing:
            small = self.small_processor(images, return_tensors=return_tensors, **kwargs)
            data["pixel_values_small"] = small["pixel_values"]
        return BatchFeature(data=data, tensor_type=return_tensors)

    def to_dict(self) -> dict[str, Any]:
        """Serializes this processor, each member as [`member_processor_to_dict`] writes it."""
        output = {
            key: copy.deepcopy(value)
            for key, value in self.__dict__.items()
            if key not in _MEMBERS and not key.startswith("_")
        }
        output["large_processor"] = member_processor_to_dict(self.large_processor)
        output["small_processor"] = member_processor_to_dict(self.small_processor)
        output["image_processor_type"] = type(self).__name__
        return output

    def save_pretrained(
        self, save_directory: str | os.PathLike, *args: Any, remote_code: bool = True, **kwargs: Any
    ) -> Any:
        r"""
        Save `preprocessor_config.json` and, with `remote_code=True` (default), the self-contained Python files
        defining this class plus an `AutoImageProcessor` entry in its `auto_map` (see `hf_uq.hub.remote_code`).
        """
        if remote_code and type(self).__module__.startswith("hf_uq."):
            remote = importlib.import_module("...hub.remote_code", __package__)
            return remote.save_pretrained_with_remote_code(
                self, super().save_pretrained, save_directory, *args, **kwargs
            )
        return super().save_pretrained(save_directory, *args, **kwargs)


__all__ = ["DuoImageProcessor", "member_processor_from_dict", "member_processor_to_dict"]
