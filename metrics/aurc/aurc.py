"""Area under the risk-coverage curve (AURC) and excess AURC (E-AURC) as an `evaluate` metric.

A thin wrapper: features and input checks here, the definitions in `hf_uq.functional`.
"""

import evaluate

import hf_uq._metrics
import hf_uq.functional

_DESCRIPTION = """
Area under the risk-coverage curve. Samples are sorted from most to least trustworthy by an
uncertainty score (default: msp = 1 - max probability); risk_k is the error rate among the first
k, and AURC = (1/N) sum_k risk_k. Samples with tied scores count in expectation over a random
order. E-AURC subtracts the AURC of the best possible ordering (every error last), so it measures
the ranking alone, not the error rate. Pass `uncertainty` (higher = less trustworthy) to evaluate
any other score, e.g. entropy or an ensemble's mutual information.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `float`): class probabilities, one row of C values per
        sample, each row summing to 1 (tolerance 1e-4). They give the prediction (argmax) and,
        unless `uncertainty` is given, the score msp = 1 - max probability.
    references (`list` of `int`): true labels in [0, C).
    uncertainty (`list` of `float`, *optional*): one score per sample, higher = less
        trustworthy. With the default config, pass it to `compute()` for all samples; with
        `config_name="with_uncertainty"` it is an input like `predictions`, added batch by batch.
Returns:
    aurc (`float`): in [0, 1]; lower is better. Tables often report it x100.
    e_aurc (`float`): at least 0; lower is better, 0 is a perfect ranking (errors last).
Examples:
    >>> import hf_uq
    >>> aurc = hf_uq.load_metric("aurc")
    >>> probs = [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.7, 0.2, 0.1],
    ...          [0.2, 0.2, 0.6], [0.3, 0.6, 0.1], [0.5, 0.3, 0.2]]
    >>> labels = [0, 1, 1, 2, 1, 2]
    >>> result = aurc.compute(predictions=probs, references=labels)
    >>> print({k: round(v, 4) for k, v in result.items()})
    {'aurc': 0.1861, 'e_aurc': 0.0972}
"""

_CITATION = """
@inproceedings{geifman2019biasreduced,
  title={Bias-Reduced Uncertainty Estimation for Deep Neural Classifiers},
  author={Geifman, Yonatan and Uziel, Guy and El-Yaniv, Ran},
  booktitle={International Conference on Learning Representations},
  year={2019}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Aurc(hf_uq._metrics.InputChecks, evaluate.Metric):
    UNCERTAINTY_CONFIG = True

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=hf_uq._metrics.probability_features(self.config_name, uncertainty_config=True),
            reference_urls=["https://arxiv.org/abs/1805.08206"],
        )

    def _compute(self, predictions, references, uncertainty=None, **others):
        hf_uq._metrics.check_sibling_options("aurc", others)
        u, correct = hf_uq._metrics.selective_inputs(predictions, references, uncertainty)
        result = hf_uq.functional.selective_metrics(u, correct)
        return {"aurc": result["aurc"], "e_aurc": result["e_aurc"]}
