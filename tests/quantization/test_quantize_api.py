"""hf_uq.quantize: argument checking, backend discovery, layer selection and calibration inputs (any backend)."""

import pytest
import torch
from datasets import Dataset

import hf_uq
from hf_uq.quantization import (
    BACKENDS,
    HEADS,
    QuantizationInfo,
    api,
    available_backends,
    is_backend_available,
    load_quantized,
    quantize,
)

HAS_QUANTO = is_backend_available("quanto")
needs_quanto = pytest.mark.skipif(not HAS_QUANTO, reason="optimum-quanto is not installed (pip install optimum-quanto)")


def test_public_names():
    assert hf_uq.quantization.quantize is quantize
    assert BACKENDS == ("quanto", "bitsandbytes")
    assert set(available_backends()) <= set(BACKENDS)


def test_unknown_backend_raises(vit):
    with pytest.raises(ValueError, match="Unknown quantization backend 'onnx'"):
        quantize(vit, backend="onnx")


@needs_quanto
@pytest.mark.parametrize("weights", ["int3", "int16", "fp4", 7])
def test_unknown_bit_width_raises(vit, weights):
    with pytest.raises(ValueError, match="cannot quantize weights"):
        quantize(vit, backend="quanto", weights=weights)


@needs_quanto
def test_unknown_activation_format_raises(vit):
    with pytest.raises(ValueError, match="cannot quantize activations"):
        quantize(vit, backend="quanto", activations="int4", calibration_dataset=torch.zeros(2, 3, 16, 16))


def test_missing_backend_says_what_to_install(vit, monkeypatch):
    monkeypatch.setitem(api._BACKEND_SPECS, "quanto", ("quanto", "hf_uq_no_such_package", "optimum-quanto"))
    assert not is_backend_available("quanto")
    with pytest.raises(ValueError, match="pip install optimum-quanto"):
        quantize(vit, backend="quanto")


@needs_quanto
def test_activations_need_calibration_data(vit):
    with pytest.raises(ValueError, match="calibration_dataset"):
        quantize(vit, backend="quanto", weights="int8", activations="int8")


@needs_quanto
def test_model_checks(vit):
    with pytest.raises(ValueError, match="torch.nn.Module"):
        quantize("not a model")
    quantized = quantize(vit)
    with pytest.raises(ValueError, match="already quantized"):
        quantize(quantized)
    with pytest.raises(ValueError, match="found no layer"):
        quantize(vit, skip="*")


@pytest.mark.parametrize("backend", available_backends())
def test_a_device_the_backend_cannot_run_on_raises(backend):
    with torch.device("meta"):
        model = hf_uq.tiny_vit()
    with pytest.raises(ValueError, match="move it"):
        quantize(model, backend=backend)


@needs_quanto
def test_original_is_left_alone_unless_inplace(vit, pixels):
    before = {k: v.clone() for k, v in vit.state_dict().items()}
    quantized = quantize(vit, weights="int8")
    assert quantized is not vit and not hasattr(vit, "hf_uq_quantization")
    assert all(torch.equal(before[k], v) for k, v in vit.state_dict().items())
    copy = quantize(hf_uq.tiny_vit(seed=0), inplace=True)
    assert isinstance(copy.hf_uq_quantization, QuantizationInfo)


@needs_quanto
def test_skip_patterns(vit):
    info = quantize(vit, skip=["vit.layers.0", "*.o_proj", HEADS]).hf_uq_quantization
    assert "classifier" in info.skipped and "classifier" not in info.modules
    assert not any(name.startswith("vit.layers.0.") for name in info.modules)
    assert not any(name.endswith(".o_proj") for name in info.modules)
    assert "vit.layers.1.attention.q_proj" in info.modules
    assert all("requested" in reason for reason in info.skipped.values())
    with pytest.raises(ValueError, match="skip"):
        quantize(vit, skip=[3])


@needs_quanto
def test_heads_token_skips_every_member_head(duo):
    info = quantize(duo, skip=HEADS).hf_uq_quantization
    assert set(info.skipped) == {"large.classifier", "small.timm_model.fc"}


@needs_quanto
def test_info_round_trips_through_a_dict(vit):
    info = quantize(vit).hf_uq_quantization
    assert QuantizationInfo.from_dict(info.to_dict()) == info
    assert info.label == "quanto w8" and info.quantized == list(info.modules)


def test_calibration_batches_accepts_tensors_datasets_and_iterables(digits):
    pixels = torch.zeros(5, 3, 16, 16)
    assert [len(b["pixel_values"]) for b in api.calibration_batches(pixels, batch_size=2)] == [2, 2, 1]
    batches = list(api.calibration_batches(digits["validation"], batch_size=32, max_batches=1))
    assert len(batches) == 1 and set(batches[0]) == {"pixel_values"} and len(batches[0]["pixel_values"]) == 32
    mixed = [pixels[:2], {"pixel_values": pixels[:3], "labels": torch.zeros(3)}]
    assert [set(b) for b in api.calibration_batches(mixed)] == [{"pixel_values"}, {"pixel_values"}]
    with pytest.raises(ValueError, match="one split"):
        list(api.calibration_batches(digits))
    with pytest.raises(ValueError, match="no batches"):
        list(api.calibration_batches([]))
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        list(api.calibration_batches(torch.zeros(3, 16)))
    with pytest.raises(ValueError, match="pixel_values"):
        list(api.calibration_batches(Dataset.from_dict({"x": [1, 2]})))


def test_load_quantized_rejects_a_float_folder(vit, tmp_path):
    vit.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not an hf_uq-quantized checkpoint"):
        load_quantized(tmp_path)
