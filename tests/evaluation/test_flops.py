"""member_flops: per-member FLOPs of hf_uq composites and their overhead over the reference member."""

import pytest
import torch

import hf_uq  # noqa: F401  (registers the Auto classes)
from hf_uq import (
    DeepEnsembleForImageClassification,
    DuoForImageClassification,
    TemperatureScaledForImageClassification,
    mc_dropout,
)
from hf_uq.evaluation.budget import flops_per_image
from hf_uq.evaluation.flops import composite_members, member_flops
from hf_uq.models.tiny import tiny_cnn, tiny_vit

SMALL_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def large():
    return tiny_vit().eval()


@pytest.fixture(scope="module")
def small():
    return tiny_cnn(channels=(8, 8, 16, 16), stem_width=4, seed=1).eval()


@pytest.fixture(scope="module")
def pixel_values():
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_duo_overhead_is_small_over_large(large, small, pixel_values):
    duo = DuoForImageClassification.from_members(large, small).eval()
    flops = member_flops(duo, pixel_values)
    assert list(flops) == ["large", "small", "total", "overhead_pct"]
    assert flops["large"] == flops_per_image(large, pixel_values) > 0
    assert flops["small"] == flops_per_image(small, pixel_values) > 0
    assert flops["total"] == flops["large"] + flops["small"]  # the fusion counts 0 FLOPs
    assert flops["overhead_pct"] == pytest.approx(100 * flops["small"] / flops["large"], abs=1e-9)
    assert 0 < flops["overhead_pct"] < 100
    # FLOPs per image do not depend on the batch size
    assert member_flops(duo, pixel_values[:1]) == flops


def test_duo_small_member_gets_pixel_values_small(large, pixel_values):
    small = tiny_cnn(image_size=24, channels=(8, 8, 16, 16), stem_width=4, seed=1).eval()
    duo = DuoForImageClassification.from_members(large, small).eval()
    inputs = {"pixel_values": pixel_values, "pixel_values_small": torch.randn(4, 3, 24, 24)}
    flops = member_flops(duo, inputs)
    assert flops["small"] == flops_per_image(small, inputs["pixel_values_small"])
    assert flops["small"] > flops_per_image(small, pixel_values)  # more pixels, more FLOPs
    assert flops["total"] == flops["large"] + flops["small"]


@pytest.mark.parametrize("num_members", [1, 3])
def test_deep_ensemble_of_equal_members_costs_m_times(pixel_values, num_members):
    members = [tiny_vit(seed=i, **SMALL_VIT).eval() for i in range(num_members)]
    ensemble = DeepEnsembleForImageClassification.from_members(members).eval()
    flops = member_flops(ensemble, pixel_values)
    names = [f"member_{i}" for i in range(num_members)]
    assert list(flops) == [*names, "total", "overhead_pct"]
    assert len({flops[name] for name in names}) == 1
    assert flops["total"] == num_members * flops["member_0"]
    assert flops["overhead_pct"] == pytest.approx(100.0 * (num_members - 1))


def test_wrappers_and_single_models(large, pixel_values):
    single = member_flops(large, pixel_values)
    assert single == {"model": single["model"], "total": single["model"], "overhead_pct": 0.0}
    scaled = TemperatureScaledForImageClassification.from_model(large, temperature=1.5).eval()
    assert member_flops(scaled, pixel_values) == single
    mc = mc_dropout(large, num_samples=4)
    flops = member_flops(mc, pixel_values)
    assert flops["model"] == single["model"] and flops["total"] == 4 * single["model"]
    assert flops["overhead_pct"] == pytest.approx(300.0)


def test_composite_members_order_and_validation(large, small, pixel_values):
    duo = DuoForImageClassification.from_members(large, small)
    assert [(name, module) for name, module, _ in composite_members(duo, pixel_values)] == [
        ("large", large),
        ("small", small),
    ]
    # a transformers model's own attributes are never mistaken for members
    assert composite_members(large, pixel_values)[0][1] is large
    with pytest.raises(ValueError, match="nn.Module"):
        member_flops("not a model", pixel_values)
    with pytest.raises(ValueError, match="pixel_values"):
        member_flops(duo, {"labels": torch.zeros(4, dtype=torch.long)})
