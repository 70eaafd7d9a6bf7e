"""Uncertainty scores, decompositions and fidelity."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import digamma, logsumexp
from scipy.stats import entropy as scipy_entropy
from scipy.stats import spearmanr

from hf_uq import functional as F


def test_scores_hand_worked():
    p = np.array([[0.7, 0.2, 0.1], [0.4, 0.4, 0.2]])
    np.testing.assert_allclose(F.msp(p), [0.3, 0.6])
    np.testing.assert_allclose(F.margin(p), [1 - 0.5, 1 - 0.0])
    np.testing.assert_allclose(F.entropy(p), scipy_entropy(p, axis=1))
    np.testing.assert_allclose(F.entropy([[1.0, 0.0]]), [0.0])  # 0 log 0 = 0
    z = np.array([[2.0, 1.0, -1.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(F.max_logit(z), [-2.0, 0.0])
    np.testing.assert_allclose(F.energy(z), -logsumexp(z, axis=1))
    np.testing.assert_allclose(F.energy(z, temperature=2.0), -2 * logsumexp(z / 2, axis=1))


def test_scores_keep_torch_and_gradients():
    z = torch.randn(5, 4, requires_grad=True)
    e = F.entropy(torch.softmax(z, -1))
    assert isinstance(e, torch.Tensor) and e.shape == (5,)
    e.sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
    assert isinstance(F.msp(np.full((2, 2), 0.5)), np.ndarray)


def test_ensemble_decomposition_hand_worked():
    # two confident members that disagree: aleatoric 0, epistemic = total = log 2
    members = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    d = F.ensemble_uncertainty(members)
    np.testing.assert_allclose(d["total"], [np.log(2)])
    np.testing.assert_allclose(d["aleatoric"], [0.0])
    np.testing.assert_allclose(d["epistemic"], [np.log(2)])
    # two members that agree on 50/50: all aleatoric
    d = F.ensemble_uncertainty(np.full((2, 1, 2), 0.5))
    np.testing.assert_allclose(d["epistemic"], [0.0], atol=1e-12)
    np.testing.assert_allclose(d["aleatoric"], [np.log(2)])


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(2, 6), st.integers(0, 10_000))
def test_ensemble_decomposition_properties(m, n, c, seed):
    p = np.random.default_rng(seed).dirichlet(np.full(c, 0.3), size=(m, n))
    d = F.ensemble_uncertainty(p)
    assert (d["epistemic"] >= 0).all()  # mutual information is never negative
    np.testing.assert_allclose(d["total"], scipy_entropy(p.mean(0), axis=1), atol=1e-10)
    np.testing.assert_allclose(d["total"] - d["aleatoric"], d["epistemic"], atol=1e-10)


def test_dirichlet_decomposition_matches_formula():
    rng = np.random.default_rng(0)
    a = rng.gamma(2.0, 2.0, size=(50, 4)) + 0.05
    d = F.dirichlet_uncertainty(a)
    a0 = a.sum(1, keepdims=True)
    mean = a / a0
    expected_alea = -(mean * (digamma(a + 1) - digamma(a0 + 1))).sum(1)
    np.testing.assert_allclose(d["total"], scipy_entropy(mean, axis=1), rtol=1e-10)
    np.testing.assert_allclose(d["aleatoric"], expected_alea, rtol=1e-10)
    np.testing.assert_allclose(d["total"], d["aleatoric"] + d["epistemic"], atol=1e-12)
    assert (d["epistemic"] >= 0).all()
    # sharper concentrations at the same mean -> less epistemic uncertainty
    sharp = F.dirichlet_uncertainty(a * 100)
    assert (sharp["epistemic"] < d["epistemic"]).all()


def test_dirichlet_rejects_non_positive():
    with pytest.raises(ValueError, match="positive"):
        F.dirichlet_uncertainty([[1.0, 0.0]])


def test_dirichlet_unvalidated_path_gives_the_same_terms():
    a = torch.from_numpy(np.random.default_rng(1).gamma(2.0, 2.0, size=(20, 5)) + 0.05)
    checked, trusted = F.dirichlet_uncertainty(a), F.dirichlet_uncertainty(a, validate=False)
    for key in ("total", "aleatoric", "epistemic"):
        torch.testing.assert_close(trusted[key], checked[key], rtol=0, atol=0)
    with pytest.raises(ValueError, match="floating torch.Tensor"):
        F.dirichlet_uncertainty(a.numpy(), validate=False)


def test_fidelity_matches_scipy_spearman():
    rng = np.random.default_rng(0)
    a = np.round(rng.random(500), 1)  # ties
    b = a + rng.normal(0, 0.3, 500)
    assert F.fidelity(a, b) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
    assert F.fidelity([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert F.fidelity([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_fidelity_constant_is_nan():
    with pytest.warns(RuntimeWarning, match="constant"):
        assert np.isnan(F.fidelity([1, 1, 1], [1, 2, 3]))
