"""TemperatureScaledForImageClassification: fitting recovers T, round trips keep it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

import hf_uq.models.auto  # noqa: F401  (registers the Auto classes)
from hf_uq.functional import energy, entropy, margin, max_logit, msp
from hf_uq.models.member_utils import SINGLE_MODEL_UNCERTAINTY_SCORES
from hf_uq.models.temperature_scaled import (
    TemperatureScaledConfig,
    TemperatureScaledForImageClassification,
)
from hf_uq.models.tiny import tiny_cnn, tiny_vit

LABELS = {i: f"class_{i}" for i in range(8)}
TRUE_TEMPERATURE = 2.0


@pytest.fixture(scope="module")
def classifier():
    model = tiny_vit(id2label=LABELS, hidden_size=32, num_hidden_layers=2, intermediate_size=64).eval()
    with torch.no_grad():  # logits with a few nats of spread, so that T is well identified
        model.classifier.weight.mul_(50)
    return model


@pytest.fixture(scope="module")
def tempered_data(classifier):
    """Inputs whose labels are drawn from softmax(z / T_true): a model miscalibrated by exactly T_true."""
    generator = torch.Generator().manual_seed(0)
    pixel_values = torch.randn(4000, 3, 16, 16, generator=generator)
    with torch.no_grad():
        logits = classifier(pixel_values=pixel_values).logits
    labels = torch.multinomial((logits / TRUE_TEMPERATURE).softmax(-1), 1, generator=generator).squeeze(-1)
    batches = [
        {"pixel_values": pixel_values[i : i + 500], "labels": labels[i : i + 500]} for i in range(0, 4000, 500)
    ]
    return batches, logits, labels


def test_fit_recovers_the_temperature(classifier, tempered_data):
    batches, logits, labels = tempered_data
    weights = {k: v.clone() for k, v in classifier.state_dict().items()}
    model = TemperatureScaledForImageClassification.from_model(classifier)
    model.train()
    temperature = model.fit_temperature(batches)

    assert abs(temperature / TRUE_TEMPERATURE - 1) < 0.05
    assert model.config.temperature == temperature
    nll = torch.nn.functional.cross_entropy
    assert nll(logits / temperature, labels) <= nll(logits, labels)
    assert all(torch.equal(v, weights[k]) for k, v in classifier.state_dict().items())  # weights untouched
    assert model.training and model.model.training  # mode restored after the eval-mode pass
    classifier.eval()


@torch.no_grad()
def test_output_contract(classifier):
    model = TemperatureScaledForImageClassification.from_model(classifier, temperature=1.7).eval()
    pixel_values = torch.randn(5, 3, 16, 16)
    labels = torch.tensor([0, 1, 2, 3, 4])
    out = model(pixel_values=pixel_values, labels=labels)
    raw = classifier(pixel_values=pixel_values).logits
    torch.testing.assert_close(out.logits, raw / 1.7, rtol=0, atol=0)
    assert torch.equal(out.logits.argmax(-1), raw.argmax(-1))
    assert torch.equal(out.uncertainty, msp(out.logits.softmax(-1)))  # the documented default
    torch.testing.assert_close(out.total_uncertainty, entropy(out.logits.softmax(-1)))
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(raw / 1.7, labels))
    assert out.member_logits is None and out.epistemic_uncertainty is None


@torch.no_grad()
@pytest.mark.parametrize("score", SINGLE_MODEL_UNCERTAINTY_SCORES)
def test_uncertainty_score_is_selectable(classifier, score):
    model = TemperatureScaledForImageClassification.from_model(classifier, temperature=1.3, uncertainty_score=score)
    out = model.eval()(pixel_values=torch.randn(4, 3, 16, 16))
    expected = {"msp": msp, "entropy": entropy, "margin": margin}.get(score)
    expected = expected(out.logits.softmax(-1)) if expected else {"max_logit": max_logit, "energy": energy}[score](
        out.logits
    )
    torch.testing.assert_close(out.uncertainty, expected)


def test_invalid_settings_raise(classifier):
    with pytest.raises(ValueError, match="uncertainty_score"):
        TemperatureScaledForImageClassification.from_model(classifier, uncertainty_score="epistemic")
    with pytest.raises(ValueError, match="temperature"):
        TemperatureScaledConfig(model_config=classifier.config, temperature=0.0)
    model = TemperatureScaledForImageClassification.from_model(classifier)
    with pytest.raises(ValueError, match="labels"):
        model.fit_temperature([{"pixel_values": torch.randn(2, 3, 16, 16)}])
    with pytest.raises(ValueError, match="no batches"):
        model.fit_temperature([])


@torch.no_grad()
@pytest.mark.parametrize("family", ["vit", "timm"])
def test_round_trip_keeps_the_temperature(classifier, family, tmp_path):
    base = classifier if family == "vit" else tiny_cnn(id2label=LABELS, seed=1).eval()
    model = TemperatureScaledForImageClassification.from_model(base, temperature=1.234567).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert not [p.name for p in tmp_path.rglob("*") if p.suffix in {".bin", ".pt", ".pth", ".pkl"}]

    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, TemperatureScaledConfig)
    assert config.temperature == 1.234567 and config.id2label == LABELS
    assert config.model_config.id2label == LABELS  # timm labels survive nesting
    pixel_values = torch.randn(3, 3, 16, 16)
    expected = model(pixel_values=pixel_values)
    for auto_class in (AutoModel, AutoModelForImageClassification):
        loaded = auto_class.from_pretrained(tmp_path).eval()
        assert type(loaded) is TemperatureScaledForImageClassification
        out = loaded(pixel_values=pixel_values)
        for field in ("logits", "uncertainty", "total_uncertainty"):
            assert torch.equal(getattr(out, field), getattr(expected, field)), field
