from collections import Counter

import numpy as np
import pytest
from datasets import ClassLabel, DatasetDict
from sklearn.datasets import load_digits

from hf_uq.data import (
    DIGITS_LABELS,
    SHIFT_CORRUPTIONS,
    SHIFT_SEVERITIES,
    SHIFT_SPLITS,
    load_digits_benchmark,
    shift_split_name,
)

DIGIT_LEVELS = {round(v * 255 / 16) for v in range(17)}


@pytest.fixture(scope="module")
def benchmark() -> DatasetDict:
    return load_digits_benchmark(seed=0)


def pixels(split) -> np.ndarray:
    return np.stack([np.asarray(image) for image in split["image"]])


def image_keys(split) -> list[bytes]:
    return [image.tobytes() for image in pixels(split)]


def test_split_names_and_sizes(benchmark):
    assert list(benchmark) == ["train", "validation", "test", "ood_near", "ood_far", *SHIFT_SPLITS]
    assert len(SHIFT_SPLITS) == 9 and shift_split_name("rotation", 2) == "shift_rotation_2"
    sizes = {name: benchmark[name].num_rows for name in ("train", "validation", "test")}
    assert sizes == {"train": 866, "validation": 144, "test": 433}
    assert benchmark["ood_near"].num_rows == 354
    assert benchmark["ood_far"].num_rows == benchmark["test"].num_rows
    for name in SHIFT_SPLITS:
        assert benchmark[name].num_rows == 433


def test_stratified_in_distribution_classes(benchmark):
    totals = Counter(int(t) for t in load_digits().target if t < 8)
    for name, fraction in (("train", 0.6), ("validation", 0.1), ("test", 0.3)):
        split = benchmark[name]
        assert split.features["label"] == ClassLabel(names=DIGITS_LABELS)
        counts = Counter(split["label"])
        assert set(counts) == set(range(8)), name
        for label, total in totals.items():
            assert abs(counts[label] - fraction * total) <= 1.5, (name, label)


def test_splits_partition_the_in_distribution_digits(benchmark):
    digits = load_digits()
    raw = np.rint(digits.images[digits.target < 8] * 255 / 16).astype(np.uint8)
    raw_keys = Counter(image.tobytes() for image in raw)
    keys = {name: image_keys(benchmark[name]) for name in ("train", "validation", "test")}
    assert not set(keys["train"]) & set(keys["validation"])
    assert not set(keys["train"]) & set(keys["test"])
    assert not set(keys["validation"]) & set(keys["test"])
    assert Counter(keys["train"] + keys["validation"] + keys["test"]) == raw_keys


def test_images_are_8x8_grayscale_on_the_digit_levels(benchmark):
    for name in ("train", "ood_near", "ood_far"):
        image = benchmark[name][0]["image"]
        assert image.mode == "L" and image.size == (8, 8)
    assert set(np.unique(pixels(benchmark["train"]))) <= DIGIT_LEVELS


def test_ood_splits(benchmark):
    near, far = benchmark["ood_near"], benchmark["ood_far"]
    assert set(near["label"]) == {-1} and set(far["label"]) == {-1}
    assert Counter(near["source_label"]) == {8: 174, 9: 180}
    assert set(far["source_label"]) == {-1}
    assert "source_label" not in benchmark["test"].column_names


def test_far_ood_matches_the_digits_intensity_range(benchmark):
    far, digits = pixels(benchmark["ood_far"]), pixels(benchmark["test"])
    assert set(np.unique(far)) <= DIGIT_LEVELS
    assert (far.min(axis=(1, 2)) == 0).all() and (far.max(axis=(1, 2)) == 255).all()
    assert (digits.min(axis=(1, 2)) == 0).all() and (digits.max(axis=(1, 2)) == 255).mean() > 0.95
    # Patches are varied photo content, not copies of one another.
    assert len(set(image_keys(benchmark["ood_far"]))) > 0.95 * len(far)


@pytest.mark.parametrize("corruption", SHIFT_CORRUPTIONS)
def test_shift_distortion_grows_with_severity(benchmark, corruption):
    clean = pixels(benchmark["test"]).astype(float)
    distortion = []
    for severity in (1, 2, 3):
        split = benchmark[shift_split_name(corruption, severity)]
        assert split["label"] == benchmark["test"]["label"]
        distortion.append(np.abs(pixels(split).astype(float) - clean).mean())
    assert 0 < distortion[0] < distortion[1] < distortion[2], distortion
    assert len(SHIFT_SEVERITIES[corruption]) == 3


def test_same_seed_is_byte_identical(benchmark):
    again = load_digits_benchmark(seed=0)
    assert list(again) == list(benchmark)
    for name in benchmark:
        assert again[name].data.table.equals(benchmark[name].data.table), name


def test_other_seed_gives_other_data(benchmark):
    other = load_digits_benchmark(seed=1)
    assert set(image_keys(other["train"])) != set(image_keys(benchmark["train"]))
    assert image_keys(other["ood_far"]) != image_keys(benchmark["ood_far"])
    assert image_keys(other["shift_gaussian_noise_1"]) != image_keys(
        benchmark["shift_gaussian_noise_1"]
    )
    # Near-OOD holds every 8 and 9 whatever the seed.
    assert other["ood_near"].data.table.equals(benchmark["ood_near"].data.table)


def test_options_select_splits():
    small = load_digits_benchmark(
        seed=3, include_ood=False, shifts=["rotation"], severities=[2], num_far_ood=10
    )
    assert list(small) == ["train", "validation", "test", "shift_rotation_2"]
    with_far = load_digits_benchmark(seed=3, shifts=(), num_far_ood=10)
    assert with_far["ood_far"].num_rows == 10 and "shift_rotation_1" not in with_far


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shifts": ["fog"]}, "Unknown corruption"),
        ({"severities": [4]}, "Severities"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_digits_benchmark(**kwargs)
