"""Pure numpy/torch uncertainty math: metrics, scores, decompositions.

Nothing here imports transformers or any other part of hf_uq; every model, evaluate module
and report calls these functions so each definition lives exactly once (DESIGN.md §3).
"""

from .bootstrap import BootstrapInterval, bootstrap_indices, bootstrap_interval
from .classification import CalibrationBins, accuracy, brier, calibration_bins, ece, nll, top_label
from .decomposition import dirichlet_uncertainty, ensemble_uncertainty
from .dirichlet import (
    DIRICHLET_PROB_FLOOR,
    dirichlet_log_prob,
    dirichlet_nll,
    mean_distillation_kl,
    smooth_log_probs,
    tempered_dirichlet_nll,
)
from .fidelity import FIDELITY_THRESHOLD, fidelity
from .ranking import aupr_ood, cp_auroc, fpr_at_95, ood_auroc, ood_metrics
from .scores import energy, entropy, margin, max_logit, msp
from .selective import (
    RiskProfile,
    aurc,
    e_aurc,
    risk_coverage_curve,
    risk_profile,
    sac,
    selective_metrics,
)
from .temperature import TemperedNLL, fuse_logits, tempered_nll, tempered_nll_grad

__all__ = [
    "DIRICHLET_PROB_FLOOR",
    "dirichlet_log_prob",
    "dirichlet_nll",
    "mean_distillation_kl",
    "smooth_log_probs",
    "tempered_dirichlet_nll",
    "FIDELITY_THRESHOLD",
    "BootstrapInterval",
    "CalibrationBins",
    "RiskProfile",
    "accuracy",
    "aupr_ood",
    "aurc",
    "bootstrap_indices",
    "bootstrap_interval",
    "brier",
    "calibration_bins",
    "cp_auroc",
    "dirichlet_uncertainty",
    "e_aurc",
    "ece",
    "energy",
    "ensemble_uncertainty",
    "entropy",
    "fidelity",
    "fpr_at_95",
    "margin",
    "max_logit",
    "msp",
    "nll",
    "ood_auroc",
    "ood_metrics",
    "risk_coverage_curve",
    "risk_profile",
    "sac",
    "selective_metrics",
    "TemperedNLL",
    "fuse_logits",
    "tempered_nll",
    "tempered_nll_grad",
    "top_label",
]
