"""DirichletStudentForImageClassification: output contract, decomposition, backbones, save/load round trips."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    TimmWrapperConfig,
    ViTConfig,
)

import hf_uq.models.auto  # noqa: F401  (registers the Auto classes)
from hf_uq.functional import dirichlet_uncertainty, entropy, margin, msp
from hf_uq.models.dirichlet_student import (
    DirichletStudent,
    DirichletStudentConfig,
    DirichletStudentForImageClassification,
)
from hf_uq.models.member_utils import ENSEMBLE_UNCERTAINTY_SCORES
from hf_uq.models.tiny import tiny_cnn, tiny_vit

LABELS = {i: f"class_{i}" for i in range(8)}
TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vit():
    model = tiny_vit(id2label=LABELS, seed=0, **TINY).eval()
    with torch.no_grad():  # logits of a few nats, so that alphas are far from 1
        model.classifier.weight.mul_(40)
    return model


@pytest.fixture(scope="module")
def pixel_values():
    return torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_alias():
    assert DirichletStudent is DirichletStudentForImageClassification


@torch.no_grad()
def test_output_contract_and_decomposition(vit, pixel_values):
    student = DirichletStudent.from_backbone(vit).eval()
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    out = student(pixel_values=pixel_values, labels=labels)
    z = vit(pixel_values=pixel_values).logits
    assert out.alphas.shape == out.logits.shape == (6, 8)
    assert out.member_logits is None
    torch.testing.assert_close(out.alphas, z.clamp(-10, 10).exp())
    # logits = log(alpha / alpha_0): the mean of the Dirichlet, and with exp concentrations the backbone's softmax
    torch.testing.assert_close(out.logits, (out.alphas / out.alphas.sum(-1, keepdim=True)).log())
    torch.testing.assert_close(out.logits.softmax(-1), z.softmax(-1))
    terms = dirichlet_uncertainty(out.alphas)
    for name in ("total", "aleatoric", "epistemic"):
        assert torch.equal(getattr(out, f"{name}_uncertainty"), terms[name])
    torch.testing.assert_close(out.total_uncertainty, out.aleatoric_uncertainty + out.epistemic_uncertainty)
    assert (out.epistemic_uncertainty >= 0).all() and (out.aleatoric_uncertainty >= 0).all()
    torch.testing.assert_close(out.total_uncertainty, entropy(out.logits.softmax(-1)))
    assert torch.equal(out.uncertainty, out.total_uncertainty)  # default score
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, labels))


@torch.no_grad()
def test_epistemic_falls_as_the_concentration_grows(vit, pixel_values):
    # same mean prediction, 10x the concentration: less model uncertainty, same total
    low = dirichlet_uncertainty(torch.tensor([[2.0, 1.0, 1.0]]))
    high = dirichlet_uncertainty(torch.tensor([[20.0, 10.0, 10.0]]))
    assert high["epistemic"] < low["epistemic"]
    torch.testing.assert_close(high["total"], low["total"])


@pytest.mark.parametrize("score", ENSEMBLE_UNCERTAINTY_SCORES)
@torch.no_grad()
def test_uncertainty_score(vit, pixel_values, score):
    student = DirichletStudent.from_backbone(vit, uncertainty_score=score).eval()
    out = student(pixel_values=pixel_values)
    expected = {
        "total": out.total_uncertainty,
        "aleatoric": out.aleatoric_uncertainty,
        "epistemic": out.epistemic_uncertainty,
        "msp": msp(out.logits.softmax(-1)),
        "margin": margin(out.logits.softmax(-1)),
    }[score]
    torch.testing.assert_close(out.uncertainty, expected)


@torch.no_grad()
def test_concentrations_stay_within_bounds(vit, pixel_values):
    student = DirichletStudent.from_backbone(vit, log_alpha_min=-3.0, log_alpha_max=3.0).eval()
    with torch.no_grad():
        student.backbone.classifier.weight.mul_(100)
    out = student(pixel_values=pixel_values)
    assert out.alphas.min() >= math.exp(-3.0) * (1 - 1e-6) and out.alphas.max() <= math.exp(3.0) * (1 + 1e-6)
    assert torch.isfinite(out.epistemic_uncertainty).all()


@torch.no_grad()
def test_softplus_concentrations(vit, pixel_values):
    student = DirichletStudent.from_backbone(vit, concentration="softplus").eval()
    out = student(pixel_values=pixel_values)
    z = vit(pixel_values=pixel_values).logits
    torch.testing.assert_close(out.alphas, torch.nn.functional.softplus(z).clamp(math.exp(-10), math.exp(10)))


def test_from_backbone_copies_the_weights(vit, pixel_values):
    before = {k: v.clone() for k, v in vit.state_dict().items()}
    student = DirichletStudent.from_backbone(vit)
    assert student.backbone is not vit
    assert student.backbone.config is student.config.backbone_config
    assert student.config.id2label == LABELS and student.training == vit.training
    for param in student.parameters():
        param.data.add_(1.0)  # training the student never touches the model passed in
    assert all(torch.equal(v, before[k]) for k, v in vit.state_dict().items())


def test_from_backbone_loads_a_folder(vit, pixel_values, tmp_path):
    vit.save_pretrained(tmp_path / "vit")
    student = DirichletStudent.from_backbone(str(tmp_path / "vit")).eval()
    with torch.no_grad():
        torch.testing.assert_close(student(pixel_values=pixel_values).logits.softmax(-1),
                                   vit(pixel_values=pixel_values).logits.softmax(-1))
    with pytest.raises(ValueError, match="no model folder"):
        DirichletStudent.from_backbone(str(tmp_path / "missing"))


@pytest.mark.parametrize("backbone", ["vit", "timm"])
def test_auto_round_trip(backbone, vit, pixel_values, tmp_path):
    model = vit if backbone == "vit" else tiny_cnn(id2label=LABELS, seed=1).eval()
    student = DirichletStudent.from_backbone(model, uncertainty_score="epistemic").eval()
    student.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "dirichlet_student" and "backbone_config" in saved

    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, DirichletStudentConfig)
    assert isinstance(config.backbone_config, ViTConfig if backbone == "vit" else TimmWrapperConfig)
    assert config.id2label == LABELS and config.backbone_config.id2label == LABELS  # timm drops them on save
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    assert isinstance(reloaded, DirichletStudentForImageClassification)
    assert isinstance(AutoModel.from_pretrained(tmp_path), DirichletStudentForImageClassification)
    with torch.no_grad():
        a, b = student(pixel_values=pixel_values), reloaded(pixel_values=pixel_values)
    for field in ("logits", "alphas", "uncertainty", "total_uncertainty", "aleatoric_uncertainty",
                  "epistemic_uncertainty"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


@pytest.mark.parametrize("backbone_config", [ViTConfig(id2label=LABELS, **TINY),
                                             TimmWrapperConfig(architecture="resnet18", id2label=LABELS)])
def test_backbone_config_dict_round_trip(backbone_config):
    config = DirichletStudentConfig(backbone_config=backbone_config, target_smoothing=0.01, log_alpha_max=8)
    again = DirichletStudentConfig.from_dict(json.loads(config.to_json_string()))
    assert type(again.backbone_config) is type(backbone_config)
    assert again.backbone_config.id2label == LABELS and again.id2label == LABELS
    assert again.target_smoothing == 0.01 and again.log_alpha_max == 8.0
    # from a dict without the config object, as in config.json
    assert DirichletStudentConfig(backbone_config=backbone_config.to_dict()).num_labels == 8


def test_default_backbone_is_a_vit():
    assert isinstance(DirichletStudentConfig().backbone_config, ViTConfig)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concentration": "relu"}, "concentration"),
        ({"log_alpha_min": 5.0, "log_alpha_max": 1.0}, "smaller"),
        ({"log_alpha_max": 50.0}, "<= 30"),
        ({"target_smoothing": 1.0}, "target_smoothing"),
        ({"uncertainty_score": "energy"}, "uncertainty_score"),
        ({"backbone_config": {"model_type": "no_such_model"}}, "model_type"),
    ],
)
def test_invalid_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DirichletStudentConfig(**kwargs)


def test_forward_checks_its_inputs(vit):
    student = DirichletStudent.from_backbone(vit)
    with pytest.raises(ValueError, match="pixel_values"):
        student()
    with pytest.raises(ValueError, match="shape"):
        student(pixel_values=torch.zeros(3, 16, 16))
