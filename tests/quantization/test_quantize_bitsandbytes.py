"""The bitsandbytes backend: int8 fidelity, automatic skips, persistence (8-bit and 4-bit, before and after a forward)."""

import pytest
import torch
from transformers import AutoModelForImageClassification

from hf_uq.quantization import (
    QuantizationSkipWarning,
    is_backend_available,
    load_quantized,
    quantize,
)

pytestmark = pytest.mark.skipif(
    not is_backend_available("bitsandbytes"), reason="bitsandbytes is not installed (pip install bitsandbytes)"
)


def logits(model, pixels):
    with torch.no_grad():
        return model(pixel_values=pixels).logits


def test_int8_logits_follow_the_float_model(vit, pixels, correlation):
    with pytest.warns(QuantizationSkipWarning, match="patch_embeddings.projection"):
        quantized = quantize(vit, backend="bitsandbytes", weights="int8")
    assert correlation(logits(vit, pixels), logits(quantized, pixels)) >= 0.99
    info = quantized.hf_uq_quantization
    assert {e["type"] for e in info.modules.values()} == {"Linear8bitLt"}
    assert "Conv2d" in info.skipped["vit.embeddings.patch_embeddings.projection"]


def test_static_activations_and_unknown_formats_raise(vit):
    with pytest.raises(ValueError, match="cannot quantize activations"):
        quantize(vit, backend="bitsandbytes", activations="int8", calibration_dataset=torch.zeros(2, 3, 16, 16))
    with pytest.raises(ValueError, match="cannot quantize weights"):
        quantize(vit, backend="bnb", weights="int2")


def test_four_bit_skips_layers_the_cpu_kernel_cannot_take(vit, pixels, correlation):
    with pytest.warns(QuantizationSkipWarning, match="classifier"):
        quantized = quantize(vit, backend="bitsandbytes", weights="int4")
    skipped = quantized.hf_uq_quantization.skipped
    assert "divisible by 32" in skipped["classifier"]
    assert isinstance(quantized.classifier, torch.nn.Linear) and type(quantized.classifier) is torch.nn.Linear
    assert correlation(logits(vit, pixels), logits(quantized, pixels)) >= 0.95


def test_a_model_with_nothing_to_take_raises(cnn):
    with pytest.raises(ValueError, match="found no layer"):
        quantize(cnn, backend="bitsandbytes", weights="int4")


@pytest.mark.parametrize("weights", ["int8", "int4"])
@pytest.mark.parametrize("forward_first", [False, True])
def test_round_trip(vit, pixels, tmp_path, weights, forward_first):
    quantized = quantize(vit, backend="bitsandbytes", weights=weights)
    if forward_first:  # bitsandbytes' own 4-bit state_dict is lossy after a CPU forward; ours is not
        first = logits(quantized, pixels)
    quantized.save_pretrained(tmp_path)
    expected = logits(quantized, pixels)
    if forward_first:
        assert torch.equal(expected, first)  # saving did not change the live model
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert torch.equal(logits(reloaded, pixels), expected)
    assert torch.equal(logits(load_quantized(tmp_path), pixels), expected)


def test_duo_round_trip(duo, pixels, tmp_path, correlation):
    quantized = quantize(duo, backend="bitsandbytes", weights="int8")
    assert correlation(logits(duo, pixels), logits(quantized, pixels)) >= 0.99
    quantized.save_pretrained(tmp_path)
    reloaded = load_quantized(tmp_path)
    with torch.no_grad():
        a, b = quantized(pixel_values=pixels), reloaded(pixel_values=pixels)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.uncertainty, b.uncertainty)
