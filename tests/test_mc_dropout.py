"""mc_dropout: independent samples, untouched modes (BatchNorm stays in eval), seeds, and the ensemble output."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_uq.functional import ensemble_uncertainty
from hf_uq.mc_dropout import MCDropoutModel, dropout_modules, mc_dropout
from hf_uq.models.tiny import tiny_cnn, tiny_vit

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}


@pytest.fixture(scope="module")
def vit():
    return tiny_vit(hidden_dropout_prob=0.2, **TINY).eval()


@pytest.fixture(scope="module")
def pixel_values():
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def conv_net() -> nn.Module:
    """A plain CNN with BatchNorm and Dropout returning logit tensors."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Dropout(0.5), nn.Linear(8, 5),
    )
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)  # non-trivial statistics, so a train-mode pass would show
    return net


class _Classifier(nn.Module):
    """Adapts `conv_net` to the `model(pixel_values=...)` calling convention."""

    def __init__(self):
        super().__init__()
        self.net = conv_net()

    def forward(self, pixel_values):
        return self.net(pixel_values)


@torch.no_grad()
def test_samples_differ_and_form_an_ensemble(vit, pixel_values):
    out = mc_dropout(vit, num_samples=6)(pixel_values=pixel_values, labels=torch.tensor([0, 1, 2, 3]))
    samples = out.member_logits
    assert samples.shape == (6, 4, 8)
    for i in range(6):  # every copy of the batch got its own masks, within the single forward pass
        for j in range(i + 1, 6):
            assert not torch.allclose(samples[i], samples[j])
    mean_probs = samples.softmax(-1).mean(0)
    torch.testing.assert_close(out.logits, mean_probs.log(), rtol=0, atol=1e-6)
    terms = ensemble_uncertainty(samples.softmax(-1))
    for name in ("total", "aleatoric", "epistemic"):
        torch.testing.assert_close(getattr(out, f"{name}_uncertainty"), terms[name], rtol=0, atol=1e-6)
    torch.testing.assert_close(
        out.total_uncertainty, out.aleatoric_uncertainty + out.epistemic_uncertainty, rtol=0, atol=1e-6
    )
    assert torch.equal(out.uncertainty, out.total_uncertainty)
    torch.testing.assert_close(out.loss, -mean_probs[torch.arange(4), torch.tensor([0, 1, 2, 3])].log().mean())


@torch.no_grad()
@pytest.mark.parametrize("initially_training", [False, True])
def test_modes_are_restored(vit, pixel_values, initially_training):
    vit.train(initially_training)
    mc_dropout(vit, num_samples=3)(pixel_values=pixel_values)
    assert all(m.training is initially_training for m in vit.modules())
    vit.eval()


@torch.no_grad()
@pytest.mark.parametrize("initially_training", [False, True])
def test_batchnorm_stays_in_eval(pixel_values, initially_training):
    model = _Classifier().train(initially_training)
    bn, dropout = model.net[1], model.net[5]
    stats = {k: v.clone() for k, v in bn.state_dict().items()}
    seen = {}
    bn.register_forward_hook(lambda m, i, o: seen.__setitem__("bn", m.training))
    dropout.register_forward_hook(lambda m, i, o: seen.__setitem__("dropout", m.training))

    out = mc_dropout(model, num_samples=4, seed=0)(pixel_values=pixel_values)
    assert seen == {"bn": False, "dropout": True}
    assert all(torch.equal(v, stats[k]) for k, v in bn.state_dict().items())  # running stats untouched
    assert all(m.training is initially_training for m in model.modules())
    assert out.member_logits.shape == (4, 4, 5)
    assert not torch.allclose(out.member_logits[0], out.member_logits[1])


@torch.no_grad()
def test_seed_reproducibility(vit, pixel_values):
    rng_before = torch.get_rng_state()
    first = mc_dropout(vit, num_samples=5, seed=7)(pixel_values=pixel_values).member_logits
    again = mc_dropout(vit, num_samples=5, seed=7)(pixel_values=pixel_values).member_logits
    assert torch.equal(first, again)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is left alone
    other = mc_dropout(vit, num_samples=5, seed=8)(pixel_values=pixel_values).member_logits
    assert not torch.equal(first, other)
    unseeded = mc_dropout(vit, num_samples=5)
    assert not torch.equal(unseeded(pixel_values=pixel_values).logits, unseeded(pixel_values=pixel_values).logits)


@torch.no_grad()
def test_samples_per_pass_splits_the_work(vit, pixel_values):
    mc = mc_dropout(vit, num_samples=5, seed=1, samples_per_pass=2)
    calls = []
    handle = vit.register_forward_hook(lambda m, args, kwargs, out: calls.append(kwargs["pixel_values"].shape[0]),
                                       with_kwargs=True)
    try:
        out = mc(pixel_values=pixel_values)
    finally:
        handle.remove()
    assert calls == [8, 8, 4] and out.member_logits.shape == (5, 4, 8)
    assert not torch.allclose(out.member_logits[0], out.member_logits[2])


def test_model_without_dropout_raises():
    no_dropout = tiny_vit(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **TINY)
    assert dropout_modules(no_dropout) == []
    with pytest.raises(ValueError, match="ViTForImageClassification has no dropout module with p > 0"):
        mc_dropout(no_dropout)
    # timm's ResNet applies its head dropout functionally: nothing MC dropout can switch on
    with pytest.raises(ValueError, match="TimmWrapperForImageClassification .*rates are zero"):
        mc_dropout(tiny_cnn(drop_rate=0.5))


def test_invalid_arguments_raise(vit):
    with pytest.raises(ValueError, match="num_samples"):
        mc_dropout(vit, num_samples=0)
    with pytest.raises(ValueError, match="uncertainty_score"):
        mc_dropout(vit, uncertainty_score="energy")
    with pytest.raises(ValueError, match="pixel_values"):
        mc_dropout(vit)(pixel_values=torch.randn(3, 16, 16))


def test_wrapper_shares_the_model(vit):
    mc = mc_dropout(vit, num_samples=2, uncertainty_score="epistemic")
    assert isinstance(mc, MCDropoutModel) and mc.model is vit and mc.config is vit.config
    assert {id(p) for p in mc.parameters()} == {id(p) for p in vit.parameters()}
