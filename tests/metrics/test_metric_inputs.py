"""Bad input to the evaluate modules reaches the user as a ValueError that names the problem.

evaluate stores inputs in Arrow before a module sees them and casts them on the way (a label of
1.5 would become 1); these tests make sure nothing is swallowed or silently transformed.
"""

import numpy as np
import pytest

from hf_uq import _metrics

PROBABILITY_METRICS = ["ece", "aurc", "sac_at_98"]

PROBS = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]
LABELS = [0, 1, 1, 2]


@pytest.fixture
def load(tmp_path):
    def _load(name, **kwargs):
        return _metrics.load_metric(name, keep_in_memory=True, cache_dir=str(tmp_path), **kwargs)

    return _load


def _replace(rows, row, col, value):
    out = [list(r) for r in rows]
    out[row][col] = value
    return out


# (case id, predictions, references, expected message) shared by ece, aurc and sac_at_98
PROBABILITY_CASES = [
    ("nan", _replace(PROBS, 2, 1, float("nan")), LABELS,
     r"`predictions` contains a non-finite value \(nan\) at index \(2, 1\)"),
    ("inf", _replace(PROBS, 3, 0, float("inf")), LABELS,
     r"`predictions` contains a non-finite value \(inf\) at index \(3, 0\)"),
    ("1-d predictions", [0.7, 0.8, 0.4, 0.5], LABELS,
     r"`predictions` for a batch must have 2 dimension\(s\), got shape \(4,\)"),
    ("3-d predictions", [[r] for r in PROBS], LABELS,
     r"`predictions` for a batch must have 2 dimension\(s\), got shape \(4, 1, 3\)"),
    ("2-d references", PROBS, [[y] for y in LABELS],
     r"`references` for a batch must have 1 dimension\(s\), got shape \(4, 1\)"),
    ("rows not summing to 1", _replace(PROBS, 1, 1, 0.9), LABELS,
     r"rows of `predictions` must sum to 1 \(atol 0.0001\); worst is row 1, which sums to 1.1"),
    ("negative probability", _replace(PROBS, 0, 0, -0.1), LABELS,
     r"`predictions` contains a negative probability"),
    ("label not below C", PROBS, [0, 1, 3, 2],
     r"`references` contains label 3 at index 2, outside \[0, 3\) for 3 classes"),
    ("negative label", PROBS, [0, -1, 1, 2],
     r"`references` contains a negative label \(-1\) at index 1"),
    ("fractional label", PROBS, [0, 1.5, 1, 2],
     r"`references` must hold integer labels, got 1.5 at index 1"),
    ("nan label", PROBS, [0, 1, float("nan"), 2],
     r"`references` must hold integer labels, got nan at index 2"),
    ("string labels", PROBS, ["0", "1", "1", "2"], r"`references` must be numeric, got dtype <U1"),
    ("zero samples", [], [], r"no samples: `predictions` and `references` are empty"),
    ("length mismatch", PROBS, LABELS[:3],
     r"length mismatch in the batch: `predictions` has 4, `references` has 3 samples"),
    ("a single class", [[1.0]] * 4, [0, 0, 0, 0],
     r"`predictions` must have at least 2 classes \(columns\), got 1"),
    ("ragged rows", [[0.5, 0.5], [0.2, 0.3, 0.5]], [0, 1],
     r"`predictions` must be numeric, got ragged or non-numeric values|could not be converted"),
]


@pytest.mark.parametrize("name", PROBABILITY_METRICS)
@pytest.mark.parametrize(
    "predictions, references, message",
    [case[1:] for case in PROBABILITY_CASES],
    ids=[case[0] for case in PROBABILITY_CASES],
)
def test_probability_metrics_refuse_bad_input(load, name, predictions, references, message):
    with pytest.raises(ValueError, match=message):
        load(name).compute(predictions=predictions, references=references)


@pytest.mark.parametrize("name", PROBABILITY_METRICS)
def test_rows_of_different_widths_across_batches(load, name):
    module = load(name)
    module.add_batch(predictions=[[0.5, 0.5]], references=[0])
    module.add_batch(predictions=[[0.2, 0.3, 0.5]], references=[2])
    with pytest.raises(ValueError, match=r"`predictions` rows have different lengths \(2 and 3 classes\)"):
        module.compute()


@pytest.mark.parametrize("name", PROBABILITY_METRICS)
def test_bad_single_example(load, name):
    with pytest.raises(ValueError, match=r"`predictions` for one sample must have 1 dimension"):
        load(name).add(prediction=PROBS, reference=0)
    with pytest.raises(ValueError, match=r"`references` must hold integer labels, got 0.5"):
        load(name).add(prediction=PROBS[0], reference=0.5)


@pytest.mark.parametrize("keep_in_memory", [True, False])
@pytest.mark.parametrize("name", PROBABILITY_METRICS + ["ood_auroc"])
def test_compute_without_data_is_a_value_error(tmp_path, name, keep_in_memory):
    # evaluate itself raises an AttributeError here when keep_in_memory=True
    module = _metrics.load_metric(name, keep_in_memory=keep_in_memory, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"no samples: call add\(\) or add_batch\(\) before compute"):
        module.compute()


# ---------------------------------------------------------------- the uncertainty option

UNCERTAINTY_CASES = [
    ("nan", [0.1, float("nan"), 0.3, 0.4], r"`uncertainty` contains a non-finite value \(nan\) at index 1"),
    ("inf", [0.1, 0.2, float("-inf"), 0.4], r"`uncertainty` contains a non-finite value \(-inf\) at index 2"),
    ("2-d", [[0.1], [0.2], [0.3], [0.4]], r"`uncertainty` must have 1 dimension\(s\) \(n_samples,\), got shape \(4, 1\)"),
    ("length mismatch", [0.1, 0.2, 0.3], r"length mismatch: `uncertainty` has 3 entries but there are 4 samples"),
    ("empty", [], r"`uncertainty` is empty"),
]


@pytest.mark.parametrize("name", ["aurc", "sac_at_98"])
@pytest.mark.parametrize(
    "uncertainty, message", [c[1:] for c in UNCERTAINTY_CASES], ids=[c[0] for c in UNCERTAINTY_CASES]
)
def test_bad_uncertainty(load, name, uncertainty, message):
    with pytest.raises(ValueError, match=message):
        load(name).compute(predictions=PROBS, references=LABELS, uncertainty=uncertainty)


@pytest.mark.parametrize("name", ["aurc", "sac_at_98"])
def test_bad_uncertainty_batch_in_the_config(load, name):
    module = load(name, config_name="with_uncertainty")
    with pytest.raises(ValueError, match=r"length mismatch in the batch: .*`uncertainty` has 3 samples"):
        module.add_batch(predictions=PROBS, references=LABELS, uncertainty=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"`uncertainty` contains a non-finite value \(nan\) at index 1"):
        module.compute(predictions=PROBS, references=LABELS, uncertainty=[0.1, float("nan"), 0.3, 0.4])


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    "options, message",
    [
        ({"n_bins": 0}, r"`n_bins` must be a positive integer, got 0"),
        ({"n_bins": 2.5}, r"`n_bins` must be a positive integer, got 2.5"),
        ({"binning": "log"}, r"`binning` must be 'uniform' or 'quantile', got 'log'"),
        ({"norm": "l3"}, r"`norm` must be 'l1', 'l2' or 'max', got 'l3'"),
    ],
)
def test_bad_ece_options(load, options, message):
    with pytest.raises(ValueError, match=message):
        load("ece").compute(predictions=PROBS, references=LABELS, **options)


@pytest.mark.parametrize("accuracy", [-0.1, 1.5, 98])
def test_bad_sac_target(load, accuracy):
    with pytest.raises(ValueError, match=r"`accuracy` \(the target selective accuracy\) must be in \[0, 1\]"):
        load("sac_at_98").compute(predictions=PROBS, references=LABELS, accuracy=accuracy)


# ---------------------------------------------------------------- ood_auroc

SCORES = [0.1, 0.4, 0.35, 0.8, 0.7, 0.2]
OOD = [0, 0, 1, 1, 1, 0]

OOD_CASES = [
    ("nan", [0.1, 0.4, float("nan"), 0.8, 0.7, 0.2], OOD,
     r"`predictions` contains a non-finite value \(nan\) at index 2"),
    ("inf", [0.1, 0.4, 0.35, float("inf"), 0.7, 0.2], OOD,
     r"`predictions` contains a non-finite value \(inf\) at index 3"),
    ("2-d predictions", [[s] for s in SCORES], OOD,
     r"`predictions` for a batch must have 1 dimension\(s\), got shape \(6, 1\)"),
    ("2-d references", SCORES, [[r] for r in OOD],
     r"`references` for a batch must have 1 dimension\(s\), got shape \(6, 1\)"),
    ("reference 2", SCORES, [0, 0, 2, 1, 1, 0],
     r"`references` must be 1 \(OOD\) or 0 \(in-distribution\), got 2 at index 2"),
    ("negative reference", SCORES, [0, -1, 1, 1, 1, 0],
     r"`references` must be 1 \(OOD\) or 0 \(in-distribution\), got -1 at index 1"),
    ("fractional reference", SCORES, [0, 0.5, 1, 1, 1, 0],
     r"`references` must hold integer labels, got 0.5 at index 1"),
    ("only in-distribution", SCORES, [0] * 6,
     r"`references` hold only in-distribution \(0\) samples: OOD metrics need both classes"),
    ("only OOD", SCORES, [1] * 6, r"`references` hold only OOD \(1\) samples: OOD metrics need both"),
    ("zero samples", [], [], r"no samples: `predictions` and `references` are empty"),
    ("length mismatch", SCORES, OOD[:5],
     r"length mismatch in the batch: `predictions` has 6, `references` has 5 samples"),
]


@pytest.mark.parametrize(
    "predictions, references, message", [c[1:] for c in OOD_CASES], ids=[c[0] for c in OOD_CASES]
)
def test_ood_refuses_bad_input(load, predictions, references, message):
    with pytest.raises(ValueError, match=message):
        load("ood_auroc").compute(predictions=predictions, references=references)


def test_ood_single_class_across_batches(load):
    module = load("ood_auroc")
    module.add_batch(predictions=[0.1, 0.2], references=[1, 1])
    module.add_batch(predictions=[0.3], references=np.array([1]))
    with pytest.raises(ValueError, match=r"only OOD \(1\) samples"):
        module.compute()
