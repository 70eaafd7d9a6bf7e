"""Dirichlet distillation losses: hand-computed values, finiteness at the corners of the simplex, tempering."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import gammaln
from scipy.stats import dirichlet as scipy_dirichlet

from hf_uq.functional.decomposition import dirichlet_uncertainty
from hf_uq.functional.dirichlet import (
    dirichlet_log_prob,
    dirichlet_nll,
    mean_distillation_kl,
    smooth_log_probs,
    tempered_dirichlet_nll,
)

ALPHAS = np.array([[2.0, 3.0, 0.5], [1.0, 1.0, 1.0], [10.0, 0.2, 4.0]])
MEMBER_PROBS = np.array(
    [
        [[0.7, 0.2, 0.1], [0.3, 0.3, 0.4], [0.5, 0.1, 0.4]],
        [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.8, 0.05, 0.15]],
    ]
)  # (M=2, N=3, C=3)


def by_hand(alphas: np.ndarray, member_probs: np.ndarray) -> np.ndarray:
    """-(1/M) sum_m log Dir(p_m | alpha) per sample, from scipy's gammaln."""
    per_member = [
        [
            gammaln(a.sum()) - gammaln(a).sum() + ((a - 1) * np.log(p)).sum()
            for a, p in zip(alphas, member, strict=True)
        ]
        for member in member_probs
    ]
    return -np.mean(per_member, axis=0)


def test_nll_equals_the_hand_computed_value():
    expected = by_hand(ALPHAS, MEMBER_PROBS)
    np.testing.assert_allclose(dirichlet_nll(ALPHAS, MEMBER_PROBS, reduction="none"), expected, rtol=1e-12)
    np.testing.assert_allclose(dirichlet_nll(ALPHAS, MEMBER_PROBS), expected.mean(), rtol=1e-12)
    np.testing.assert_allclose(dirichlet_nll(ALPHAS, MEMBER_PROBS, reduction="sum"), expected.sum(), rtol=1e-12)


def test_smoothing_is_central_smoothing_of_the_targets():
    eps = 0.1
    smoothed = (1 - eps) * MEMBER_PROBS + eps / 3
    np.testing.assert_allclose(dirichlet_nll(ALPHAS, MEMBER_PROBS, smoothing=eps), by_hand(ALPHAS, smoothed).mean())


def test_log_prob_matches_scipy():
    probs = MEMBER_PROBS[0]
    expected = [scipy_dirichlet.logpdf(p, a) for a, p in zip(ALPHAS, probs, strict=True)]
    np.testing.assert_allclose(dirichlet_log_prob(ALPHAS, probs), expected, rtol=1e-10)


def test_torch_in_torch_out_and_float32_stays_float32():
    alphas = torch.tensor(ALPHAS, dtype=torch.float32, requires_grad=True)
    loss = dirichlet_nll(alphas, torch.tensor(MEMBER_PROBS, dtype=torch.float32))
    assert isinstance(loss, torch.Tensor) and loss.dtype == torch.float32
    loss.backward()
    # d/d alpha_c of the NLL: digamma(alpha_c) - digamma(alpha_0) - mean_m log p_mc (averaged over N = 3)
    a = torch.tensor(ALPHAS)
    expected = (torch.digamma(a) - torch.digamma(a.sum(-1, keepdim=True)) - torch.tensor(MEMBER_PROBS).log().mean(0)) / 3
    torch.testing.assert_close(alphas.grad, expected.float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 1e-4, 0.01])
def test_gradients_are_finite_for_probabilities_of_exactly_zero_and_one(smoothing):
    probs = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    log_alphas = torch.tensor([[3.0, -2.0, 0.5], [0.0, 1.0, -1.0]], requires_grad=True)
    loss = dirichlet_nll(log_alphas.exp(), probs, smoothing=smoothing)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(log_alphas.grad).all()

    # in log space: members so confident that softmax underflows to exact zeros
    member_logits = torch.tensor([[[0.0, -1e4, -1e4], [-1e4, 0.0, -1e4]], [[0.0, -1e4, -1e4], [-1e4, -1e4, 0.0]]])
    assert (member_logits.softmax(-1) == 0).any() and (member_logits.softmax(-1) == 1).any()
    z = log_alphas.detach().clone().requires_grad_(True)
    for temperature in (1.0, 3.0):
        loss = tempered_dirichlet_nll(z, member_logits, temperature=temperature, smoothing=smoothing)
        (grad,) = torch.autograd.grad(loss, z)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


def test_smooth_log_probs_bounds_the_log():
    log_p = torch.tensor([[0.0, -float("inf"), -float("inf")]])
    assert smooth_log_probs(log_p, 0.0).min() >= np.log(1e-12)
    torch.testing.assert_close(smooth_log_probs(log_p, 0.3).exp(), torch.tensor([[0.8, 0.1, 0.1]]))


def test_tempering_divides_log_alphas_and_member_logits():
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    member_logits = 3 * torch.randn(3, 5, 4, generator=generator, dtype=torch.float64)
    at_one = tempered_dirichlet_nll(z, member_logits)
    torch.testing.assert_close(at_one, dirichlet_nll(z.exp(), member_logits.softmax(-1)))
    t = 2.5
    tempered = tempered_dirichlet_nll(z, member_logits, temperature=t, smoothing=0.01, reduction="none")
    expected = dirichlet_nll((z / t).exp(), (member_logits / t).softmax(-1), smoothing=0.01, reduction="none")
    torch.testing.assert_close(tempered, expected)
    # log-probabilities give the same loss as logits (softmax is shift invariant)
    torch.testing.assert_close(tempered_dirichlet_nll(z, member_logits.log_softmax(-1), temperature=t),
                               tempered_dirichlet_nll(z, member_logits, temperature=t))


def test_mean_kl_matches_the_hand_computed_kl():
    generator = torch.Generator().manual_seed(1)
    student = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    members = torch.randn(5, 4, 3, generator=generator, dtype=torch.float64)
    t = 2.0
    mean = (members / t).softmax(-1).mean(0)
    q = (student / t).softmax(-1)
    expected = (mean * (mean / q).log()).sum(-1) * t**2
    torch.testing.assert_close(mean_distillation_kl(student, members, temperature=t, reduction="none"), expected)
    # zero when the student predicts the ensemble's mean
    assert float(mean_distillation_kl(mean.log(), members)) < 1e-12 if t == 1 else True
    mean_at_one = members.softmax(-1).mean(0)
    assert abs(float(mean_distillation_kl(mean_at_one.log(), members))) < 1e-12
    # exact zeros in the teacher's mean contribute nothing (no NaN)
    confident = torch.tensor([[[0.0, -1e4, -1e4]], [[0.0, -1e4, -1e4]]])
    assert torch.isfinite(mean_distillation_kl(torch.zeros(1, 3), confident))


def test_minimizer_of_the_nll_has_a_positive_epistemic_term():
    # a student fit to diverse members keeps their diversity: epistemic > 0 and total = aleatoric + epistemic
    members = torch.tensor(MEMBER_PROBS)
    z = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([z], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = dirichlet_nll(z.exp(), members)
        loss.backward()
        return loss

    optimizer.step(closure)
    terms = dirichlet_uncertainty(z.detach().exp())
    assert (terms["epistemic"] > 0).all()
    torch.testing.assert_close(terms["total"], terms["aleatoric"] + terms["epistemic"])
    # the fitted Dirichlet's mean is close to the members' mean prediction
    mean = z.detach().exp() / z.detach().exp().sum(-1, keepdim=True)
    torch.testing.assert_close(mean, members.mean(0), atol=0.05, rtol=0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dirichlet_nll(ALPHAS, MEMBER_PROBS[:, :2]), "shape"),
        (lambda: dirichlet_nll(-ALPHAS, MEMBER_PROBS), "positive"),
        (lambda: dirichlet_nll(ALPHAS, MEMBER_PROBS * 2), "sum to 1"),
        (lambda: dirichlet_nll(ALPHAS, MEMBER_PROBS, reduction="max"), "reduction"),
        (lambda: dirichlet_nll(ALPHAS, MEMBER_PROBS, smoothing=1.0), "smoothing"),
        (lambda: tempered_dirichlet_nll(ALPHAS, MEMBER_PROBS, temperature=0.0), "temperature"),
        (lambda: mean_distillation_kl(ALPHAS, MEMBER_PROBS[0]), "3 dimensions"),
        (lambda: tempered_dirichlet_nll(np.full((3, 3), np.nan), MEMBER_PROBS), "NaN"),
    ],
)
def test_invalid_inputs_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()
