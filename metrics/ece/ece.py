"""Top-label expected calibration error (ECE) as an `evaluate` metric.

A thin wrapper: features and input checks here, the definition in `hf_uq.functional.ece`.
"""

import evaluate

import hf_uq._metrics
import hf_uq.functional

_DESCRIPTION = """
Expected calibration error (ECE) of the top label: how far the model's confidence (its highest
class probability) is from its accuracy. Samples are grouped into M bins by confidence; ECE is
the sample-weighted mean over bins of |accuracy(bin) - mean confidence(bin)|. Equal-width bins
are (m/M, (m+1)/M], with confidence 0 in the first bin. `binning="quantile"` uses equal-mass bins,
`norm="l2"` gives the root-mean-square gap and `norm="max"` the largest gap (MCE).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `float`): class probabilities, one row of C values per
        sample, each row summing to 1 (tolerance 1e-4). Apply a softmax to logits first.
    references (`list` of `int`): true labels in [0, C).
    n_bins (`int`, defaults to 15): number of bins M.
    binning (`str`, defaults to `"uniform"`): `"uniform"` (equal width) or `"quantile"`
        (equal mass).
    norm (`str`, defaults to `"l1"`): `"l1"` (ECE), `"l2"` (RMS gap) or `"max"` (MCE).
Returns:
    ece (`float`): in [0, 1]; lower is better, 0 is perfectly calibrated.
Examples:
    >>> import hf_uq
    >>> ece = hf_uq.load_metric("ece")
    >>> probs = [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.7, 0.2, 0.1],
    ...          [0.2, 0.2, 0.6], [0.3, 0.6, 0.1], [0.5, 0.3, 0.2]]
    >>> labels = [0, 1, 1, 2, 1, 2]
    >>> round(ece.compute(predictions=probs, references=labels, n_bins=5)["ece"], 4)
    0.15
"""

_CITATION = """
@inproceedings{naeini2015obtaining,
  title={Obtaining Well Calibrated Probabilities Using Bayesian Binning},
  author={Naeini, Mahdi Pakdaman and Cooper, Gregory and Hauskrecht, Milos},
  booktitle={Proceedings of the AAAI Conference on Artificial Intelligence},
  year={2015}
}
@inproceedings{guo2017calibration,
  title={On Calibration of Modern Neural Networks},
  author={Guo, Chuan and Pleiss, Geoff and Sun, Yu and Weinberger, Kilian Q.},
  booktitle={Proceedings of the 34th International Conference on Machine Learning},
  year={2017}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Ece(hf_uq._metrics.InputChecks, evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=hf_uq._metrics.probability_features(self.config_name, uncertainty_config=False),
            reference_urls=["https://arxiv.org/abs/1706.04599"],
        )

    def _compute(self, predictions, references, n_bins=15, binning="uniform", norm="l1", **others):
        hf_uq._metrics.check_sibling_options("ece", others)
        probs, labels = hf_uq._metrics.probs_and_labels(predictions, references)
        ece = hf_uq.functional.ece(probs, labels, n_bins=n_bins, binning=binning, norm=norm)
        return {"ece": ece}
