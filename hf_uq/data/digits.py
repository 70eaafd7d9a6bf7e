"""The embedded default benchmark: scikit-learn's handwritten digits, plus OOD and shifted splits.

The benchmark needs no network: every split is built in memory from data that ships with scikit-learn.

| split | content | `label` |
|---|---|---|
| `train` / `validation` / `test` | digits 0-7, stratified 60 / 10 / 30 | 0..7 |
| `ood_near` | every digit 8 and 9 (unseen, semantically close) | -1 (`source_label` = 8 or 9) |
| `ood_far` | 8x8 patches of the two photographs of `sklearn.datasets.load_sample_images` | -1 (`source_label` = -1) |
| `shift_<corruption>_<severity>` | the `test` split under a corruption of severity 1..3 | 0..7 |

Images are 8x8 grayscale (PIL mode `"L"`); the digits' 17 intensity levels 0..16 are stored as
`uint8 = round(value * 255 / 16)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value
from PIL import Image as PILImage
from scipy import ndimage

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
    "shift_split_name",
]

#: Class names of the in-distribution digits (the classifier's labels).
DIGITS_LABELS: list[str] = [str(i) for i in range(8)]
#: `id2label` matching `DIGITS_LABELS`, ready for a model config.
DIGITS_ID2LABEL: dict[int, str] = dict(enumerate(DIGITS_LABELS))
#: Largest raw intensity of `sklearn.datasets.load_digits` (values are integers 0..16).
DIGITS_MAX_VALUE: int = 16
#: Per-channel mean and std of the in-distribution digits after rescaling to [0, 1]
#: (measured: 0.303 and 0.377), for image processors' `image_mean` / `image_std`.
DIGITS_IMAGE_MEAN: list[float] = [0.3, 0.3, 0.3]
DIGITS_IMAGE_STD: list[float] = [0.38, 0.38, 0.38]

#: Names of the out-of-distribution splits.
OOD_SPLITS: list[str] = ["ood_near", "ood_far"]

#: Magnitude of each corruption per severity 1, 2, 3 (index 0 is severity 1):
#: - `gaussian_noise`: std of additive Gaussian noise, in raw intensity units (the digits span 0..16);
#:   the result is clipped to [0, 16].
#: - `gaussian_blur`: std in pixels of a Gaussian filter over the 8x8 image (zero padding).
#: - `rotation`: rotation angle in degrees, sign drawn at random per image (bilinear, zero padding).
#: Chosen so that the tiny ViT of `hf_uq.models.tiny` (~97 % clean accuracy) keeps roughly 90 %, 80 % and 60 %.
SHIFT_SEVERITIES: dict[str, tuple[float, float, float]] = {
    "gaussian_noise": (2.0, 3.5, 5.0),
    "gaussian_blur": (0.6, 0.8, 1.0),
    "rotation": (5.0, 15.0, 25.0),
}
#: Corruption names, in split order.
SHIFT_CORRUPTIONS: list[str] = list(SHIFT_SEVERITIES)


def shift_split_name(corruption: str, severity: int) -> str:
    """Name of the covariate-shift split for `corruption` at `severity` (e.g. `"shift_rotation_2"`)."""
    return f"shift_{corruption}_{severity}"


#: Every covariate-shift split built by default, in the order they appear in the `DatasetDict`.
SHIFT_SPLITS: list[str] = [
    shift_split_name(name, severity) for name in SHIFT_CORRUPTIONS for severity in (1, 2, 3)
]

# Stream identifiers that keep each random component independent of the others.
_STREAM_FAR_OOD = 1
_STREAM_SHIFT = 2
# Minimum contrast (max - min, on 0..255 luminance) of a photo patch before stretching,
# so that flat sky or out-of-focus background does not become amplified noise.
_MIN_PATCH_CONTRAST = 48.0


def _features(with_source_label: bool) -> Features:
    features = {"image": Image(), "label": ClassLabel(names=DIGITS_LABELS)}
    if with_source_label:
        features["source_label"] = Value("int64")
    return Features(features)


def _to_uint8(images: np.ndarray) -> np.ndarray:
    """Maps raw intensities in [0, 16] (float or int) to uint8 0..255, clipping out-of-range values."""
    scaled = np.clip(images, 0.0, DIGITS_MAX_VALUE) * (255.0 / DIGITS_MAX_VALUE)
    return np.rint(scaled).astype(np.uint8)


def _make_split(
    images: np.ndarray, labels: np.ndarray, source_labels: np.ndarray | None = None
) -> Dataset:
    """Builds an in-memory split from raw (N, 8, 8) intensities in [0, 16]."""
    pixels = _to_uint8(images)
    data = {
        "image": [PILImage.fromarray(img) for img in pixels],
        "label": [int(v) for v in labels],
    }
    if source_labels is not None:
        data["source_label"] = [int(v) for v in source_labels]
    return Dataset.from_dict(data, features=_features(source_labels is not None))


def _photo_patches(num_patches: int, rng: np.random.Generator, downsample: int) -> np.ndarray:
    """Cuts `num_patches` contrasted 8x8 patches from the scikit-learn sample photos.

    Each photo is converted to luminance and block-averaged by `downsample` (so that strokes and edges have a
    digit-like scale), then patches are drawn at random positions, half from each photo, and shuffled. Each patch is
    min-max stretched to [0, 16] and rounded to integers, the value set of the digits.
    """
    from sklearn.datasets import load_sample_images

    photos = []
    for rgb in load_sample_images().images:
        gray = rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
        h, w = (
            (gray.shape[0] // downsample) * downsample,
            (gray.shape[1] // downsample) * downsample,
        )
        gray = (
            gray[:h, :w]
            .reshape(h // downsample, downsample, w // downsample, downsample)
            .mean(axis=(1, 3))
        )
        photos.append(gray)

    offsets = np.arange(8)
    collected = []
    for photo_index, photo in enumerate(photos):
        wanted = num_patches // len(photos) + int(photo_index < num_patches % len(photos))
        kept = np.empty((0, 8, 8))
        # Draw candidates in vectorized rounds until enough of them pass the contrast threshold.
        while len(kept) < wanted:
            rows = rng.integers(0, photo.shape[0] - 7, size=4 * wanted)
            cols = rng.integers(0, photo.shape[1] - 7, size=4 * wanted)
            candidates = photo[
                rows[:, None, None] + offsets[None, :, None],
                cols[:, None, None] + offsets[None, None, :],
            ]
            contrast = candidates.max(axis=(1, 2)) - candidates.min(axis=(1, 2))
            kept = np.concatenate([kept, candidates[contrast >= _MIN_PATCH_CONTRAST]])
        collected.append(kept[:wanted])
    patches = np.concatenate(collected)[rng.permutation(num_patches)]
    # Stretch each patch to the digits' range and keep their integer value set.
    low = patches.min(axis=(1, 2), keepdims=True)
    high = patches.max(axis=(1, 2), keepdims=True)
    return np.rint((patches - low) / (high - low) * DIGITS_MAX_VALUE)


def _corrupt(
    images: np.ndarray, corruption: str, severity: int, rng: np.random.Generator
) -> np.ndarray:
    """Applies `corruption` at `severity` (1-based) to raw (N, 8, 8) float intensities in [0, 16]."""
    magnitude = SHIFT_SEVERITIES[corruption][severity - 1]
    if corruption == "gaussian_noise":
        out = images + rng.normal(0.0, magnitude, size=images.shape)
    elif corruption == "gaussian_blur":
        out = ndimage.gaussian_filter(
            images, sigma=(0.0, magnitude, magnitude), mode="constant", cval=0.0
        )
    elif corruption == "rotation":
        signs = rng.choice(np.array([-1.0, 1.0]), size=len(images))
        out = np.empty_like(images)
        for sign in (-1.0, 1.0):
            mask = signs == sign
            if mask.any():
                out[mask] = ndimage.rotate(
                    images[mask],
                    sign * magnitude,
                    axes=(2, 1),
                    reshape=False,
                    order=1,
                    mode="constant",
                    cval=0.0,
                )
    else:
        raise ValueError(f"Unknown corruption {corruption!r}; available: {SHIFT_CORRUPTIONS}")
    return np.clip(out, 0.0, DIGITS_MAX_VALUE)


def load_digits_benchmark(
    seed: int = 0,
    *,
    include_ood: bool = True,
    shifts: Sequence[str] | None = None,
    severities: Sequence[int] = (1, 2, 3),
    num_far_ood: int | None = None,
    photo_downsample: int = 4,
) -> DatasetDict:
    """Builds the embedded default benchmark from `sklearn.datasets.load_digits`, in memory, in about a second.

    In-distribution data are the 1,443 digits of classes 0-7, split stratified into train / validation / test
    (60 / 10 / 30 %). `ood_near` holds every 8 and 9; `ood_far` holds 8x8 patches of natural photographs, stretched
    to the digits' intensity range; the `shift_*` splits are the test split under graded corruptions (see
    `SHIFT_SEVERITIES` for the magnitudes). The same `seed` gives byte-identical data; another seed gives other
    splits, other photo patches and other corruption noise.

    Args:
        seed (`int`, *optional*, defaults to 0):
            Seed of the split, of the photo patch positions and of the corruptions' randomness (in [0, 2**32)).
        include_ood (`bool`, *optional*, defaults to `True`):
            Whether to add the `ood_near` and `ood_far` splits.
        shifts (`Sequence[str]`, *optional*):
            Corruptions to add as covariate-shift splits, from `SHIFT_CORRUPTIONS`. Defaults to all of them;
            pass `()` for none.
        severities (`Sequence[int]`, *optional*, defaults to `(1, 2, 3)`):
            Severities to build for each corruption.
        num_far_ood (`int`, *optional*):
            Number of photo patches in `ood_far`. Defaults to the size of the test split.
        photo_downsample (`int`, *optional*, defaults to 4):
            Block-averaging factor applied to the 427x640 photos before cutting patches.

    Returns:
        `datasets.DatasetDict`: splits with an `image` column (8x8 PIL images, mode `"L"`) and a `label` column
        (`ClassLabel` with names `"0"`..`"7"`; -1 in the OOD splits, which also carry an int `source_label`: the
        original digit, or -1 for photo patches).

    Example:

    ```python
    >>> from hf_uq.data import load_digits_benchmark
    >>> benchmark = load_digits_benchmark(seed=0)
    >>> benchmark["train"].num_rows, benchmark["test"].num_rows, benchmark["ood_near"].num_rows
    (866, 433, 354)
    ```
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0 <= int(seed) < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    shifts = SHIFT_CORRUPTIONS if shifts is None else list(shifts)
    unknown = [name for name in shifts if name not in SHIFT_SEVERITIES]
    if unknown:
        raise ValueError(f"Unknown corruption(s) {unknown}; available: {SHIFT_CORRUPTIONS}")
    bad_severities = [s for s in severities if s not in (1, 2, 3)]
    if bad_severities:
        raise ValueError(f"Severities must be in (1, 2, 3), got {bad_severities}")
    if photo_downsample < 1:
        raise ValueError(f"photo_downsample must be >= 1, got {photo_downsample}")

    digits = load_digits()
    images, targets = digits.images, digits.target
    in_dist = np.flatnonzero(targets < len(DIGITS_LABELS))
    n_total = len(in_dist)
    n_test = round(0.3 * n_total)
    n_val = round(0.1 * n_total)
    rest, test_idx = train_test_split(
        in_dist, test_size=n_test, stratify=targets[in_dist], random_state=int(seed)
    )
    train_idx, val_idx = train_test_split(
        rest, test_size=n_val, stratify=targets[rest], random_state=int(seed)
    )

    splits = {
        "train": _make_split(images[train_idx], targets[train_idx]),
        "validation": _make_split(images[val_idx], targets[val_idx]),
        "test": _make_split(images[test_idx], targets[test_idx]),
    }

    if include_ood:
        near_idx = np.flatnonzero(targets >= len(DIGITS_LABELS))
        splits["ood_near"] = _make_split(
            images[near_idx], np.full(len(near_idx), -1), targets[near_idx]
        )
        n_far = len(test_idx) if num_far_ood is None else int(num_far_ood)
        rng = np.random.default_rng([int(seed), _STREAM_FAR_OOD])
        far = _photo_patches(n_far, rng, photo_downsample)
        splits["ood_far"] = _make_split(far, np.full(n_far, -1), np.full(n_far, -1))

    clean_test = images[test_idx].astype(np.float64)
    for corruption_index, corruption in enumerate(SHIFT_CORRUPTIONS):
        if corruption not in shifts:
            continue
        for severity in severities:
            rng = np.random.default_rng([int(seed), _STREAM_SHIFT, corruption_index, int(severity)])
            corrupted = _corrupt(clean_test, corruption, int(severity), rng)
            splits[shift_split_name(corruption, severity)] = _make_split(
                corrupted, targets[test_idx]
            )

    return DatasetDict(splits)
