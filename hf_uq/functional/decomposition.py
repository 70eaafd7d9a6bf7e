"""Total / aleatoric / epistemic decompositions of predictive uncertainty (in nats).

- Ensembles, MC dropout, BatchEnsemble: member probabilities P (M, N, C);
  total = H(mean_m P_m), aleatoric = mean_m H(P_m), epistemic = total - aleatoric (the mutual
  information, clipped at 0 against rounding).
- Dirichlet concentrations alpha (N, C) (Malinin et al. 2020): total = H(alpha / alpha_0),
  aleatoric = -sum_c (alpha_c / alpha_0)(digamma(alpha_c + 1) - digamma(alpha_0 + 1)),
  epistemic = total - aleatoric.
"""

from __future__ import annotations

from typing import Any

import torch

from .scores import _out, as_tensor, check_prob_tensor, entropy_of


def ensemble_uncertainty(member_probs: Any) -> dict[str, Any]:
    """Decompose an ensemble's predictive entropy: ``{"total", "aleatoric", "epistemic"}``, each (N,).

    Args:
        member_probs: (M, N, C) probabilities of M members for N samples.
    """
    p, was_torch = as_tensor(member_probs, "member_probs", 3, "(n_members, n_samples, n_classes)")
    check_prob_tensor(p, "member_probs")
    total = entropy_of(p.mean(dim=0))
    aleatoric = entropy_of(p).mean(dim=0)
    epistemic = (total - aleatoric).clamp_min(0.0)
    return {k: _out(v, was_torch) for k, v in
            (("total", total), ("aleatoric", aleatoric), ("epistemic", epistemic))}


def dirichlet_uncertainty(alphas: Any, validate: bool = True) -> dict[str, Any]:
    """Decompose a Dirichlet prediction: ``{"total", "aleatoric", "epistemic"}``, each (N,).

    Args:
        alphas: (N, C) positive concentrations.
        validate: check shape, finiteness and positivity (each check is a pass over the data
            and a device sync). ``False`` is for callers that produce ``alphas`` themselves
            within known bounds (``DirichletStudentForImageClassification``'s forward): it
            requires a floating ``torch.Tensor`` and trusts it.
    """
    if validate:
        a, was_torch = as_tensor(alphas, "alphas", 2, "(n_samples, n_classes)")
        if bool((a <= 0).any()):
            raise ValueError(f"`alphas` must be positive, got minimum {float(a.min())}")
    elif isinstance(alphas, torch.Tensor) and torch.is_floating_point(alphas):
        a, was_torch = alphas, True
    else:
        raise ValueError("`validate=False` needs a floating torch.Tensor of concentrations")
    alpha0 = a.sum(dim=-1, keepdim=True)
    mean = a / alpha0
    total = entropy_of(mean)
    aleatoric = -(mean * (torch.digamma(a + 1.0) - torch.digamma(alpha0 + 1.0))).sum(dim=-1)
    epistemic = (total - aleatoric).clamp_min(0.0)
    return {k: _out(v, was_torch) for k, v in
            (("total", total), ("aleatoric", aleatoric), ("epistemic", epistemic))}
