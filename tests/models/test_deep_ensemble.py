"""DeepEnsembleForImageClassification: output contract, label checks and save/load round trips."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

import hf_uq.models.auto  # noqa: F401  (registers the Auto classes)
from hf_uq.functional import ensemble_uncertainty
from hf_uq.models.deep_ensemble import DeepEnsembleConfig, DeepEnsembleForImageClassification
from hf_uq.models.member_utils import ENSEMBLE_UNCERTAINTY_SCORES
from hf_uq.models.tiny import tiny_cnn, tiny_vit

LABELS = {i: f"class_{i}" for i in range(8)}
PERM = [3, 0, 7, 1, 6, 2, 5, 4]
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}


def _vit(seed: int, **kwargs):
    model = tiny_vit(id2label=kwargs.pop("id2label", LABELS), seed=seed, **TINY, **kwargs).eval()
    with torch.no_grad():  # sharper than the 0.02 init, so the members disagree visibly
        model.classifier.weight.mul_(30)
    return model


def _head(model) -> torch.nn.Linear:
    return model.timm_model.get_classifier() if hasattr(model, "timm_model") else model.classifier


def reorder_labels(model, perm):
    """A copy of `model` that lists label `perm[j]` at index j (same predictions, other order)."""
    clone = copy.deepcopy(model)
    head = _head(clone)
    with torch.no_grad():
        head.weight.copy_(head.weight[perm])
        head.bias.copy_(head.bias[perm])
    names = {j: model.config.id2label[p] for j, p in enumerate(perm)}
    clone.config.id2label = names
    clone.config.label2id = {v: k for k, v in names.items()}
    return clone


@pytest.fixture(scope="module")
def members():
    return [_vit(0), tiny_cnn(id2label=LABELS, seed=1).eval(), _vit(2)]


@pytest.fixture(scope="module")
def ensemble(members):
    return DeepEnsembleForImageClassification.from_members(members).eval()


@pytest.fixture(scope="module")
def pixel_values():
    return torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def _assert_same_outputs(a, b):
    for field in (
        "logits",
        "uncertainty",
        "member_logits",
        "total_uncertainty",
        "aleatoric_uncertainty",
        "epistemic_uncertainty",
    ):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


@torch.no_grad()
def test_logits_are_log_mean_member_probabilities(ensemble, members, pixel_values):
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    out = ensemble(pixel_values=pixel_values, labels=labels)
    by_hand = torch.stack([m(pixel_values=pixel_values).logits for m in members])
    assert torch.equal(out.member_logits, by_hand)
    mean_probs = by_hand.softmax(-1).mean(0)
    torch.testing.assert_close(out.logits, mean_probs.log(), rtol=0, atol=1e-6)
    torch.testing.assert_close(out.logits.softmax(-1), mean_probs, rtol=0, atol=1e-6)
    nll = -mean_probs[torch.arange(6), labels].log().mean()
    torch.testing.assert_close(out.loss, nll, rtol=0, atol=1e-6)
    assert out.member_logits.shape == (3, 6, 8) and out.uncertainty.shape == (6,)


@torch.no_grad()
def test_decomposition_matches_functional(ensemble, pixel_values):
    out = ensemble(pixel_values=pixel_values)
    terms = ensemble_uncertainty(out.member_logits.softmax(-1))
    torch.testing.assert_close(out.total_uncertainty, terms["total"], rtol=0, atol=1e-6)
    torch.testing.assert_close(out.aleatoric_uncertainty, terms["aleatoric"], rtol=0, atol=1e-6)
    torch.testing.assert_close(out.epistemic_uncertainty, terms["epistemic"], rtol=0, atol=1e-6)
    torch.testing.assert_close(
        out.total_uncertainty,
        out.aleatoric_uncertainty + out.epistemic_uncertainty,
        rtol=0,
        atol=1e-6,
    )
    assert bool((out.epistemic_uncertainty > 1e-4).all())  # the members really disagree
    assert torch.equal(out.uncertainty, out.total_uncertainty)  # the documented default


@torch.no_grad()
@pytest.mark.parametrize("score", ENSEMBLE_UNCERTAINTY_SCORES)
def test_uncertainty_score_is_selectable(members, pixel_values, score):
    model = DeepEnsembleForImageClassification.from_members(members, uncertainty_score=score).eval()
    out = model(pixel_values=pixel_values)
    probs = out.logits.exp()
    top2 = probs.topk(2, dim=-1).values
    expected = {
        "total": out.total_uncertainty,
        "aleatoric": out.aleatoric_uncertainty,
        "epistemic": out.epistemic_uncertainty,
        "msp": 1 - probs.max(-1).values,
        "margin": 1 - (top2[:, 0] - top2[:, 1]),
    }[score]
    torch.testing.assert_close(out.uncertainty, expected, rtol=0, atol=1e-6)


def test_unknown_score_raises(members):
    with pytest.raises(ValueError, match="uncertainty_score"):
        DeepEnsembleForImageClassification.from_members(members, uncertainty_score="energy")


@torch.no_grad()
def test_save_load_round_trip_mixed_vit_and_timm(ensemble, pixel_values, tmp_path):
    ensemble.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "config.json").is_file()
    assert not [
        p.name for p in tmp_path.rglob("*") if p.suffix in {".bin", ".pt", ".pth", ".pkl", ".ckpt"}
    ]

    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, DeepEnsembleConfig)
    assert [c.model_type for c in config.member_configs] == ["vit", "timm_wrapper", "vit"]
    assert config.id2label == LABELS
    assert all(c.id2label == LABELS for c in config.member_configs)  # timm labels survive nesting

    expected = ensemble(pixel_values=pixel_values)
    for auto_class in (AutoModel, AutoModelForImageClassification):
        loaded = auto_class.from_pretrained(tmp_path).eval()
        assert type(loaded) is DeepEnsembleForImageClassification
        _assert_same_outputs(loaded(pixel_values=pixel_values), expected)


def test_config_dict_round_trip(ensemble):
    rebuilt = DeepEnsembleConfig.from_dict(ensemble.config.to_dict())
    assert rebuilt.num_members == 3
    assert [c.id2label for c in rebuilt.member_configs] == [LABELS] * 3
    assert rebuilt.uncertainty_score == "total" and rebuilt.member_label_orders == [
        None,
        None,
        None,
    ]


@torch.no_grad()
def test_align_labels_reorders_a_member(members, ensemble, pixel_values, tmp_path):
    shuffled = [
        members[0],
        reorder_labels(members[1], PERM),
        reorder_labels(members[2], PERM[::-1]),
    ]
    with pytest.raises(ValueError, match="align_labels=True"):
        DeepEnsembleForImageClassification.from_members(shuffled)
    aligned = DeepEnsembleForImageClassification.from_members(shuffled, align_labels=True).eval()
    assert aligned.config.member_label_orders[0] is None
    _assert_same_outputs(aligned(pixel_values=pixel_values), ensemble(pixel_values=pixel_values))

    aligned.save_pretrained(tmp_path)  # the reordered timm member keeps its own label order on disk
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.member_configs[1].id2label == shuffled[1].config.id2label
    _assert_same_outputs(loaded(pixel_values=pixel_values), ensemble(pixel_values=pixel_values))


def test_mismatched_label_spaces_raise(members):
    renamed = _vit(3, id2label={i: f"other_{i}" for i in range(8)})
    with pytest.raises(ValueError, match="different label names"):
        DeepEnsembleForImageClassification.from_members([members[0], renamed])
    five = tiny_cnn(num_labels=5, seed=4)
    with pytest.raises(ValueError, match="member 0 has 8 labels but member 1 has 5"):
        DeepEnsembleForImageClassification.from_members([members[0], five])
    with pytest.raises(ValueError, match="members must share one label space"):
        DeepEnsembleConfig(member_configs=[members[0].config, five.config])


def test_invalid_member_lists_raise(members):
    with pytest.raises(ValueError, match="at least one member"):
        DeepEnsembleForImageClassification.from_members([])
    with pytest.raises(ValueError, match="same model instance"):
        DeepEnsembleForImageClassification.from_members([members[0], members[1], members[0]])
    with pytest.raises(TypeError, match="sequence"):
        DeepEnsembleForImageClassification.from_members(members[0])
    with pytest.raises(ValueError, match="no model folder"):
        DeepEnsembleForImageClassification.from_members([members[0], "./does/not/exist"])


@torch.no_grad()
def test_members_from_folders_share_nothing_but_weights(members, ensemble, pixel_values, tmp_path):
    members[0].save_pretrained(tmp_path / "vit")
    model = DeepEnsembleForImageClassification.from_members(
        [tmp_path / "vit", members[1], members[2]]
    ).eval()
    assert model.members[1] is members[1]  # instances are used as they are
    _assert_same_outputs(model(pixel_values=pixel_values), ensemble(pixel_values=pixel_values))
    assert isinstance(model(pixel_values=pixel_values, return_dict=False), tuple)
