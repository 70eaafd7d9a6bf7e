"""BatchEnsembleLinear: rank-1 members over one shared weight, member-major batch layout, initializations and the
names that keep fast weights out of weight decay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_uq.layers import (
    FAST_WEIGHT_INITS,
    FAST_WEIGHT_NAMES,
    BatchEnsembleLinear,
    fast_weight_parameter_names,
    init_fast_weights_,
    tile_members,
)

M, B, T = 4, 3, 5


@pytest.fixture
def layer():
    torch.manual_seed(0)
    return BatchEnsembleLinear.from_linear(nn.Linear(8, 6), M, fast_weight_init="normal")


def test_members_are_rank_one_modulations_of_the_shared_weight(layer):
    x = torch.randn(M * B, T, 8)
    y = layer(x)
    assert y.shape == (M * B, T, 6)
    for i in range(M):  # member i owns the rows [i * B, (i + 1) * B)
        member = layer.member_linear(i)
        expected_weight = layer.weight * torch.outer(layer.s[i], layer.r[i])
        torch.testing.assert_close(member.weight, expected_weight)
        torch.testing.assert_close(y[i * B : (i + 1) * B], member(x[i * B : (i + 1) * B]), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shape", [(M * B, 8), (M * B, 2, T, 8)])
def test_any_number_of_middle_dimensions(layer, shape):
    x = torch.randn(*shape)
    y = layer(x)
    assert y.shape == (*shape[:-1], 6)
    member = layer.member_linear(1)
    torch.testing.assert_close(y[B : 2 * B], member(x[B : 2 * B]), atol=1e-6, rtol=1e-5)


def test_from_linear_with_ones_is_the_linear_layer_for_every_member():
    torch.manual_seed(0)
    linear = nn.Linear(8, 6)
    layer = BatchEnsembleLinear.from_linear(linear, M, fast_weight_init="ones")
    x = torch.randn(B, T, 8)
    y = layer(tile_members(x, M)).view(M, B, T, 6)
    for i in range(M):
        torch.testing.assert_close(y[i], linear(x), atol=1e-6, rtol=1e-5)
    assert torch.equal(layer.weight, linear.weight) and layer.weight is not linear.weight
    assert torch.equal(layer.bias, linear.bias.expand(M, -1))


def test_without_bias():
    layer = BatchEnsembleLinear(8, 6, M, bias=False)
    assert layer.bias is None
    x = torch.randn(M * B, 8)
    torch.testing.assert_close(layer(x)[:B], layer.member_linear(0)(x[:B]), atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(layer(x)[:B], layer.member_linear(0)(x[:B]), atol=1e-6, rtol=1e-5)


def test_in_place_inference_path_matches_autograd_path_and_gradients_reach_every_parameter(layer):
    x = torch.randn(M * B, T, 8)
    y = layer(x)
    with torch.no_grad():
        y_no_grad = layer(x)
    with torch.inference_mode():
        y_inference = layer(x)
    torch.testing.assert_close(y_no_grad, y.detach())
    torch.testing.assert_close(y_inference, y.detach())
    y.square().sum().backward()
    for name, param in layer.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name

    # the gradient of the shared weight is the sum of the members' materialized-weight gradients, chain-ruled
    weights = [
        (layer.weight * torch.outer(layer.s[i], layer.r[i])).detach().requires_grad_() for i in range(M)
    ]
    loss = sum(
        nn.functional.linear(x[i * B : (i + 1) * B], w, layer.bias[i].detach()).square().sum()
        for i, w in enumerate(weights)
    )
    loss.backward()
    expected = sum(w.grad * torch.outer(layer.s[i], layer.r[i]).detach() for i, w in enumerate(weights))
    torch.testing.assert_close(layer.weight.grad, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [2, 6, 7, 40])  # per member; the layer has 6 outputs
def test_inference_builds_member_weights_only_when_members_have_more_rows_than_outputs(rows, bias, monkeypatch):
    torch.manual_seed(0)
    layer = BatchEnsembleLinear.from_linear(nn.Linear(8, 6, bias=bias), M, fast_weight_init="normal").double()
    calls = []
    built = layer._materialized_forward
    monkeypatch.setattr(layer, "_materialized_forward", lambda x: calls.append(x.shape) or built(x))
    x = torch.randn(M * rows, 8, dtype=torch.float64)
    with torch.inference_mode():
        y = layer(x)
    assert calls == ([(M, rows, 8)] if rows > 6 else [])
    for i in range(M):
        member = layer.member_linear(i)
        torch.testing.assert_close(y[i * rows : (i + 1) * rows], member(x[i * rows : (i + 1) * rows]),
                                   atol=1e-12, rtol=1e-12)


def test_tile_members_is_member_major():
    x = torch.arange(6.0).view(3, 2)
    tiled = tile_members(x, 2)
    assert tiled.shape == (6, 2)
    assert torch.equal(tiled.view(2, 3, 2)[0], x) and torch.equal(tiled.view(2, 3, 2)[1], x)


def test_initializations():
    torch.manual_seed(0)
    assert set(FAST_WEIGHT_INITS) == {"random_sign", "normal", "ones"}
    signs = BatchEnsembleLinear(64, 64, M).r  # random_sign is the default
    assert set(signs.unique().tolist()) == {-1.0, 1.0}
    assert 0.3 < (signs > 0).float().mean() < 0.7
    normal = init_fast_weights_(torch.empty(10_000), "normal", std=0.1)
    assert abs(normal.mean() - 1) < 0.01 and abs(normal.std() - 0.1) < 0.01
    assert torch.equal(init_fast_weights_(torch.empty(3, 4), "ones"), torch.ones(3, 4))
    layer = BatchEnsembleLinear(4, 4, 2, fast_weight_init="ones")
    layer.reset_fast_weights("random_sign")
    assert set(layer.s.unique().tolist()) <= {-1.0, 1.0}


def test_invalid_arguments():
    with pytest.raises(ValueError, match="ensemble_size"):
        BatchEnsembleLinear(4, 4, 0)
    with pytest.raises(ValueError, match="'orthogonal'"):
        BatchEnsembleLinear(4, 4, 2, fast_weight_init="orthogonal")
    with pytest.raises(ValueError, match="'orthogonal'"):
        init_fast_weights_(torch.empty(2), "orthogonal")
    with pytest.raises(ValueError, match="not a multiple of 4"):
        BatchEnsembleLinear(4, 4, 4)(torch.randn(6, 4))
    with pytest.raises(TypeError, match="nn.Linear"):
        BatchEnsembleLinear.from_linear(nn.Conv1d(2, 2, 1), 2)
    with pytest.raises(IndexError):
        BatchEnsembleLinear(4, 4, 2).member_linear(2)


def test_stock_trainer_does_not_decay_fast_weights_or_member_biases(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = nn.Sequential(BatchEnsembleLinear(4, 8, 2), nn.ReLU(), BatchEnsembleLinear(8, 3, 2, bias=False))
    names = fast_weight_parameter_names(model)
    assert names == [f"{i}.{n}" for i in (0, 2) for n in FAST_WEIGHT_NAMES]
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True))
    assert sorted(trainer.get_decay_parameter_names(model)) == ["0.weight", "2.weight"]


def test_scale_input_in_place_only_without_autograd():
    torch.manual_seed(0)
    layer = BatchEnsembleLinear(8, 6, M, fast_weight_init="normal", scale_input_in_place=True)
    x = torch.randn(M * B, 8)
    expected = BatchEnsembleLinear.forward(layer, x.clone())  # autograd on: the input is left alone
    copy = x.clone()
    layer(copy)
    assert torch.equal(copy, x)
    with torch.no_grad():
        y = layer(copy)
    torch.testing.assert_close(y, expected.detach())
    torch.testing.assert_close(copy, (x.view(M, B, 8) * layer.r.detach().unsqueeze(1)).view(M * B, 8))
