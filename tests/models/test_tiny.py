import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from transformers import (
    AutoImageProcessor,
    AutoModelForImageClassification,
    TimmWrapperForImageClassification,
    ViTForImageClassification,
)

from hf_uq.data import DIGITS_ID2LABEL
from hf_uq.models.tiny import (
    tiny_cnn,
    tiny_cnn_image_processor,
    tiny_image_processor,
    tiny_vit,
    tiny_vit_image_processor,
)

SMALL = {
    "vit": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    "cnn": dict(channels=(8, 8, 16, 16), stem_width=4),
}
BUILDERS = {"vit": tiny_vit, "cnn": tiny_cnn}


def digit_images(n: int = 4) -> list[PILImage.Image]:
    rng = np.random.default_rng(0)
    levels = rng.integers(0, 17, size=(n, 8, 8))
    return [PILImage.fromarray(np.rint(level * 255 / 16).astype(np.uint8)) for level in levels]


def parameters(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["vit", "cnn"])
def test_output_shapes_and_labels(kind):
    model = BUILDERS[kind](**SMALL[kind]).eval()
    processor = tiny_image_processor(model)
    pixel_values = processor(
        [image.convert("RGB") for image in digit_images(5)], return_tensors="pt"
    )["pixel_values"]
    assert pixel_values.shape == (5, 3, 16, 16)
    out = model(pixel_values=pixel_values, labels=torch.arange(5))
    assert out.logits.shape == (5, 8) and out.loss.ndim == 0
    assert model.config.id2label == DIGITS_ID2LABEL and model.config.num_labels == 8


@pytest.mark.parametrize("kind", ["vit", "cnn"])
def test_custom_labels(kind):
    id2label = {0: "cat", 1: "dog", 2: "bird"}
    model = BUILDERS[kind](num_labels=3, id2label=id2label, **SMALL[kind]).eval()
    assert model.config.id2label == id2label and model.config.label2id == {
        "cat": 0,
        "dog": 1,
        "bird": 2,
    }
    assert model(pixel_values=torch.zeros(2, 3, 16, 16)).logits.shape == (2, 3)
    with pytest.raises(ValueError, match="id2label has 3 entries"):
        BUILDERS[kind](num_labels=4, id2label=id2label)


@pytest.mark.parametrize("kind", ["vit", "cnn"])
def test_seeded_init_leaves_global_rng_alone(kind):
    state = torch.get_rng_state()
    first = parameters(BUILDERS[kind](seed=3, **SMALL[kind]))
    assert torch.equal(torch.get_rng_state(), state)
    again = parameters(BUILDERS[kind](seed=3, **SMALL[kind]))
    other = parameters(BUILDERS[kind](seed=4, **SMALL[kind]))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_both_models_accept_the_same_inputs():
    images = [image.convert("RGB") for image in digit_images(3)]
    vit_inputs = tiny_vit_image_processor()(images, return_tensors="pt")["pixel_values"]
    cnn_inputs = tiny_cnn_image_processor()(images, return_tensors="pt")["pixel_values"]
    assert vit_inputs.shape == cnn_inputs.shape == (3, 3, 16, 16)
    for model in (tiny_vit(**SMALL["vit"]).eval(), tiny_cnn(**SMALL["cnn"]).eval()):
        assert (
            model(pixel_values=vit_inputs).logits.shape
            == model(pixel_values=cnn_inputs).logits.shape
            == (3, 8)
        )


def test_vit_processor_converts_grayscale():
    images = digit_images(2)
    gray = tiny_vit_image_processor()(images, return_tensors="pt")["pixel_values"]
    rgb = tiny_vit_image_processor()(
        [image.convert("RGB") for image in images], return_tensors="pt"
    )["pixel_values"]
    assert torch.equal(gray, rgb)


def test_vit_has_dropout_for_mc_sampling():
    model = tiny_vit(**SMALL["vit"])
    assert 0 < model.config.hidden_dropout_prob <= 0.2
    model.train()
    x = torch.randn(2, 3, 16, 16)
    assert not torch.equal(model(pixel_values=x).logits, model(pixel_values=x).logits)


def test_cnn_uses_timm_init_by_default():
    def conv_std(model):
        return float(model.timm_model.conv1[0].weight.detach().std())

    assert abs(conv_std(tiny_cnn(timm_init=False)) - 0.02) < 0.005
    assert conv_std(tiny_cnn()) > 0.1


@pytest.mark.parametrize("kind", ["vit", "cnn"])
def test_save_and_reload_through_auto_classes(kind, tmp_path):
    model = BUILDERS[kind](seed=1, **SMALL[kind]).eval()
    processor = tiny_image_processor(model)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)

    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    reloaded_processor = AutoImageProcessor.from_pretrained(tmp_path)
    expected = ViTForImageClassification if kind == "vit" else TimmWrapperForImageClassification
    assert type(reloaded) is expected and type(reloaded_processor) is type(processor)
    assert reloaded.config.id2label == model.config.id2label

    images = [image.convert("RGB") for image in digit_images(4)]
    pixel_values = processor(images, return_tensors="pt")["pixel_values"]
    reloaded_pixel_values = reloaded_processor(images, return_tensors="pt")["pixel_values"]
    assert torch.equal(pixel_values, reloaded_pixel_values)
    with torch.no_grad():
        assert torch.equal(
            model(pixel_values=pixel_values).logits,
            reloaded(pixel_values=reloaded_pixel_values).logits,
        )
