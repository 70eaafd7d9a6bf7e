"""Selective classification: risk-coverage curve, AURC, E-AURC and SAC, tie-exact.

Samples are ordered by uncertainty ascending (most certain first). Samples with equal
uncertainty cannot be separated by any threshold, so inside a tie group the risk is its
expectation over a uniformly random order: for a group at positions s+1..s+g holding e
errors after c earlier errors, the error count at position s+j is c + j * e / g. No result
depends on sort stability.

The ordering needs no ``argsort``: sorting the uncertainties and, separately, the
uncertainties of the errors, then one ``searchsorted`` per tie group gives the cumulative
error count at every group boundary. Two plain sorts are about ten times cheaper than an
argsort of the same array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import digamma

from ._validation import check_correct, check_same_length, check_scores


@dataclass(frozen=True)
class RiskProfile:
    """Cumulative errors at every tie-group boundary of the uncertainty ordering.

    Attributes:
        n: number of samples.
        group_end: (G,) number of samples up to and including each tie group (k at its end).
        errors_at_end: (G,) number of errors among those samples.
    """

    n: int
    group_end: np.ndarray
    errors_at_end: np.ndarray

    @property
    def n_errors(self) -> int:
        return int(self.errors_at_end[-1])

    def errors_per_position(self) -> np.ndarray:
        """Expected number of errors among the first k samples, k = 1..n (float64)."""
        if len(self.group_end) == self.n:  # no ties: every group is one sample
            return self.errors_at_end.astype(np.float64)
        sizes = np.diff(self.group_end, prepend=0)
        before = np.concatenate(([0], self.errors_at_end[:-1]))
        rate = (self.errors_at_end - before) / sizes
        group = np.repeat(np.arange(len(sizes)), sizes)
        within = np.arange(1, self.n + 1, dtype=np.float64) - (self.group_end - sizes)[group]
        return before[group] + within * rate[group]


def risk_profile(uncertainty: Any, correct: Any) -> RiskProfile:
    """Validate inputs and compute the shared ordering used by every selective metric."""
    u = check_scores(uncertainty, "uncertainty")
    ok = check_correct(correct)
    check_same_length(("uncertainty", u), ("correct", ok))
    sorted_u = np.sort(u)
    sorted_err_u = np.sort(u[~ok])
    ends = np.flatnonzero(sorted_u[1:] != sorted_u[:-1])
    ends = np.append(ends, len(u) - 1)
    errors = np.searchsorted(sorted_err_u, sorted_u[ends], side="right")
    return RiskProfile(len(u), ends + 1, errors.astype(np.int64))


def _oracle_aurc(n: int, n_errors: int) -> float:
    """AURC of the best possible ordering: every correct sample before every error."""
    n_correct = n - n_errors
    if n_errors == 0:
        return 0.0
    k = np.arange(n_correct + 1, n + 1, dtype=np.float64)
    return float(np.sum((k - n_correct) / k) / n)


def _aurc(profile: RiskProfile) -> float:
    """(1/N) sum_k E_k / k summed group by group, without materializing the N-long curve.

    A singleton group at k contributes E_k / k. A tie group at positions s+1..s+g with c
    earlier and e own errors contributes sum_j (c + j e/g) / (s + j) = e + (c - e s / g) dH,
    with dH = sum_j 1/(s + j) = digamma(s + g + 1) - digamma(s + 1).
    """
    k_end = profile.group_end
    errors = profile.errors_at_end
    sizes = np.diff(k_end, prepend=0)
    single = sizes == 1
    total = np.sum(errors[single] / k_end[single])
    if not single.all():
        tied = ~single
        before = np.concatenate(([0], errors[:-1]))[tied].astype(np.float64)
        own = errors[tied] - before
        g = sizes[tied].astype(np.float64)
        s = (k_end[tied] - sizes[tied]).astype(np.float64)
        dh = digamma(s + g + 1.0) - digamma(s + 1.0)
        total += np.sum(own + (before - own * s / g) * dh)
    return float(total / profile.n)


def _sac(profile: RiskProfile, accuracy: float) -> float:
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"`accuracy` (the target selective accuracy) must be in [0, 1], got {accuracy}")
    k = profile.group_end.astype(np.float64)
    n_right = k - profile.errors_at_end
    # compare counts, not ratios, with a tolerance for the float target (49/50 vs 0.98)
    meets = n_right >= accuracy * k - 1e-9 * k
    if not meets.any():
        return 0.0
    return float(profile.group_end[meets].max() / profile.n)


def risk_coverage_curve(uncertainty: Any, correct: Any) -> tuple[np.ndarray, np.ndarray]:
    """Coverage k/N and selective risk (expected error rate among the k most certain), k = 1..N.

    Args:
        uncertainty: (N,) scores, higher = less trustworthy.
        correct: (N,) booleans, True where the prediction is right.

    Returns:
        ``(coverage, risk)``, two (N,) float64 arrays.
    """
    profile = risk_profile(uncertainty, correct)
    k = np.arange(1, profile.n + 1, dtype=np.float64)
    return k / profile.n, profile.errors_per_position() / k


def aurc(uncertainty: Any, correct: Any) -> float:
    """Area under the risk-coverage curve, (1/N) sum_k risk_k, in [0, 1], lower is better.

    torch-uncertainty integrates the same curve with the trapezoid rule; this is the
    discrete mean of the Asymmetric Duos paper and Geifman et al. (reported x100 in tables).
    """
    return _aurc(risk_profile(uncertainty, correct))


def e_aurc(uncertainty: Any, correct: Any) -> float:
    """Excess AURC: AURC minus the AURC of the oracle ordering (errors last), >= 0, lower is better."""
    profile = risk_profile(uncertainty, correct)
    return _aurc(profile) - _oracle_aurc(profile.n, profile.n_errors)


def sac(uncertainty: Any, correct: Any, accuracy: float = 0.98) -> float:
    """Selective accuracy constraint: the largest coverage whose selective accuracy >= ``accuracy``.

    Coverage k/N in [0, 1], higher is better. k is restricted to tie-group boundaries (a
    threshold one can deploy); 0.0 when no k qualifies.
    """
    return _sac(risk_profile(uncertainty, correct), accuracy)


def selective_metrics(uncertainty: Any, correct: Any, accuracy: float = 0.98) -> dict[str, float]:
    """AURC, E-AURC and SAC from one shared ordering: ``{"aurc", "e_aurc", "sac"}``."""
    profile = risk_profile(uncertainty, correct)
    area = _aurc(profile)
    return {
        "aurc": area,
        "e_aurc": area - _oracle_aurc(profile.n, profile.n_errors),
        "sac": _sac(profile, accuracy),
    }
