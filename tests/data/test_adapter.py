import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image
from PIL import Image as PILImage

from hf_uq.data import adapter, load_digits_benchmark, load_image_dataset, with_pixel_values
from hf_uq.models.tiny import tiny_cnn_image_processor, tiny_vit_image_processor


@pytest.fixture(scope="module")
def digits() -> DatasetDict:
    return load_digits_benchmark(seed=0, shifts=())


def small_dataset(n: int = 6, image_column: str = "image", label_column: str = "label") -> Dataset:
    rng = np.random.default_rng(0)
    images = [
        PILImage.fromarray(rng.integers(0, 256, size=(8, 8), dtype=np.uint8)) for _ in range(n)
    ]
    features = Features({image_column: Image(), label_column: ClassLabel(names=["a", "b"])})
    return Dataset.from_dict(
        {image_column: images, label_column: [i % 2 for i in range(n)]}, features=features
    )


def write_image_folder(root, classes=("cat", "dog"), per_class=3):
    rng = np.random.default_rng(1)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            array = rng.integers(0, 256, size=(10, 12, 3), dtype=np.uint8)
            PILImage.fromarray(array).save(root / name / f"{i}.png")
    return root


def test_save_to_disk_round_trip(digits, tmp_path):
    subset = DatasetDict(
        {
            "train": digits["train"].select(range(20)),
            "ood_near": digits["ood_near"].select(range(5)),
        }
    )
    subset.save_to_disk(tmp_path / "saved")
    loaded = load_image_dataset(tmp_path / "saved")
    assert isinstance(loaded, DatasetDict) and list(loaded) == ["train", "ood_near"]
    for name in subset:
        assert loaded[name].features == subset[name].features
        assert loaded[name]["label"] == subset[name]["label"]
        assert [im.tobytes() for im in loaded[name]["image"]] == [
            im.tobytes() for im in subset[name]["image"]
        ]
    test = load_image_dataset(str(tmp_path / "saved"), split="ood_near")
    assert isinstance(test, Dataset) and test["source_label"] == subset["ood_near"]["source_label"]


def test_single_saved_dataset(tmp_path):
    small_dataset().save_to_disk(tmp_path / "one")
    loaded = load_image_dataset(tmp_path / "one")
    assert isinstance(loaded, Dataset) and loaded.num_rows == 6


def test_image_folder(tmp_path):
    root = write_image_folder(tmp_path / "pets")
    loaded = load_image_dataset(root, split="train", cache_dir=str(tmp_path / "cache"))
    assert loaded.num_rows == 6
    assert loaded.features["label"] == ClassLabel(names=["cat", "dog"])
    assert sorted(loaded["label"]) == [0, 0, 0, 1, 1, 1]
    assert loaded[0]["image"].size == (12, 10)


def test_columns_are_renamed(tmp_path):
    small_dataset(image_column="img", label_column="fine_label").save_to_disk(tmp_path / "renamed")
    loaded = load_image_dataset(tmp_path / "renamed", image_column="img", label_column="fine_label")
    assert loaded.column_names == ["image", "label"]
    assert loaded.features["label"].names == ["a", "b"]
    unlabeled = load_image_dataset(tmp_path / "renamed", image_column="img", label_column=None)
    assert unlabeled.column_names == ["image", "fine_label"]


def test_image_paths_are_cast_to_images(tmp_path):
    root = write_image_folder(tmp_path / "files", classes=("x",), per_class=2)
    paths = sorted(str(p) for p in (root / "x").iterdir())
    Dataset.from_dict({"path": paths, "label": [0, 1]}).save_to_disk(tmp_path / "paths")
    loaded = load_image_dataset(tmp_path / "paths", image_column="path")
    assert isinstance(loaded.features["image"], Image) and loaded[0]["image"].size == (12, 10)


def test_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_image_dataset(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="does not exist"):
        load_image_dataset("./no/such/folder")


def test_missing_label_column_lists_columns(tmp_path):
    small_dataset(label_column="target").save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match=r"Label column 'label' not found.*\['image', 'target'\]"):
        load_image_dataset(tmp_path / "d")


def test_missing_image_column_lists_columns(tmp_path):
    small_dataset().save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match=r"Image column 'img' not found.*\['image', 'label'\]"):
        load_image_dataset(tmp_path / "d", image_column="img")


def test_empty_split(tmp_path):
    DatasetDict({"train": small_dataset(), "test": small_dataset().select([])}).save_to_disk(
        tmp_path / "d"
    )
    with pytest.raises(ValueError, match="Split 'test' .* is empty"):
        load_image_dataset(tmp_path / "d", split="test")
    with pytest.raises(ValueError, match="is empty"):
        load_image_dataset(tmp_path / "d")
    assert load_image_dataset(tmp_path / "d", split="train").num_rows == 6


def test_unknown_split_lists_available(tmp_path):
    DatasetDict({"train": small_dataset(), "test": small_dataset()}).save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match=r"Unknown split 'validation'.*\['train', 'test'\]"):
        load_image_dataset(tmp_path / "d", split="validation")


def test_rename_conflict(tmp_path):
    data = small_dataset().add_column("img", [0] * 6)
    data.save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match="Cannot rename column 'img' to 'image'.*already exists"):
        load_image_dataset(tmp_path / "d", image_column="img")


def test_hub_ids_go_to_load_dataset(monkeypatch):
    calls = []

    def fake_load_dataset(path, split=None, **kwargs):
        calls.append((path, split, kwargs))
        if path == "offline/missing":
            raise ConnectionError("Couldn't reach 'offline/missing' on the Hub")
        return small_dataset(image_column="img")

    monkeypatch.setattr(adapter, "load_dataset", fake_load_dataset)
    loaded = load_image_dataset("someone/cifar", split="test", image_column="img", revision="main")
    assert calls == [("someone/cifar", "test", {"revision": "main"})]
    assert loaded.column_names == ["image", "label"]
    with pytest.raises(ValueError, match="neither an existing local folder nor"):
        load_image_dataset("offline/missing")


@pytest.mark.parametrize("make_processor", [tiny_vit_image_processor, tiny_cnn_image_processor])
def test_with_pixel_values(digits, make_processor):
    original_format = dict(digits["test"].format)
    data = with_pixel_values(digits, make_processor())
    assert isinstance(data, DatasetDict)
    row = data["test"][0]
    assert set(row) == {"pixel_values", "labels"}
    assert row["pixel_values"].shape == (3, 16, 16) and row["pixel_values"].dtype == torch.float32
    assert int(row["labels"]) == digits["test"][0]["label"]
    batch = data["train"][:5]
    assert batch["pixel_values"].shape == (5, 3, 16, 16)
    assert batch["labels"].tolist() == digits["train"]["label"][:5]
    # Grayscale digits become three identical channels, normalized around the digits' mean.
    assert torch.equal(batch["pixel_values"][:, 0], batch["pixel_values"][:, 2])
    assert abs(float(data["train"][:200]["pixel_values"].mean())) < 0.5
    # Missing labels become the loss's ignore index; the source dataset is untouched.
    assert set(data["ood_near"][:10]["labels"].tolist()) == {-100}
    assert digits["test"].format == original_format
    assert "image" in digits["test"][0]


def test_with_pixel_values_channels_and_labels(digits):
    class GrayProcessor:
        image_mean = [0.5]

        def __call__(self, images, return_tensors="pt"):
            modes = {image.mode for image in images}
            assert modes == {"L"}
            arrays = np.stack([np.asarray(image, dtype=np.float32)[None] / 255 for image in images])
            return {"pixel_values": torch.from_numpy(arrays)}

    data = with_pixel_values(digits["test"], GrayProcessor(), label_column=None)
    row = data[0]
    assert set(row) == {"pixel_values"} and row["pixel_values"].shape == (1, 8, 8)
    with pytest.raises(ValueError, match="Image column 'img' not found"):
        with_pixel_values(digits["test"], GrayProcessor(), image_column="img")


def test_non_image_column_and_file_path(tmp_path):
    Dataset.from_dict({"pixels": [1, 2], "label": [0, 1]}).save_to_disk(tmp_path / "ints")
    with pytest.raises(ValueError, match="holds .*not images"):
        load_image_dataset(tmp_path / "ints", image_column="pixels")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        load_image_dataset(tmp_path / "file.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="contains no files"):
        load_image_dataset(tmp_path / "empty")
