"""The optimum-quanto backend: fidelity to the float model, calibration, persistence, hf_uq composites."""

import json

import pytest
import torch
from transformers import AutoModelForImageClassification

import hf_uq
from hf_uq.quantization import (
    QUANTIZED_WEIGHTS_NAME,
    is_backend_available,
    load_quantized,
    quantize,
)

pytestmark = pytest.mark.skipif(
    not is_backend_available("quanto"), reason="optimum-quanto is not installed (pip install optimum-quanto)"
)


def forward(model, pixels, mode=torch.no_grad):
    with mode():
        return model(pixel_values=pixels)


@pytest.mark.parametrize("family", ["vit", "cnn"])
def test_int8_logits_follow_the_float_model(family, request, pixels, correlation):
    model = request.getfixturevalue(family)
    quantized = quantize(model, backend="quanto", weights="int8")
    assert correlation(forward(model, pixels).logits, forward(quantized, pixels).logits) >= 0.99
    kinds = {entry["type"] for entry in quantized.hf_uq_quantization.modules.values()}
    assert kinds == {"QLinear", "QConv2d"}
    assert type(quantized) is type(model) and quantized.hf_uq_quantization.skipped == {}


def test_w8a8_is_calibrated(vit, pixels, correlation):
    quantized = quantize(vit, weights="int8", activations="int8", calibration_dataset=pixels)
    layer = quantized.get_submodule("vit.layers.0.attention.q_proj")
    assert layer.activation_qtype is not None and float(layer.input_scale) != 1.0
    assert correlation(forward(vit, pixels).logits, forward(quantized, pixels).logits) >= 0.99
    assert all(e["quantize_output"] is False for e in quantized.hf_uq_quantization.modules.values())


def test_int4_runs_under_inference_mode(vit, pixels):
    quantized = quantize(vit, weights="int4")
    expected = forward(quantized, pixels).logits
    assert torch.equal(forward(quantized, pixels, torch.inference_mode).logits, expected)


@pytest.mark.parametrize("weights,activations", [("int8", None), ("int8", "int8"), ("int4", None)])
def test_round_trip_through_auto_model(vit, pixels, tmp_path, weights, activations):
    quantized = quantize(vit, weights=weights, activations=activations, calibration_dataset=pixels[:8])
    quantized.save_pretrained(tmp_path)
    assert {"config.json", "model.safetensors", QUANTIZED_WEIGHTS_NAME} <= {p.name for p in tmp_path.iterdir()}
    config = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "hf_uq" and config["backend"] == "quanto" and config["weights"] == weights
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert reloaded.hf_uq_quantization == quantized.hf_uq_quantization and not reloaded.training
    assert torch.equal(forward(reloaded, pixels).logits, forward(quantized, pixels).logits)
    again = load_quantized(tmp_path)
    assert torch.equal(forward(again, pixels).logits, forward(quantized, pixels).logits)


def test_reloaded_model_saves_again(vit, pixels, tmp_path):
    quantize(vit, weights="int8").save_pretrained(tmp_path / "a")
    reloaded = load_quantized(tmp_path / "a")
    reloaded.save_pretrained(tmp_path / "b")
    assert torch.equal(forward(load_quantized(tmp_path / "b"), pixels).logits, forward(reloaded, pixels).logits)


def test_duo_w8a8_round_trip_keeps_logits_and_uncertainty(duo, pixels, tmp_path, correlation):
    quantized = quantize(duo, weights="int8", activations="int8", calibration_dataset=pixels)
    before, reference = forward(quantized, pixels), forward(duo, pixels)
    assert correlation(reference.logits, before.logits) >= 0.99
    assert before.member_logits.shape == reference.member_logits.shape
    quantized.save_pretrained(tmp_path)
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    after = forward(reloaded, pixels)
    assert type(reloaded).__name__ == "DuoForImageClassification"
    assert torch.equal(after.logits, before.logits) and torch.equal(after.uncertainty, before.uncertainty)


def test_other_hf_uq_models(vit, cnn, pixels, tmp_path, correlation):
    from hf_uq import DeepEnsembleForImageClassification, TemperatureScaledForImageClassification

    models = {
        "ensemble": DeepEnsembleForImageClassification.from_members([vit, cnn]).eval(),
        "tempered": TemperatureScaledForImageClassification.from_model(vit, temperature=1.7).eval(),
    }
    for name, model in models.items():
        quantized = quantize(model, weights="int8")
        assert correlation(forward(model, pixels).logits, forward(quantized, pixels).logits) >= 0.99, name
        quantized.save_pretrained(tmp_path / name)
        assert torch.equal(forward(load_quantized(tmp_path / name), pixels).logits, forward(quantized, pixels).logits)


def test_batch_ensemble_and_dirichlet_student(pixels, tmp_path, correlation):
    try:
        from hf_uq.models.batch_ensemble_vit import BatchEnsembleViTForImageClassification
        from hf_uq.models.dirichlet_student import (
            DirichletStudentConfig,
            DirichletStudentForImageClassification,
        )
    except ImportError as error:  # pragma: no cover - models still being written
        pytest.skip(f"model not available yet: {error}")
    student = DirichletStudentForImageClassification(DirichletStudentConfig(backbone_config=hf_uq.tiny_vit().config))
    batch_ensemble = BatchEnsembleViTForImageClassification.from_vit(hf_uq.tiny_vit(seed=2), ensemble_size=2)
    for name, model in {"student": student.eval(), "batch_ensemble": batch_ensemble.eval()}.items():
        quantized = quantize(model, weights="int8")
        out = forward(quantized, pixels)
        assert correlation(forward(model, pixels).logits, out.logits) >= 0.99, name
        quantized.save_pretrained(tmp_path / name)
        assert torch.equal(forward(load_quantized(tmp_path / name), pixels).logits, out.logits), name
    # BatchEnsemble's layers are quantized too (shared weight int8, fast weights float): nothing is left over
    info = quantized.hf_uq_quantization
    assert info.skipped == {} and {e["type"] for e in info.modules.values()} == {"QBatchEnsembleLinear", "QConv2d"}
