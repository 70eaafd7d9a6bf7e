"""OOD detection metrics (AUROC, FPR@95, AUPR) as an `evaluate` metric.

A thin wrapper: features and input checks here, the definitions in `hf_uq.functional`.
"""

import evaluate

import hf_uq._metrics
import hf_uq.functional

_DESCRIPTION = """
How well a per-sample score separates out-of-distribution (OOD) inputs from in-distribution ones,
with OOD as the positive class and "higher score = more likely OOD". AUROC is the probability
that a random OOD sample scores above a random in-distribution one (ties count one half; 0.5 is
chance). FPR@95 is the fraction of in-distribution samples flagged (score >= t) at the highest
threshold t that still flags at least 95% of the OOD samples. AUPR is the average precision of
the OOD class.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): one score per sample, higher = more likely OOD (e.g. msp,
        entropy, energy or an ensemble's mutual information).
    references (`list` of `int`): 1 for an OOD sample, 0 for an in-distribution one; both must
        be present.
Returns:
    auroc (`float`): in [0, 1]; higher is better, 0.5 is chance.
    fpr_at_95 (`float`): in [0, 1]; lower is better.
    aupr (`float`): in [0, 1]; higher is better, chance is the OOD fraction.
Examples:
    >>> import hf_uq
    >>> ood = hf_uq.load_metric("ood_auroc")
    >>> result = ood.compute(predictions=[0.1, 0.4, 0.35, 0.8, 0.7, 0.2],
    ...                      references=[0, 0, 1, 1, 1, 0])
    >>> print({k: round(v, 4) for k, v in result.items()})
    {'auroc': 0.8889, 'fpr_at_95': 0.3333, 'aupr': 0.9167}
"""

_CITATION = """
@inproceedings{hendrycks2017baseline,
  title={A Baseline for Detecting Misclassified and Out-of-Distribution Examples in Neural Networks},
  author={Hendrycks, Dan and Gimpel, Kevin},
  booktitle={International Conference on Learning Representations},
  year={2017}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class OodAuroc(hf_uq._metrics.InputChecks, evaluate.Metric):
    INPUT_NDIM = {"predictions": 1, "references": 1}

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=hf_uq._metrics.score_features(self.config_name),
            format="numpy",
            reference_urls=["https://arxiv.org/abs/1610.02136"],
        )

    def _compute(self, predictions, references, **others):
        hf_uq._metrics.check_sibling_options("ood_auroc", others)
        id_scores, ood_scores = hf_uq._metrics.ood_groups(predictions, references)
        return hf_uq.functional.ood_metrics(id_scores, ood_scores)
