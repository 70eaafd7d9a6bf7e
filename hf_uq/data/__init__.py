"""Datasets: the embedded digits benchmark and an adapter for Hub and local image datasets."""

from .adapter import load_image_dataset, with_pixel_values
from .digits import (
    DIGITS_ID2LABEL,
    DIGITS_IMAGE_MEAN,
    DIGITS_IMAGE_STD,
    DIGITS_LABELS,
    DIGITS_MAX_VALUE,
    OOD_SPLITS,
    SHIFT_CORRUPTIONS,
    SHIFT_SEVERITIES,
    SHIFT_SPLITS,
    load_digits_benchmark,
    shift_split_name,
)

__all__ = [
    "DIGITS_ID2LABEL",
    "DIGITS_IMAGE_MEAN",
    "DIGITS_IMAGE_STD",
    "DIGITS_LABELS",
    "DIGITS_MAX_VALUE",
    "OOD_SPLITS",
    "SHIFT_CORRUPTIONS",
    "SHIFT_SEVERITIES",
    "SHIFT_SPLITS",
    "load_digits_benchmark",
    "load_image_dataset",
    "shift_split_name",
    "with_pixel_values",
]
