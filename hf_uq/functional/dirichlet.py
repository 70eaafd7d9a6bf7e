"""Losses of ensemble (distribution) distillation into a Dirichlet (Malinin, Mlodozeniec, Gales, ICLR 2020).

A Dirichlet student with concentrations alpha (N, C) is fitted to the categorical predictions pi (M, N, C) of
the M members of an ensemble by maximum likelihood:

    NLL_n = -(1/M) sum_m log Dir(pi_mn | alpha_n)
          = -log Gamma(alpha_0) + sum_c log Gamma(alpha_c) - sum_c (alpha_c - 1) * (1/M) sum_m log pi_mc

(alpha_0 = sum_c alpha_c). Only the members' mean log-probabilities enter, so the loss of M members costs one
evaluation. Members predicting exact zeros make `log pi` infinite; two guards keep every value and gradient
finite:

- **target smoothing** ("central smoothing"): pi <- (1 - eps) * pi + eps / C pulls every member towards the
  centre of the simplex, bounding log pi below by log(eps / C);
- probabilities are clipped at 1e-12 before the log (as [`nll`] does), so eps = 0 stays finite too.

**Temperature** (annealing, as in the paper): at temperature T the members' logits and the student's
log-concentrations are both divided by T before the loss,

    pi_m^(T) = softmax(z_m / T),        alpha^(T) = exp(log(alpha) / T),

which spreads sharp member predictions away from the corners of the simplex (where the Dirichlet likelihood is
hard to optimize) and makes the student's task easier early in training; T is annealed to 1, where the loss is
the plain NLL above. At T = 1 both maps are the identity.

Classic (mean) ensemble distillation is given as a baseline: `T^2 * KL(mean_m pi_m^(T) || softmax(z_s / T))`,
which matches only the ensemble's mean prediction and keeps no information about the members' diversity.

Every function accepts torch tensors (differentiably: these are training losses), numpy arrays and lists;
numpy in gives numpy out. The math runs in float64 (C-sized reductions, cheap) and the result is cast back to
the input's floating dtype: `lgamma(alpha_0)` reaches ~1e6 for concentrated students, where float32 would lose
the loss's last digits to cancellation.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .scores import _out, as_tensor, check_prob_tensor

__all__ = [
    "DIRICHLET_PROB_FLOOR",
    "dirichlet_log_prob",
    "dirichlet_nll",
    "mean_distillation_kl",
    "smooth_log_probs",
    "tempered_dirichlet_nll",
]

#: Probabilities are clipped at this value before their log (as `hf_uq.functional.nll` does).
DIRICHLET_PROB_FLOOR = 1e-12
_LOG_FLOOR = math.log(DIRICHLET_PROB_FLOOR)
_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"`reduction` must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_smoothing(smoothing: float) -> float:
    smoothing = float(smoothing)
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"`smoothing` must be in [0, 1), got {smoothing}")
    return smoothing


def _check_temperature(temperature: float) -> float:
    temperature = float(temperature)
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"`temperature` must be finite and positive, got {temperature}")
    return temperature


def _check_members(members: torch.Tensor, student: torch.Tensor, names: tuple[str, str]) -> None:
    if tuple(members.shape[1:]) != tuple(student.shape):
        raise ValueError(
            f"`{names[0]}` has shape {tuple(members.shape)} but `{names[1]}` has {tuple(student.shape)}: "
            "expected (n_members, n_samples, n_classes) and (n_samples, n_classes)"
        )


def _reduce(per_sample: torch.Tensor, reduction: str, dtype: torch.dtype) -> torch.Tensor:
    per_sample = per_sample.to(dtype)
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    return per_sample


def _float_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def smooth_log_probs(log_probs: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """`log((1 - eps) * p + eps / C)` computed from `log p` (torch only, differentiable), clipped at log(1e-12).

    Args:
        log_probs: (..., C) log-probabilities (any normalized log-softmax output).
        smoothing: eps in [0, 1); 0 only clips.
    """
    smoothing = _check_smoothing(smoothing)
    if smoothing > 0:
        floor = torch.full_like(log_probs, math.log(smoothing / log_probs.shape[-1]))
        log_probs = torch.logaddexp(log_probs + math.log1p(-smoothing), floor)
    return log_probs.clamp_min(_LOG_FLOOR)


def _nll_from_logs(log_alphas: torch.Tensor, mean_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample -(log Dir normalizer + sum_c (alpha_c - 1) mean_log_p_c), all (N, C) float64 inputs."""
    alphas = log_alphas.exp()
    log_normalizer = torch.lgamma(alphas.sum(-1)) - torch.lgamma(alphas).sum(-1)
    return -(log_normalizer + ((alphas - 1.0) * mean_log_probs).sum(-1))


def dirichlet_log_prob(alphas: Any, probs: Any) -> Any:
    """Log-density of categorical distributions under Dirichlets: `log Dir(probs | alphas)`, shape (N,).

    Args:
        alphas: (N, C) positive concentrations.
        probs: (N, C) probabilities (rows sum to 1); clipped at 1e-12 before the log.
    """
    a, was_torch = as_tensor(alphas, "alphas", 2, "(n_samples, n_classes)")
    p, _ = as_tensor(probs, "probs", 2, "(n_samples, n_classes)")
    check_prob_tensor(p, "probs")
    _check_members(p.unsqueeze(0), a, ("probs", "alphas"))
    if bool((a <= 0).any()):
        raise ValueError(f"`alphas` must be positive, got minimum {float(a.min())}")
    log_p = p.to(torch.float64).clamp_min(DIRICHLET_PROB_FLOOR).log()
    value = -_nll_from_logs(a.to(torch.float64).log(), log_p)
    return _out(value.to(_float_dtype(a, p)), was_torch)


def dirichlet_nll(alphas: Any, member_probs: Any, *, smoothing: float = 0.0, reduction: str = "mean") -> Any:
    """Negative log-likelihood of M members' probabilities under per-sample Dirichlets (ensemble distribution
    distillation), averaged over members.

    `loss_n = -(1/M) sum_m log Dir(pi'_mn | alpha_n)` with `pi' = (1 - smoothing) * pi + smoothing / C`,
    probabilities clipped at 1e-12 before the log.

    Args:
        alphas: (N, C) positive concentrations of the student.
        member_probs: (M, N, C) probabilities of the M ensemble members (rows sum to 1).
        smoothing: central smoothing eps in [0, 1) of the members' probabilities.
        reduction: `"mean"` (default) or `"sum"` over samples, or `"none"` for the (N,) per-sample losses.

    Returns:
        A scalar (or (N,) for `reduction="none"`), differentiable with respect to `alphas`.
    """
    _check_reduction(reduction)
    a, was_torch = as_tensor(alphas, "alphas", 2, "(n_samples, n_classes)")
    p, _ = as_tensor(member_probs, "member_probs", 3, "(n_members, n_samples, n_classes)")
    check_prob_tensor(p, "member_probs")
    _check_members(p, a, ("member_probs", "alphas"))
    if bool((a.detach() <= 0).any()):
        raise ValueError(f"`alphas` must be positive, got minimum {float(a.detach().min())}")
    log_p = smooth_log_probs(p.detach().to(torch.float64).clamp_min(0.0).log(), smoothing)
    per_sample = _nll_from_logs(a.to(torch.float64).log(), log_p.mean(0))
    return _out(_reduce(per_sample, reduction, _float_dtype(a, p)), was_torch)


def tempered_dirichlet_nll(
    log_alphas: Any,
    member_logits: Any,
    *,
    temperature: float = 1.0,
    smoothing: float = 0.0,
    reduction: str = "mean",
) -> Any:
    """[`dirichlet_nll`] from log-space inputs at a distillation temperature T (the training loss of EnD^2).

    The student's concentrations are `alpha = exp(log_alphas / T)` and the members' probabilities
    `pi_m = softmax(member_logits_m / T)`, smoothed to `(1 - smoothing) * pi_m + smoothing / C`; then
    `loss_n = -(1/M) sum_m log Dir(pi_mn | alpha_n)`. At T = 1 this equals
    `dirichlet_nll(exp(log_alphas), softmax(member_logits))`.

    Args:
        log_alphas: (N, C) log-concentrations of the student (e.g. `outputs.alphas.log()`).
        member_logits: (M, N, C) logits (or log-probabilities) of the members; treated as constants (no gradient).
        temperature: T > 0 (annealed from a value > 1 down to 1 during training).
        smoothing: central smoothing eps in [0, 1).
        reduction: `"mean"`, `"sum"` or `"none"`.
    """
    _check_reduction(reduction)
    temperature = _check_temperature(temperature)
    z, was_torch = as_tensor(log_alphas, "log_alphas", 2, "(n_samples, n_classes)")
    m, _ = as_tensor(member_logits, "member_logits", 3, "(n_members, n_samples, n_classes)")
    _check_members(m, z, ("member_logits", "log_alphas"))
    log_p = smooth_log_probs((m.detach().to(torch.float64) / temperature).log_softmax(-1), smoothing)
    per_sample = _nll_from_logs(z.to(torch.float64) / temperature, log_p.mean(0))
    return _out(_reduce(per_sample, reduction, _float_dtype(z, m)), was_torch)


def mean_distillation_kl(
    student_logits: Any, member_logits: Any, *, temperature: float = 1.0, reduction: str = "mean"
) -> Any:
    """Classic ensemble distillation (Hinton et al. 2015): `T^2 * KL(mean_m softmax(z_m / T) || softmax(z_s / T))`.

    Only the ensemble's mean prediction is matched; the student keeps no trace of the members' diversity. The
    `T^2` factor keeps gradient magnitudes comparable across temperatures.

    Args:
        student_logits: (N, C) logits of the student (any normalization: only `log_softmax(z / T)` is used).
        member_logits: (M, N, C) logits (or log-probabilities) of the members; constants (no gradient).
        temperature: T > 0.
        reduction: `"mean"`, `"sum"` or `"none"`.
    """
    _check_reduction(reduction)
    temperature = _check_temperature(temperature)
    z, was_torch = as_tensor(student_logits, "student_logits", 2, "(n_samples, n_classes)")
    m, _ = as_tensor(member_logits, "member_logits", 3, "(n_members, n_samples, n_classes)")
    _check_members(m, z, ("member_logits", "student_logits"))
    member_log_probs = (m.detach().to(torch.float64) / temperature).log_softmax(-1)
    mean_log_probs = torch.logsumexp(member_log_probs, dim=0) - math.log(m.shape[0])
    student_log_probs = (z.to(torch.float64) / temperature).log_softmax(-1)
    mean_probs = mean_log_probs.exp()
    # 0 * log 0 = 0: a class no member gives any probability contributes nothing (and no NaN)
    terms = torch.where(mean_probs > 0, mean_probs * (mean_log_probs - student_log_probs), 0.0)
    per_sample = terms.sum(-1) * temperature**2
    return _out(_reduce(per_sample, reduction, _float_dtype(z, m)), was_torch)
