"""Diversity fidelity: does a compressed model find the same samples uncertain as its teacher?"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy.stats import rankdata

from ._validation import check_same_length, check_scores

FIDELITY_THRESHOLD = 0.7
"""Below this Spearman correlation the teacher's diversity is considered lost (DESIGN.md §3)."""


def fidelity(u_model: Any, u_teacher: Any) -> float:
    """Spearman rank correlation between two uncertainty scores over the same samples, in [-1, 1].

    Higher is better; below ``FIDELITY_THRESHOLD`` (0.7) reports flag the route. Ties get
    average ranks. NaN with a warning when either score is constant.
    """
    a = check_scores(u_model, "u_model")
    b = check_scores(u_teacher, "u_teacher")
    check_same_length(("u_model", a), ("u_teacher", b))
    if len(a) < 2:
        raise ValueError("fidelity needs at least 2 samples")
    ra = rankdata(a) - (len(a) + 1) / 2.0
    rb = rankdata(b) - (len(b) + 1) / 2.0
    denom = np.sqrt(np.dot(ra, ra) * np.dot(rb, rb))
    if denom == 0:
        warnings.warn("fidelity is undefined for a constant score; returning NaN",
                      RuntimeWarning, stacklevel=2)
        return float("nan")
    return float(np.clip(np.dot(ra, rb) / denom, -1.0, 1.0))
