"""BatchEnsembleViT quantized by each backend: the shared weights become int8 / 4-bit, the fast weights stay float.

Also the fused w8a8 `QLinear` of the quanto backend, which must compute exactly what optimum-quanto computes.
"""

import contextlib

import pytest
import torch
from transformers import AutoModelForImageClassification

import hf_uq
from hf_uq.evaluation import weight_bytes
from hf_uq.layers import BatchEnsembleLinear
from hf_uq.quantization import (
    HEADS,
    QuantizationSkipWarning,
    is_backend_available,
    load_quantized,
    quantize,
)

BACKENDS = [
    pytest.param("quanto", marks=pytest.mark.skipif(not is_backend_available("quanto"),
                                                    reason="optimum-quanto is not installed (pip install optimum-quanto)")),
    pytest.param("bitsandbytes", marks=pytest.mark.skipif(not is_backend_available("bitsandbytes"),
                                                          reason="bitsandbytes is not installed (pip install bitsandbytes)")),
]
needs_quanto = pytest.mark.skipif(not is_backend_available("quanto"), reason="optimum-quanto is not installed")


@pytest.fixture(scope="module")
def be_vit():
    """A 2-member BatchEnsembleViT whose fast weights are far from +-1 (so that `r` really changes the inputs)."""
    from hf_uq.models.batch_ensemble_vit import BatchEnsembleViTForImageClassification

    torch.manual_seed(3)
    vit = hf_uq.tiny_vit(seed=2, hidden_size=64, intermediate_size=128)
    return BatchEnsembleViTForImageClassification.from_vit(vit, ensemble_size=2, fast_weight_init="normal").eval()


def forward(model, pixels):
    with torch.no_grad():
        return model(pixel_values=pixels)


def skip_warning(backend):
    """bitsandbytes keeps the patch-embedding convolution float and says so; quanto takes every layer."""
    return pytest.warns(QuantizationSkipWarning) if backend == "bitsandbytes" else contextlib.nullcontext()


def quantize_quietly(model, backend, **kwargs):
    with skip_warning(backend):
        return quantize(model, backend=backend, **kwargs)


def batch_ensemble_layers(model):
    return {name: module for name, module in model.named_modules() if hasattr(module, "fast_in_norm")}


def shared_int8(layer) -> torch.Tensor:
    """The stored shared weight of a quantized BatchEnsemble layer (quanto `_data`, bitsandbytes `Int8Params`)."""
    if hasattr(layer, "shared"):
        return layer.shared.weight.data
    return layer.weight._data


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_quantizes_the_shared_weights_and_keeps_fast_weights_float(be_vit, pixels, correlation, backend):
    quantized = quantize_quietly(be_vit, backend, weights="int8")
    assert correlation(forward(be_vit, pixels).logits, forward(quantized, pixels).logits) >= 0.99
    before, after = batch_ensemble_layers(be_vit), batch_ensemble_layers(quantized)
    assert set(after) == set(before) and len(after) == 4 * 6 + 1  # 6 per block (q, k, v, o, fc1, fc2) + classifier
    info = quantized.hf_uq_quantization
    assert set(before) <= set(info.modules) and not set(before) & set(info.skipped)
    for name, layer in after.items():
        assert type(layer) is not BatchEnsembleLinear, name
        assert shared_int8(layer).dtype == torch.int8, name
        for field in ("fast_in_norm", "fast_out_norm", "bias"):
            value = getattr(layer, field)
            assert value.dtype == torch.float32 and torch.equal(value, getattr(before[name], field)), (name, field)
    assert weight_bytes(quantized) < 0.4 * weight_bytes(be_vit)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_round_trip(be_vit, pixels, tmp_path, correlation, backend, weights):
    quantized = quantize_quietly(be_vit, backend, weights=weights)
    expected = forward(quantized, pixels)  # a forward before saving: bitsandbytes 4-bit repacks on CPU
    assert correlation(forward(be_vit, pixels).logits, expected.logits) >= 0.95
    quantized.save_pretrained(tmp_path)
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert type(reloaded) is type(be_vit) and reloaded.hf_uq_quantization == quantized.hf_uq_quantization
    after = forward(reloaded, pixels)
    assert torch.equal(after.logits, expected.logits) and torch.equal(after.uncertainty, expected.uncertainty)
    assert torch.equal(forward(load_quantized(tmp_path), pixels).logits, expected.logits)
    assert {type(m).__name__ for m in batch_ensemble_layers(reloaded).values()} == {
        type(m).__name__ for m in batch_ensemble_layers(quantized).values()}


def test_four_bit_bitsandbytes_skips_the_narrow_head(be_vit):
    if not is_backend_available("bitsandbytes"):
        pytest.skip("bitsandbytes is not installed")
    with pytest.warns(QuantizationSkipWarning, match="classifier"):
        info = quantize(be_vit, backend="bitsandbytes", weights="int4").hf_uq_quantization
    assert "divisible by 32" in info.skipped["classifier"]
    assert info.modules["vit.layers.0.attention.q_proj"]["type"] == "BatchEnsembleLinear4bit"


@pytest.mark.parametrize("backend", BACKENDS)
def test_heads_token_skips_the_batch_ensemble_classifier(be_vit, backend):
    with skip_warning(backend):
        info = quantize(be_vit, backend=backend, skip=HEADS).hf_uq_quantization
    assert "classifier" in info.skipped and "classifier" not in info.modules


@needs_quanto
def test_w8a8_calibrates_the_scale_of_the_scaled_input(be_vit, pixels, tmp_path, correlation):
    name = "vit.layers.1.attention.q_proj"
    seen = []
    handle = be_vit.get_submodule(name).register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    try:
        forward(be_vit, pixels)
    finally:
        handle.remove()
    layer = be_vit.get_submodule(name)
    scaled = seen[0].reshape(2, -1, layer.in_features) * layer.fast_in_norm.detach().unsqueeze(1)
    # everything before the layer stays float, so it sees exactly `seen[0]`; one batch: the scale is its absmax
    quantized = quantize(be_vit, weights="int8", activations="int8", calibration_dataset=pixels,
                         calibration_batch_size=len(pixels), skip=["vit.embeddings", "vit.layers.0"])
    qlayer = quantized.get_submodule(name)
    assert type(qlayer).__name__ == "QBatchEnsembleLinear" and qlayer.activation_qtype is not None
    assert float(qlayer.input_scale) == pytest.approx(float(scaled.abs().max()) / 127, rel=1e-5)
    assert float(qlayer.input_scale) != pytest.approx(float(seen[0].abs().max()) / 127, rel=1e-3)
    out = forward(quantized, pixels)
    assert correlation(forward(be_vit, pixels).logits, out.logits) >= 0.99
    quantized.save_pretrained(tmp_path)
    assert torch.equal(forward(load_quantized(tmp_path), pixels).logits, out.logits)


@needs_quanto
def test_fused_w8a8_qlinear_is_bit_identical_to_quanto(vit, pixels):
    from optimum.quanto.nn import QLinear
    from optimum.quanto.tensor import quantize_activation

    from hf_uq.quantization.quanto_layers import FusedW8A8QLinear

    quantized = quantize(vit, weights="int8", activations="int8", calibration_dataset=pixels)
    fused = {n: m for n, m in quantized.named_modules() if isinstance(m, FusedW8A8QLinear)}
    assert len(fused) == 4 * 6 + 1 and all(not m._forward_pre_hooks for m in fused.values())
    inputs = {}
    hooks = [m.register_forward_pre_hook(lambda m, args, n=n: inputs.__setitem__(n, args[0]))
             for n, m in fused.items()]
    forward(quantized, pixels)
    for hook in hooks:
        hook.remove()
    with torch.no_grad():
        for name, layer in fused.items():
            x = inputs[name]
            reference = QLinear.forward(layer, quantize_activation(x, qtype=layer.activation_qtype,
                                                                   scale=layer.input_scale))
            assert torch.equal(layer(x), reference), name


@needs_quanto
@pytest.mark.slow
def test_compiled_w8a8_models_match_eager(vit, be_vit, pixels):
    """`torch.compile` traces the fused layers and QBatchEnsembleLinear (the benchmark's compiled variants)."""
    for model in (vit, be_vit):
        quantized = quantize(model, weights="int8", activations="int8", calibration_dataset=pixels)
        expected = forward(quantized, pixels).logits
        compiled = torch.compile(quantized)
        with torch.inference_mode():
            logits = compiled(pixel_values=pixels).logits
        torch.testing.assert_close(logits, expected, atol=2e-2, rtol=1e-2)
