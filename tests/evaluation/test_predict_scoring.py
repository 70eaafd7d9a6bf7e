"""predict() against manual forwards for plain and hf_uq models; scoring against direct hf_uq.functional calls."""

import numpy as np
import pytest
import torch
from datasets import Dataset

import hf_uq.functional as F
from hf_uq import DeepEnsembleForImageClassification, DuoForImageClassification, mc_dropout
from hf_uq.data import load_digits_benchmark, with_pixel_values
from hf_uq.evaluation import (
    ID_METRICS,
    OOD_METRICS,
    Predictions,
    format_interval,
    iter_batches,
    predict,
    score_difference,
    score_pooled,
    score_split,
)
from hf_uq.models.duo import DuoImageProcessor
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor

VIT = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits():
    bench = load_digits_benchmark(seed=0, shifts=())
    return {"test": bench["test"].select(range(70)), "ood": bench["ood_far"].select(range(30))}


def _manual_logits(model, split, processor, **extra):
    images = [image.convert("RGB") for image in split["image"]]
    inputs = processor(images, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        return model(pixel_values=inputs["pixel_values"], **extra).logits.numpy()


# ------------------------------------------------------------------------------------------ predict


def test_predict_plain_vit_matches_manual_forward(digits):
    model, processor = tiny_vit(seed=1, **VIT), tiny_vit_image_processor()
    model.train()
    pred = predict(model, digits["test"], processor, batch_size=32, progress=False)
    assert model.training and all(m.training for m in model.modules())  # modes restored
    np.testing.assert_allclose(pred.logits, _manual_logits(model, digits["test"], processor), atol=1e-5)
    np.testing.assert_array_equal(pred.labels, digits["test"]["label"])
    np.testing.assert_allclose(pred.probs.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(pred.uncertainty, F.msp(pred.probs))
    assert pred.member_logits is None and pred.epistemic_uncertainty is None
    # a split that already yields pixel_values gives the same result
    view = with_pixel_values(digits["test"], processor)
    np.testing.assert_allclose(predict(model, view, progress=False).logits, pred.logits, atol=1e-6)


def test_predict_ood_split_has_no_labels(digits):
    pred = predict(tiny_vit(**VIT), digits["ood"], tiny_vit_image_processor(), progress=False)
    assert (pred.labels == -1).all() and not pred.has_labels


def test_predict_timm_and_ensemble(digits):
    cnn = tiny_cnn(channels=(4, 4, 8, 8), stem_width=4)
    cnn_proc = tiny_cnn_image_processor(cnn)
    pred = predict(cnn, digits["test"], cnn_proc, progress=False)
    np.testing.assert_allclose(pred.logits, _manual_logits(cnn, digits["test"], cnn_proc), atol=1e-5)

    members = [tiny_vit(seed=s, **VIT) for s in range(3)]
    ensemble = DeepEnsembleForImageClassification.from_members(members)
    pred = predict(ensemble, digits["test"], tiny_vit_image_processor(), batch_size=25, progress=False)
    assert pred.member_logits.shape == (3, 70, 8)
    inputs = tiny_vit_image_processor()([im.convert("RGB") for im in digits["test"]["image"]], return_tensors="pt")
    with torch.no_grad():
        out = ensemble.eval()(**inputs)
    np.testing.assert_allclose(pred.uncertainty, out.uncertainty.numpy(), atol=1e-5)
    np.testing.assert_allclose(pred.epistemic_uncertainty, out.epistemic_uncertainty.numpy(), atol=1e-5)
    np.testing.assert_allclose(pred.member_logits, out.member_logits.numpy(), atol=1e-5)


def test_predict_duo_with_duo_processor_and_shared_processor(digits):
    large, small = tiny_vit(seed=0, **VIT), tiny_cnn(channels=(4, 4, 8, 8), stem_width=4)
    duo = DuoForImageClassification.from_members(large, small, temperatures=(1.5, 0.7))
    vit_proc, cnn_proc = tiny_vit_image_processor(), tiny_cnn_image_processor(small)
    duo_proc = DuoImageProcessor.from_members(vit_proc, cnn_proc)
    pred = predict(duo, digits["test"], duo_proc, progress=False)
    images = [im.convert("RGB") for im in digits["test"]["image"]]
    with torch.no_grad():
        out = duo.eval()(**duo_proc(images, return_tensors="pt"))
    np.testing.assert_allclose(pred.logits, out.logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(pred.uncertainty, out.uncertainty.numpy(), atol=1e-5)
    assert pred.member_logits.shape == (2, 70, 8)
    shared = predict(duo, digits["test"], vit_proc, progress=False)  # one processor for both members
    np.testing.assert_allclose(shared.logits, _manual_logits(duo, digits["test"], vit_proc), atol=1e-5)
    batches = list(iter_batches(digits["test"], duo_proc, batch_size=64))
    assert [len(b["labels"]) for b in batches] == [64, 6] and "pixel_values_small" in batches[0]


def test_predict_mc_dropout_restores_modes(digits):
    model = tiny_vit(hidden_dropout_prob=0.2, **VIT).eval()
    mc = mc_dropout(model, num_samples=4, seed=0)
    a = predict(mc, digits["test"], tiny_vit_image_processor(), progress=False)
    b = predict(mc, digits["test"], tiny_vit_image_processor(), progress=False)
    assert a.member_logits.shape == (4, 70, 8)
    assert not np.allclose(a.member_logits[0], a.member_logits[1])  # dropout was sampled
    np.testing.assert_array_equal(a.logits, b.logits)  # seeded
    assert not any(m.training for m in model.modules())


def test_predict_bad_input(digits):
    model = tiny_vit(**VIT)
    with pytest.raises(ValueError, match="empty"):
        predict(model, digits["test"].select([]), tiny_vit_image_processor(), progress=False)
    with pytest.raises(ValueError, match="empty"):  # checked on the call, not on the first batch
        iter_batches(digits["test"].select([]), tiny_vit_image_processor())
    with pytest.raises(ValueError, match="image_processor"):
        predict(model, digits["test"], progress=False)
    with pytest.raises(TypeError, match="dataset_split"):
        predict(model, {"image": []}, tiny_vit_image_processor(), progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        predict(model, digits["test"], tiny_vit_image_processor(), batch_size=0, progress=False)
    unlabeled = Dataset.from_dict({"image": digits["test"]["image"][:3]})
    assert (predict(model, unlabeled, tiny_vit_image_processor(), progress=False).labels == -1).all()


# ------------------------------------------------------------------------------------------ scoring


def _fake(n, seed, labelled=True, sharp=3.0, accuracy=0.85):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(n, 8)) * sharp).astype(np.float32)
    probs = torch.from_numpy(logits).double().softmax(-1).numpy()
    labels = np.where(rng.random(n) < accuracy, probs.argmax(1), rng.integers(0, 8, n)) if labelled else np.full(n, -1)
    return Predictions(logits, probs, labels.astype(np.int64), F.entropy(probs))


def test_score_split_equals_functional_calls():
    pred, near, far = _fake(300, 0), _fake(120, 1, False, sharp=1.0), _fake(150, 2, False, sharp=0.5)
    scores = score_split(pred, ood={"ood_near": near, "ood_far": far}, bootstrap=200)
    assert list(scores) == list(ID_METRICS) + [f"{s}/{m}" for s in ("ood_near", "ood_far") for m in OOD_METRICS]
    correct = pred.probs.argmax(1) == pred.labels
    selective = F.selective_metrics(pred.uncertainty, correct)
    expected = {
        "accuracy": F.accuracy(pred.probs, pred.labels),
        "nll": F.nll(pred.logits, pred.labels, from_logits=True),
        "brier": F.brier(pred.probs, pred.labels),
        "ece": F.ece(pred.probs, pred.labels),
        "aurc": selective["aurc"], "e_aurc": selective["e_aurc"], "sac": selective["sac"],
        "cp_auroc": F.cp_auroc(-pred.uncertainty, correct),
    }
    for name, split in (("ood_near", near), ("ood_far", far)):
        for metric, value in F.ood_metrics(pred.uncertainty, split.uncertainty).items():
            expected[f"{name}/{metric}"] = value
    for name, value in expected.items():
        assert scores[name].estimate == pytest.approx(value, rel=1e-12), name
        assert scores[name].contains(value), name  # the interval holds the point estimate
        assert scores[name].low < scores[name].high or "/" in name, name
    assert score_split(pred, bootstrap=200) == {k: v for k, v in scores.items() if "/" not in k}


def test_score_pooled_is_mean_over_seeds_with_stratified_interval():
    seeds = [_fake(250, s) for s in range(3)]
    ood = {"ood_far": [_fake(100, 10 + s, False, sharp=0.5) for s in range(3)]}
    pooled = score_pooled(seeds, ood=ood, bootstrap=100)
    singles = [score_split(p, ood={"ood_far": o}, bootstrap=200) for p, o in zip(seeds, ood["ood_far"], strict=True)]
    for name, interval in pooled.items():
        assert interval.estimate == pytest.approx(np.mean([s[name].estimate for s in singles]), rel=1e-12)
        assert interval.contains(interval.estimate)
    # one seed pooled is exactly score_split
    assert score_pooled(seeds[:1], ood={"ood_far": ood["ood_far"][:1]}, bootstrap=200) == singles[0]
    # three copies of one seed: same estimate, interval ~1/sqrt(3) as wide
    copies = score_pooled([seeds[0]] * 3, bootstrap=200)
    for name in ("accuracy", "nll", "aurc"):
        width = copies[name].high - copies[name].low
        single_width = singles[0][name].high - singles[0][name].low
        assert copies[name].estimate == pytest.approx(singles[0][name].estimate)
        assert 0.4 * single_width < width < 0.8 * single_width, name


def test_score_difference_is_paired():
    a, b = _fake(300, 0), _fake(300, 1)
    b = Predictions(b.logits, b.probs, a.labels, b.uncertainty)
    same = score_difference(a, a, bootstrap=100)
    assert all(v == (0.0, 0.0, 0.0) for k, v in same.items() if k != "cp_auroc")
    diff = score_difference(a, b, bootstrap=100)
    sa, sb = score_split(a, bootstrap=0), score_split(b, bootstrap=0)
    for name in ID_METRICS:
        assert diff[name].estimate == pytest.approx(sa[name].estimate - sb[name].estimate, abs=1e-12)
    pooled = score_difference([a, a], [b, b], bootstrap=50)
    assert pooled["nll"].estimate == pytest.approx(diff["nll"].estimate)
    with pytest.raises(ValueError, match="labels of `pred_a` and `pred_b` differ"):
        score_difference(a, _fake(300, 1), bootstrap=10)


def test_uncertainty_field():
    a = _fake(200, 0)
    epistemic = np.random.default_rng(1).random(200)
    b = Predictions(a.logits, a.probs, a.labels, a.uncertainty, epistemic_uncertainty=epistemic)
    scores = score_split(b, bootstrap=0, uncertainty_field="epistemic_uncertainty")
    correct = a.probs.argmax(1) == a.labels
    assert scores["aurc"].estimate == pytest.approx(F.aurc(epistemic, correct))
    assert scores["nll"].estimate == score_split(a, bootstrap=0)["nll"].estimate
    with pytest.raises(ValueError, match="have no total_uncertainty"):
        score_split(a, uncertainty_field="total_uncertainty")
    with pytest.raises(ValueError, match="must be one of"):
        score_split(a, uncertainty_field="logits")


def test_scoring_bad_input():
    pred = _fake(50, 0)
    with pytest.raises(ValueError, match="`labels` must have shape"):
        Predictions(pred.logits, pred.probs, pred.labels[:-1], pred.uncertainty)
    with pytest.raises(ValueError, match="`uncertainty` must have shape"):
        Predictions(pred.logits, pred.probs, pred.labels, pred.uncertainty[:10])
    with pytest.raises(ValueError, match="`pred_id` is empty"):
        score_split(pred.select(np.zeros(50, dtype=bool)))
    with pytest.raises(ValueError, match="`pred_id` has 20 of 20 samples without a label"):
        score_split(_fake(20, 1, labelled=False))
    with pytest.raises(ValueError, match=r"`ood\['ood_far'\]` is empty"):
        score_split(pred, ood={"ood_far": _fake(5, 1, False).select([])})
    with pytest.raises(ValueError, match=r"`ood\['ood_far'\]` has predictions of 1 seeds but `pred_id` has 2"):
        score_pooled([pred, pred], ood={"ood_far": [_fake(5, 1, False)]})
    with pytest.raises(ValueError, match="`pred_id` must be a Predictions"):
        score_split(pred.probs)


def test_concatenate_select_and_format():
    a, b = _fake(10, 0), _fake(5, 1)
    joined = Predictions.concatenate([a, b])
    assert len(joined) == 15 and joined.member_logits is None
    np.testing.assert_array_equal(joined.select(np.arange(10, 15)).logits, b.logits)
    scores = score_split(a, bootstrap=0)
    assert np.isnan(scores["nll"].low)
    assert format_interval(scores["accuracy"]) == f"{scores['accuracy'].estimate:.3f}"
    assert format_interval((0.5, 0.25, 0.75), scale=100, digits=1) == "50.0 [25.0, 75.0]"


def test_format_interval_reads_nulls_and_format_si_picks_the_prefix():
    from hf_uq.evaluation import format_si

    # intervals read back from results.json carry None for undefined values
    assert format_interval((None, None, None)) == "n/a"
    assert format_interval((0.5, None, None), scale=100, digits=1) == "50.0"
    assert format_interval((0.5, 0.25, None)) == "0.500"
    assert format_si(5.56e6, "FLOPs", " ") == "5.56 MFLOPs"
    assert format_si(139_000) == "139k"
    assert format_si(12.3, "ms", " ") == "12.3 ms"
    assert format_si(-2.5e9) == "-2.5G"
