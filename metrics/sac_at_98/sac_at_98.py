"""Selective accuracy constraint (SAC, default 98%) as an `evaluate` metric.

A thin wrapper: features and input checks here, the definition in `hf_uq.functional.sac`.
"""

import evaluate

import hf_uq._metrics
import hf_uq.functional

_DESCRIPTION = """
Selective accuracy constraint: the largest fraction of samples (coverage) a model may answer
while keeping its accuracy on the answered samples at or above a target (default 98%). Samples
are answered from most to least trustworthy by an uncertainty score (default: msp = 1 - max
probability); only cut-offs between different scores count, since tied samples cannot be
separated by a threshold. 0.0 when no cut-off reaches the target. Pass `uncertainty` (higher =
less trustworthy) to evaluate any other score.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `float`): class probabilities, one row of C values per
        sample, each row summing to 1 (tolerance 1e-4). They give the prediction (argmax) and,
        unless `uncertainty` is given, the score msp = 1 - max probability.
    references (`list` of `int`): true labels in [0, C).
    accuracy (`float`, defaults to 0.98): the target selective accuracy, in [0, 1].
    uncertainty (`list` of `float`, *optional*): one score per sample, higher = less
        trustworthy. With the default config, pass it to `compute()` for all samples; with
        `config_name="with_uncertainty"` it is an input like `predictions`, added batch by batch.
Returns:
    sac (`float`): the coverage, in [0, 1]; higher is better.
Examples:
    >>> import hf_uq
    >>> sac = hf_uq.load_metric("sac_at_98")
    >>> probs = [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.7, 0.2, 0.1],
    ...          [0.2, 0.2, 0.6], [0.3, 0.6, 0.1], [0.5, 0.3, 0.2]]
    >>> labels = [0, 1, 1, 2, 1, 2]
    >>> round(sac.compute(predictions=probs, references=labels, accuracy=0.75)["sac"], 4)
    0.8333
"""

_CITATION = """
@article{zhou2025asymmetric,
  title={Asymmetric Duos: Sidekicks Improve Uncertainty},
  author={Zhou, Tim G. and Shelhamer, Evan and Pleiss, Geoff},
  journal={arXiv preprint arXiv:2505.18636},
  year={2025}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SacAt98(hf_uq._metrics.InputChecks, evaluate.Metric):
    UNCERTAINTY_CONFIG = True

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=hf_uq._metrics.probability_features(self.config_name, uncertainty_config=True),
            reference_urls=["https://arxiv.org/abs/2505.18636"],
        )

    def _compute(self, predictions, references, accuracy=0.98, uncertainty=None, **others):
        hf_uq._metrics.check_sibling_options("sac_at_98", others)
        u, correct = hf_uq._metrics.selective_inputs(predictions, references, uncertainty)
        return {"sac": hf_uq.functional.sac(u, correct, accuracy=accuracy)}
