"""The evaluate modules in metrics/: same numbers as hf_uq.functional, batching, configs, combine."""

import evaluate
import numpy as np
import pytest
import torch

from hf_uq import _metrics
from hf_uq import functional as F

PROBABILITY_METRICS = ["ece", "aurc", "sac_at_98"]


@pytest.fixture
def load(tmp_path):
    """Fresh module instances whose Arrow cache files go to a temporary folder."""

    def _load(name, **kwargs):
        return _metrics.load_metric(name, cache_dir=str(tmp_path), **kwargs)

    return _load


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    n, c = 300, 5
    probs = rng.dirichlet(np.full(c, 0.4), size=n)
    # mostly right, so the selective metrics have something to rank
    labels = np.where(rng.random(n) < 0.8, probs.argmax(1), rng.integers(0, c, n))
    probs[:40] = np.round(probs[:40], 1)  # ties in msp, confidences on bin edges
    probs[:40] /= probs[:40].sum(1, keepdims=True)
    correct = probs.argmax(1) == labels
    return probs, labels, correct


def _ood_data():
    rng = np.random.default_rng(1)
    scores = np.concatenate([rng.normal(0, 1, 120), rng.normal(1, 1, 80)]).round(1)  # ties
    refs = np.concatenate([np.zeros(120, int), np.ones(80, int)])
    perm = rng.permutation(200)
    return scores[perm], refs[perm]


# ---------------------------------------------------------------- equal to hf_uq.functional


@pytest.mark.parametrize(
    "options",
    [{}, {"n_bins": 5}, {"binning": "quantile", "n_bins": 10}, {"norm": "l2"}, {"norm": "max"}],
)
def test_ece_equals_functional(load, data, options):
    probs, labels, _ = data
    result = load("ece").compute(predictions=probs, references=labels, **options)
    assert result == {"ece": F.ece(probs, labels, **options)}


def test_float32_inputs_are_stored_exactly(load, data):
    probs, labels, _ = data
    p32 = probs.astype(np.float32)
    assert load("ece").compute(predictions=p32, references=labels) == {"ece": F.ece(p32, labels)}
    p64 = p32.astype(np.float64)  # what evaluate stores: exact
    expected = F.aurc(F.msp(p64), F.top_label(p64)[1] == labels)
    assert load("aurc").compute(predictions=p32, references=labels)["aurc"] == expected


def test_aurc_equals_functional(load, data):
    probs, labels, correct = data
    u = F.msp(probs)
    result = load("aurc").compute(predictions=probs, references=labels)
    assert result == {"aurc": F.aurc(u, correct), "e_aurc": F.e_aurc(u, correct)}


@pytest.mark.parametrize("accuracy", [0.98, 0.9, 0.5])
def test_sac_equals_functional(load, data, accuracy):
    probs, labels, correct = data
    result = load("sac_at_98").compute(predictions=probs, references=labels, accuracy=accuracy)
    assert result == {"sac": F.sac(F.msp(probs), correct, accuracy=accuracy)}


def test_sac_default_target_is_98(load, data):
    probs, labels, correct = data
    result = load("sac_at_98").compute(predictions=probs, references=labels)
    assert result == {"sac": F.sac(F.msp(probs), correct, accuracy=0.98)}


@pytest.mark.parametrize("name", ["aurc", "sac_at_98"])
def test_custom_uncertainty_equals_functional(load, data, name):
    probs, labels, correct = data
    u = F.entropy(probs)
    expected = F.selective_metrics(u, correct)
    result = load(name).compute(predictions=probs, references=labels, uncertainty=u)
    assert result == {k: expected[k] for k in result}
    default = load(name).compute(predictions=probs, references=labels)
    assert default != result  # the score is really used


def test_ood_equals_functional(load):
    scores, refs = _ood_data()
    result = load("ood_auroc").compute(predictions=scores, references=refs)
    assert result == F.ood_metrics(scores[refs == 0], scores[refs == 1])
    assert set(result) == {"auroc", "fpr_at_95", "aupr"}


def test_torch_and_list_inputs(load, data):
    probs, labels, _ = data
    expected = F.ece(probs, labels)
    as_torch = load("ece").compute(predictions=torch.from_numpy(probs), references=torch.from_numpy(labels))
    as_lists = load("ece").compute(predictions=probs.tolist(), references=labels.tolist())
    assert as_torch == as_lists == {"ece": expected}


def test_evaluate_load_by_path(data):
    probs, labels, _ = data
    path = _metrics.metrics_dir() / "ece"
    module = evaluate.load(str(path), keep_in_memory=True)
    assert module.compute(predictions=probs, references=labels) == {"ece": F.ece(probs, labels)}


# ---------------------------------------------------------------- add_batch accumulation


def _batches(n, sizes=(1, 64, 100, 7)):
    start = 0
    for size in sizes:
        yield slice(start, min(start + size, n))
        start += size
    yield slice(start, n)


@pytest.mark.parametrize("name", PROBABILITY_METRICS)
def test_add_batch_equals_one_shot(load, data, name):
    probs, labels, _ = data
    one_shot = load(name).compute(predictions=probs, references=labels, n_bins=7, accuracy=0.9)
    module = load(name)
    for s in _batches(len(labels)):
        module.add_batch(predictions=probs[s], references=labels[s])
    assert module.compute(n_bins=7, accuracy=0.9) == one_shot


@pytest.mark.parametrize("name", PROBABILITY_METRICS)
def test_add_single_examples_equals_one_shot(load, data, name):
    probs, labels, _ = data
    module = load(name)
    for p, y in zip(probs[:50], labels[:50], strict=True):
        module.add(prediction=p, reference=y)
    assert module.compute() == load(name).compute(predictions=probs[:50], references=labels[:50])


def test_ood_add_batch_equals_one_shot(load):
    scores, refs = _ood_data()
    module = load("ood_auroc")
    for s in _batches(len(refs)):
        module.add_batch(predictions=scores[s], references=refs[s])
    assert module.compute() == load("ood_auroc").compute(predictions=scores, references=refs)


def test_ood_add_single_examples_equals_one_shot(load):
    scores, refs = _ood_data()
    module = load("ood_auroc")
    for score, ref in zip(scores[:40], refs[:40], strict=True):
        module.add(prediction=score, reference=ref)
    assert module.compute() == load("ood_auroc").compute(predictions=scores[:40], references=refs[:40])


def test_empty_batch_in_the_middle_is_harmless(load, data):
    probs, labels, _ = data
    module = load("ece")
    module.add_batch(predictions=probs[:10], references=labels[:10])
    module.add_batch(predictions=[], references=[])
    module.add_batch(predictions=probs[10:], references=labels[10:])
    assert module.compute() == {"ece": F.ece(probs, labels)}


def test_module_is_reusable_after_compute_and_after_an_error(load, data):
    probs, labels, _ = data
    module = load("ece")
    with pytest.raises(ValueError, match="negative label"):
        module.compute(predictions=probs, references=-labels - 1)
    assert module.compute(predictions=probs[:20], references=labels[:20]) == {
        "ece": F.ece(probs[:20], labels[:20])
    }
    assert module.compute(predictions=probs, references=labels) == {"ece": F.ece(probs, labels)}


# ---------------------------------------------------------------- the with_uncertainty config


@pytest.mark.parametrize("name", ["aurc", "sac_at_98"])
def test_with_uncertainty_config_accumulates_the_score(load, data, name):
    probs, labels, correct = data
    u = F.entropy(probs)
    module = load(name, config_name="with_uncertainty")
    assert "uncertainty" in module.features
    for s in _batches(len(labels)):
        module.add_batch(predictions=probs[s], references=labels[s], uncertainty=u[s])
    expected = load(name).compute(predictions=probs, references=labels, uncertainty=u)
    assert module.compute() == expected


@pytest.mark.parametrize("name", ["aurc", "sac_at_98"])
def test_default_config_explains_where_uncertainty_goes(load, data, name):
    probs, labels, _ = data
    with pytest.raises(ValueError, match="config_name='with_uncertainty'"):
        load(name).add_batch(predictions=probs, references=labels, uncertainty=F.msp(probs))


@pytest.mark.parametrize("name", ["ece", "ood_auroc"])
def test_metrics_without_the_config_refuse_it(load, name):
    with pytest.raises(ValueError, match="unknown config_name 'with_uncertainty'"):
        load(name, config_name="with_uncertainty")


def test_unknown_config_name(load):
    with pytest.raises(ValueError, match=r"unknown config_name 'nope'; this metric has \['default', 'with_uncertainty'\]"):
        load("aurc", config_name="nope")


# ---------------------------------------------------------------- evaluate.combine and options


def test_combine_passes_every_option_to_every_module(load, data):
    probs, labels, correct = data
    u = F.entropy(probs)
    combined = evaluate.combine([load("ece"), load("aurc"), load("sac_at_98")])
    result = combined.compute(
        predictions=probs, references=labels, n_bins=10, norm="l2", accuracy=0.9, uncertainty=u
    )
    selective = F.selective_metrics(u, correct, accuracy=0.9)
    assert result == {
        "ece": F.ece(probs, labels, n_bins=10, norm="l2"),  # ece ignores uncertainty/accuracy
        "aurc": selective["aurc"],
        "e_aurc": selective["e_aurc"],
        "sac": selective["sac"],
    }


def test_combine_add_batch_filters_inputs_per_module(load, data):
    probs, labels, correct = data
    u = F.entropy(probs)
    combined = evaluate.combine(
        [load("ece"), load("aurc", config_name="with_uncertainty"), load("sac_at_98")]
    )
    for s in _batches(len(labels)):
        combined.add_batch(predictions=probs[s], references=labels[s], uncertainty=u[s])
    result = combined.compute()
    assert result["ece"] == F.ece(probs, labels)
    assert result["aurc"] == F.aurc(u, correct)  # accumulated uncertainty
    assert result["sac"] == F.sac(F.msp(probs), correct)  # default config: msp


def test_combine_add_single_examples(load, data):
    probs, labels, _ = data
    combined = evaluate.combine([load("ece"), load("aurc")])
    for p, y in zip(probs[:30], labels[:30], strict=True):
        combined.add(prediction=p, reference=y)
    assert combined.compute() == evaluate.combine([load("ece"), load("aurc")]).compute(
        predictions=probs[:30], references=labels[:30]
    )


def test_combine_prefixes_colliding_keys(load, data):
    probs, labels, _ = data
    combined = evaluate.combine({"strict": load("sac_at_98"), "loose": load("sac_at_98")})
    result = combined.compute(predictions=probs, references=labels)
    assert set(result) == {"strict_sac", "loose_sac"}


@pytest.mark.parametrize("name", ["ece", "aurc", "sac_at_98", "ood_auroc"])
def test_unknown_option_is_a_type_error_naming_it(load, data, name):
    probs, labels, _ = data
    predictions = probs if name != "ood_auroc" else F.msp(probs)
    refs = labels if name != "ood_auroc" else (labels % 2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['n_bin'\]"):
        load(name).compute(predictions=predictions, references=refs, n_bin=3)


def test_sibling_options_do_not_change_a_result(load, data):
    probs, labels, _ = data
    plain = load("ece").compute(predictions=probs, references=labels)
    noisy = load("ece").compute(
        predictions=probs, references=labels, uncertainty=F.msp(probs), accuracy=0.5
    )
    assert plain == noisy
    scores = F.msp(probs)
    refs = labels % 2
    ood_plain = load("ood_auroc").compute(predictions=scores, references=refs)
    ood_noisy = load("ood_auroc").compute(predictions=scores, references=refs, n_bins=3, norm="max")
    assert ood_plain == ood_noisy
