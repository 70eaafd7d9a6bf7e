"""Fixtures of the `hf-uq` command tests: tiny checkpoints saved with their image processors, small image folders.

Everything is built offline from the embedded digits benchmark; datasets' cache goes to a temporary folder.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from datasets import DatasetDict  # noqa: E402

import hf_uq  # noqa: E402, F401  (registers the hf_uq Auto classes)
from hf_uq.data import load_digits_benchmark  # noqa: E402
from hf_uq.models.tiny import (  # noqa: E402
    tiny_cnn,
    tiny_cnn_image_processor,
    tiny_vit,
    tiny_vit_image_processor,
)

#: A small ViT: 2 layers, 32 wide.
TINY_VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
#: Images per class in the test split (41 rows in all: one class gets an extra one, so shards are uneven).
PER_CLASS = 5


@pytest.fixture(scope="module", autouse=True)
def private_datasets_cache(tmp_path_factory):
    """datasets' image-folder cache goes to a temporary folder, not the home folder."""
    import datasets.config

    previous = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = str(tmp_path_factory.mktemp("hf_datasets_cache"))
    yield datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = previous


@pytest.fixture(scope="session")
def digits():
    return load_digits_benchmark(0)


def _save_images(rows, folder: Path, per_class: int | None, extra: int = 0, convert=None) -> None:
    counts: dict[int, int] = {}
    for row in rows:
        label = row["label"]
        counts[label] = counts.get(label, 0) + 1
        if per_class is not None and counts[label] > per_class + (extra if label == 0 else 0):
            continue
        target = folder / str(label) if per_class is not None else folder
        target.mkdir(parents=True, exist_ok=True)
        image = row["image"] if convert is None else convert(row["image"])
        image.save(target / f"{counts[label]:03d}.png")


@pytest.fixture(scope="session")
def workspace(tmp_path_factory, digits) -> dict[str, Path]:
    """Model folders and data folders shared by the command tests."""
    root = tmp_path_factory.mktemp("evaluate")
    paths = {name: root / name for name in ("vit", "cnn", "other_labels", "ten_labels", "data", "near",
                                            "near_rgb", "near_16px", "saved", "no_label")}
    tiny_vit(seed=0, **TINY_VIT).save_pretrained(paths["vit"])
    tiny_vit_image_processor().save_pretrained(paths["vit"])
    tiny_cnn(seed=1).save_pretrained(paths["cnn"])
    tiny_cnn_image_processor().save_pretrained(paths["cnn"])
    other = {i: f"class_{i}" for i in range(8)}
    tiny_vit(seed=2, id2label=other, **TINY_VIT).save_pretrained(paths["other_labels"])
    tiny_vit_image_processor().save_pretrained(paths["other_labels"])
    tiny_vit(num_labels=10, seed=3, **TINY_VIT).save_pretrained(paths["ten_labels"])
    tiny_vit_image_processor().save_pretrained(paths["ten_labels"])

    _save_images(digits["test"], paths["data"] / "test", PER_CLASS, extra=1)
    _save_images(digits["validation"], paths["data"] / "validation", 2)
    near = digits["ood_near"].select(range(25))
    _save_images(near, paths["near"], None)
    _save_images(near.select(range(6)), paths["near_rgb"], None, convert=lambda im: im.convert("RGB"))
    _save_images(near.select(range(6)), paths["near_16px"], None, convert=lambda im: im.resize((16, 16)))

    small = DatasetDict({"test": digits["test"].select(range(16)), "validation": digits["validation"].select(range(8))})
    empty = DatasetDict({**small, "empty": digits["test"].select([])})
    empty.save_to_disk(str(paths["saved"]))
    small.rename_column("label", "digit").save_to_disk(str(paths["no_label"]))
    return paths
