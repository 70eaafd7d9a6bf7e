"""DuoImageProcessor: per-member inputs, persistence through AutoImageProcessor, and the pipeline on a saved duo."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoImageProcessor, pipeline

import hf_uq  # noqa: F401  (registers the Auto classes)
from hf_uq.models.duo import DuoForImageClassification
from hf_uq.models.duo.image_processing_duo import (
    DuoImageProcessor,
    member_processor_from_dict,
    member_processor_to_dict,
)
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor

LABELS = {0: "zero", 1: "one", 2: "two", 3: "three"}


def images(n=3, seed=0, mode="RGB"):
    rng = np.random.default_rng(seed)
    shape = (8, 8, 3) if mode == "RGB" else (8, 8)
    return [Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)) for _ in range(n)]


@pytest.fixture(scope="module")
def members():
    large = tiny_vit(
        num_labels=4, id2label=LABELS, hidden_size=32, num_hidden_layers=2, intermediate_size=64
    )
    small = tiny_cnn(num_labels=4, id2label=LABELS, channels=(8, 8, 16, 16), seed=1)
    return large.eval(), small.eval()


@pytest.fixture(scope="module")
def processor(members):
    return DuoImageProcessor.from_members(
        tiny_vit_image_processor(), tiny_cnn_image_processor(members[1])
    )


def test_each_member_gets_its_own_preprocessing(processor):
    batch = images()
    out = processor(batch, return_tensors="pt")
    assert set(out) == {"pixel_values", "pixel_values_small"} and not processor.shares_preprocessing
    assert torch.equal(
        out["pixel_values"], processor.large_processor(batch, return_tensors="pt")["pixel_values"]
    )
    assert torch.equal(
        out["pixel_values_small"],
        processor.small_processor(batch, return_tensors="pt")["pixel_values"],
    )
    assert out["pixel_values_small"].shape == (3, 3, 16, 16)


def test_pixel_values_small_only_when_preprocessing_differs():
    shared = DuoImageProcessor.from_members(tiny_vit_image_processor())
    equal = DuoImageProcessor.from_members(tiny_vit_image_processor(), tiny_vit_image_processor())
    resized = DuoImageProcessor.from_members(
        tiny_vit_image_processor(), tiny_vit_image_processor(image_size=24)
    )
    for processor in (shared, equal):
        assert processor.shares_preprocessing
        assert set(processor(images(), return_tensors="pt")) == {"pixel_values"}
    out = resized(images(), return_tensors="pt")
    assert out["pixel_values"].shape[-1] == 16 and out["pixel_values_small"].shape[-1] == 24


def test_round_trip_through_auto_image_processor(processor, tmp_path):
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved["image_processor_type"] == "DuoImageProcessor"
    # the timm member's settings live in the duo's own json (TimmWrapperImageProcessor saves nothing)
    assert saved["small_processor"]["pretrained_cfg"]["input_size"] == [3, 16, 16]
    reloaded = AutoImageProcessor.from_pretrained(tmp_path)
    assert type(reloaded) is DuoImageProcessor
    assert reloaded.to_dict() == processor.to_dict() | {"auto_map": saved["auto_map"]}
    batch = images(seed=1)
    expected, actual = processor(batch, return_tensors="pt"), reloaded(batch, return_tensors="pt")
    assert set(actual) == set(expected) and all(
        torch.equal(actual[k], expected[k]) for k in expected
    )


def test_member_dicts_round_trip(processor):
    for member in (processor.large_processor, processor.small_processor):
        rebuilt = member_processor_from_dict(member_processor_to_dict(member))
        assert type(rebuilt) is type(member)
        assert member_processor_to_dict(rebuilt) == member_processor_to_dict(member)
    with pytest.raises(ValueError, match="unknown member image processor"):
        member_processor_from_dict({"image_processor_type": "NoSuchImageProcessor"})


def test_members_from_folders_and_grayscale_images(members, tmp_path):
    tiny_vit_image_processor().save_pretrained(tmp_path)
    processor = DuoImageProcessor.from_members(tmp_path, tiny_cnn_image_processor(members[1]))
    out = processor(
        images(2, mode="L"), return_tensors="pt"
    )  # converted to RGB before the timm transform
    assert out["pixel_values"].shape == out["pixel_values_small"].shape == (2, 3, 16, 16)
    with pytest.raises(ValueError, match="large_processor"):
        DuoImageProcessor()


def test_pipeline_on_a_saved_duo(members, processor, tmp_path):
    duo = DuoForImageClassification.from_members(*members, temperatures=[1.2, 0.8]).eval()
    duo.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    classifier = pipeline("image-classification", model=str(tmp_path))
    assert type(classifier.image_processor) is DuoImageProcessor
    image = images(1, seed=3)[0]
    predictions = classifier(image, top_k=3)
    assert len(predictions) == 3 and {p["label"] for p in predictions} <= set(LABELS.values())
    assert sum(p["score"] for p in predictions) <= 1 + 1e-6
    with torch.no_grad():
        probs = duo(**processor(image, return_tensors="pt")).logits.softmax(-1)[0]
    top = probs.topk(3)
    assert [p["label"] for p in predictions] == [LABELS[int(i)] for i in top.indices]
    torch.testing.assert_close(torch.tensor([p["score"] for p in predictions]), top.values)
    everything = classifier(images(2, seed=4))
    assert len(everything) == 2 and all(len(p) == 4 for p in everything)
    assert all(abs(sum(p["score"] for p in preds) - 1) < 1e-5 for preds in everything)
