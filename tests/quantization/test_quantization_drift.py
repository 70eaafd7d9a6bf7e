"""hf_uq.evaluation.quantization_drift and select_quantization on a small digits slice."""

import math

import pytest

from hf_uq.evaluation import (
    DriftBounds,
    default_quantization_grid,
    quantization_drift,
    select_quantization,
)
from hf_uq.quantization import is_backend_available, quantize

needs_quanto = pytest.mark.skipif(
    not is_backend_available("quanto"), reason="optimum-quanto is not installed (pip install optimum-quanto)"
)

FIELDS = {
    "reference", "quantized", "delta_accuracy", "delta_ece", "delta_nll", "delta_aurc", "delta_ood_auroc",
    "delta_ood_auroc/ood_near", "delta_ood_auroc/ood_far", "spearman", "top1_agreement", "logits_pearson",
    "weight_bytes_reference", "weight_bytes_quantized", "weight_bytes_ratio", "latency", "latency_ratio@1",
    "latency_ratio@4", "n_samples",
}


@needs_quanto
def test_drift_report_fields(vit, digits):
    quantized = quantize(vit, weights="int8", activations="int8", calibration_dataset=digits["validation"])
    drift = quantization_drift(vit, quantized, digits, latency_batch_sizes=(1, 4), latency_repeats=3)
    assert set(drift) == FIELDS
    assert set(drift["reference"]) == {"accuracy", "ece", "nll", "aurc", "ood_auroc/ood_near", "ood_auroc/ood_far"}
    assert drift["delta_ece"] == pytest.approx(drift["quantized"]["ece"] - drift["reference"]["ece"])
    assert 0.2 < drift["weight_bytes_ratio"] < 0.35 and drift["logits_pearson"] > 0.99
    assert -1 <= drift["spearman"] <= 1 and 0 <= drift["top1_agreement"] <= 1
    assert drift["n_samples"] == {"id": 96, "ood_near": 48, "ood_far": 48}
    for size in (1, 4):
        timing = drift["latency"][size]
        assert timing["ratio"] == pytest.approx(timing["quantized_s"] / timing["reference_s"])
    with_intervals = quantization_drift(vit, quantized, digits, latency_batch_sizes=(), bootstrap=20)
    low, high = with_intervals["intervals"]["ece"][1:]
    assert low <= high and "latency_ratio@1" not in with_intervals


def test_drift_argument_checks(vit, digits):
    with pytest.raises(ValueError, match="no in-distribution split"):
        quantization_drift(vit, vit, digits, id_split="train")
    with pytest.raises(ValueError, match="OOD split"):
        quantization_drift(vit, vit, digits, ood_splits=["ood_missing"])
    with pytest.raises(ValueError, match="nn.Module"):
        quantization_drift(vit, None, digits)


def test_bounds():
    drift = {"delta_ece": 0.004, "spearman": 0.96, "delta_nll": 0.1, "delta_ood_auroc/ood_far": -0.05}
    assert DriftBounds().violations(drift) == []
    assert DriftBounds(max_delta_ece=0.001).violations(drift) == ["delta ECE +0.0040 > 0.001"]
    assert len(DriftBounds(max_delta_nll=0.01, max_ood_auroc_drop=0.01).violations(drift)) == 2
    assert DriftBounds().violations({"delta_ece": math.nan, "spearman": 0.99})  # NaN never passes
    assert DriftBounds.coerce({"min_spearman": 0.5}).min_spearman == 0.5
    with pytest.raises(ValueError, match="unknown bound"):
        DriftBounds.coerce({"max_ece": 1})


@needs_quanto
def test_select_picks_the_smallest_setting_inside_the_bounds(vit, digits):
    grid = [
        {"backend": "quanto", "weights": "int8"},
        {"backend": "quanto", "weights": "int4"},
        {"backend": "quanto", "weights": "int2", "skip": ["heads"]},
    ]
    lenient = select_quantization(vit, digits, grid=grid, bounds={"max_delta_ece": 1.0, "min_spearman": -1.0})
    assert lenient.config["weights"] == "int2" and lenient.model.hf_uq_quantization.weights == "int2"
    assert [row["label"] for row in lenient.table] == ["quanto w8", "quanto w4", "quanto w2 skip=heads"]
    assert sum(bool(row.get("chosen")) for row in lenient.table) == 1
    assert "CHOSEN" in lenient.format_table()
    strict = select_quantization(vit, digits, grid=grid[:1], bounds={"min_spearman": 1.01})
    assert strict.config is None and strict.model is None and not strict.table[0]["passes"]
    assert "Spearman" in strict.table[0]["violations"][0]


@needs_quanto
def test_select_latency_objective_and_errors(vit, digits):
    grid = [{"backend": "quanto", "weights": "int8"}, {"backend": "bitsandbytes", "weights": "int8"}]
    if not is_backend_available("bitsandbytes"):
        grid = grid[:1]
    result = select_quantization(vit, digits, grid=grid, objective="latency", bounds={"min_spearman": -1.0},
                                 latency_batch_size=2, latency_repeats=2)
    assert result.config is not None and all("latency_ratio" in row for row in result.table)
    failing = select_quantization(vit, digits, grid=[{"backend": "quanto", "weights": "int8", "skip": ["*"]}])
    assert failing.config is None and "found no layer" in failing.table[0]["error"]
    with pytest.raises(ValueError, match="objective"):
        select_quantization(vit, digits, objective="memory")


def test_default_grid():
    grid = default_quantization_grid(["quanto", "bitsandbytes"])
    assert len(grid) == 12
    assert {(c["backend"], c["activations"]) for c in grid} == {("quanto", None), ("quanto", "int8"),
                                                                ("bitsandbytes", None)}
