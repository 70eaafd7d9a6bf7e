"""The protocol core: build_results, results.json / predictions round trips, budgets, input checks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from hf_uq.evaluation import (
    ID_METRICS,
    SCHEMA,
    Predictions,
    RouteSpec,
    build_results,
    count_parameters,
    fits_budget,
    load_predictions,
    load_results,
    measure_budgets,
    parse_budget,
    predict,
    predict_routes,
    route_slug,
    save_predictions,
    score_pooled,
    write_results,
)

SEEDS = [0, 3]
OOD = ["ood_near", "ood_far"]
SHIFT = ["shift_a", "shift_b"]
SIZES = {"test": 60, "ood_near": 30, "ood_far": 40, "shift_a": 50, "shift_b": 45}
C = 4


def _labels(split: str, seed: int) -> np.ndarray:
    if split.startswith("ood"):
        return np.full(SIZES[split], -1, dtype=np.int64)
    return np.random.default_rng([seed, len(split), SIZES[split]]).integers(0, C, SIZES[split]).astype(np.int64)


def _make(logits: np.ndarray, labels: np.ndarray, members: np.ndarray | None = None, uncertainty=None) -> Predictions:
    logits = logits.astype(np.float32)
    probs = torch.from_numpy(logits).double().softmax(-1).numpy()
    extra = {}
    if members is not None:
        extra = {"member_logits": members.astype(np.float32), "total_uncertainty": 1 - probs.max(1),
                 "aleatoric_uncertainty": 0.5 * (1 - probs.max(1)), "epistemic_uncertainty": 0.5 * (1 - probs.max(1))}
    u = 1 - probs.max(1) if uncertainty is None else uncertainty
    return Predictions(logits=logits, probs=probs, labels=labels, uncertainty=np.asarray(u, np.float64), **extra)


def _route(kind: str, seed: int) -> dict[str, Predictions]:
    out = {}
    for split in ["test"] + OOD + SHIFT:
        labels = _labels(split, seed)
        rng = np.random.default_rng([seed, len(split), SIZES[split], 7])
        base = rng.normal(size=(len(labels), C)) * 1.5
        if not split.startswith("ood"):
            base[np.arange(len(labels)), labels] += 2.0  # mostly right, some errors
        if kind == "teacher":
            members = base[None] + rng.normal(scale=0.5, size=(3, len(labels), C))
            out[split] = _make(base, labels, members=members)
        elif kind == "close":  # the teacher's logits, slightly perturbed: high fidelity
            own = np.random.default_rng([seed, len(split), 99]).normal(scale=0.05, size=base.shape)
            out[split] = _make(base + own, labels)
        elif kind == "random":  # uncertainty unrelated to the teacher's
            u = np.random.default_rng([seed, len(split), 5]).random(len(labels))
            out[split] = _make(base, labels, uncertainty=u)
        elif kind == "perfect":  # no errors anywhere: CP-AUROC undefined
            logits = np.zeros((len(labels), C))
            logits[np.arange(len(labels)), np.maximum(labels, 0)] = 5.0
            out[split] = _make(logits + rng.normal(scale=0.1, size=logits.shape), labels)
    return out


def _predictions(kinds=("teacher", "close", "random")) -> dict[str, list[dict[str, Predictions]]]:
    return {kind: [_route(kind, seed) for seed in SEEDS] for kind in kinds}


def _budget(params: int, flops: float, weights: int, memory: int, lat: dict[str, tuple[float, float]]) -> dict:
    return {"parameters": params, "flops": flops, "weight_bytes": weights, "peak_memory_bytes": memory,
            "latency_ms": {bs: {"p50": a, "p99": b} for bs, (a, b) in lat.items()}}


BUDGETS = {
    "teacher": _budget(300, 3e6, 1200, 3000, {"1": (3.0, 3.6), "32": (9.0, 12.0)}),
    "close": _budget(100, 1e6, 400, 1000, {"1": (1.0, 1.2), "32": (3.0, 4.0)}),
    "random": _budget(120, 1.5e6, 100, 1500, {"1": (1.1, 1.5), "32": (3.3, 4.4)}),
}
META = {name: {"family": fam, "models": {0: f"models/seed0/{name}"}, "extra": {"t": np.float32(1.5)}}
        for name, fam in (("teacher", "teacher"), ("close", "single"), ("random", "user"), ("perfect", "user"))}


def _build(predictions=None, budgets=BUDGETS, **kwargs):
    predictions = _predictions() if predictions is None else predictions
    options = dict(seeds=SEEDS, reference="close", teacher="teacher", ood_splits=OOD, shift_splits=SHIFT,
                   bootstrap=30, command=["hf-uq", "benchmark", "--quick"],
                   data_info={"name": "synthetic", "labels": list("abcd"), "calibration_split": "validation"},
                   settings_extra={"quick": True, "epochs": 1})
    options.update(kwargs)
    meta = {name: META[name] for name in predictions}
    return build_results(predictions, budgets if budgets is None else {k: budgets.get(k) for k in predictions},
                         meta, **options)


@pytest.fixture(scope="module")
def built():
    predictions = _predictions()
    return predictions, _build(predictions)


def _strict_loads(text: str):
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def _same(value, expected) -> bool:
    if value is None:
        return math.isnan(expected)
    return math.isclose(value, expected, rel_tol=1e-12, abs_tol=1e-12)


# ------------------------------------------------------------------------------------------ round trip


def test_estimates_recompute_from_saved_predictions(built, tmp_path):
    predictions, results = built
    save_predictions(tmp_path / "predictions", predictions, seeds=SEEDS)
    path = write_results(results, tmp_path)
    assert path == tmp_path / "results.json"
    assert _strict_loads(path.read_text())["schema"] == SCHEMA
    assert sorted(p.name for p in (tmp_path / "predictions" / route_slug("close")).iterdir()) == ["seed0.npz", "seed3.npz"]

    loaded_results = load_results(tmp_path)
    loaded = load_predictions(tmp_path)  # the results folder: its `predictions` entry names the folder
    assert list(loaded) == ["teacher", "close", "random"]
    original, back = predictions["teacher"][1]["test"], loaded["teacher"][1]["test"]
    for field in ("logits", "labels", "uncertainty", "member_logits", "epistemic_uncertainty"):
        np.testing.assert_array_equal(getattr(back, field), getattr(original, field))
    np.testing.assert_array_equal(back.probs, original.probs)
    assert loaded["close"][0]["test"].member_logits is None

    for route in loaded_results["routes"]:
        per_seed = loaded[route["name"]]
        expected = {"test": score_pooled([p["test"] for p in per_seed], ood={s: [p[s] for p in per_seed] for s in OOD},
                                         bootstrap=0),
                    "shift": score_pooled([Predictions.concatenate([p[s] for s in SHIFT]) for p in per_seed],
                                          bootstrap=0)}
        expected.update({s: score_pooled([p[s] for p in per_seed], bootstrap=0) for s in SHIFT})
        assert list(route["metrics"]) == ["test", "shift"] + SHIFT
        for key, scores in expected.items():
            assert list(route["metrics"][key]) == list(scores)
            for metric, interval in scores.items():
                estimate, low, high = route["metrics"][key][metric]
                assert _same(estimate, interval.estimate), (route["name"], key, metric)
                if low is not None:  # percentile intervals of biased metrics (ECE) may miss the estimate
                    assert low <= high
        assert "ood_far/auroc" in route["metrics"]["test"] and "ood_far/auroc" not in route["metrics"]["shift"]


def test_document_fields(built):
    _, results = built
    assert results["seeds"] == SEEDS and results["predictions"] == "predictions"
    assert results["command"] == "hf-uq benchmark --quick"
    settings = results["settings"]
    assert settings["latency_batch_sizes"] == [1, 32] and settings["budget"] is None
    assert settings["reference"] == "close" and settings["teacher"] == "teacher"
    assert settings["quick"] is True and settings["epochs"] == 1 and settings["bootstrap"] == 30
    data = results["data"]
    assert data["labels"] == list("abcd") and data["ood_splits"] == OOD and data["shift_splits"] == SHIFT
    assert data["num_samples"] == SIZES and data["id_split"] == "test"
    routes = {r["name"]: r for r in results["routes"]}
    assert [r["role"] for r in results["routes"]] == ["teacher", "reference", None]
    assert routes["close"]["models"] == {"0": "models/seed0/close"} and routes["close"]["extra"] == {"t": 1.5}
    assert routes["random"]["family"] == "user" and routes["random"]["knob"] is None
    assert {"python", "hf_uq", "torch", "optimum-quanto"} <= set(results["versions"])


# ------------------------------------------------------------------------------------------ fidelity


def test_fidelity_matches_spearman_averaged_over_seeds(built):
    predictions, results = built
    routes = {r["name"]: r for r in results["routes"]}
    assert routes["teacher"]["fidelity"] == {"test": [1.0, 1.0, 1.0], "shift": [1.0, 1.0, 1.0],
                                             "ood": [1.0, 1.0, 1.0], "below_threshold": False}
    for name, splits_of in (("test", ["test"]), ("shift", SHIFT), ("ood", OOD)):
        for route in ("close", "random"):
            per_seed = [
                spearmanr(np.concatenate([predictions[route][k][s].uncertainty for s in splits_of]),
                          np.concatenate([predictions["teacher"][k][s].uncertainty for s in splits_of])).statistic
                for k in range(len(SEEDS))
            ]
            estimate, low, high = routes[route]["fidelity"][name]
            assert estimate == pytest.approx(np.mean(per_seed), abs=1e-12)
            assert low <= estimate <= high
    assert routes["close"]["fidelity"]["test"][0] > 0.9 and routes["close"]["fidelity"]["below_threshold"] is False
    assert routes["random"]["fidelity"]["below_threshold"] is True


def test_no_teacher_no_shift_no_ood():
    results = _build(teacher=None, shift_splits=[], ood_splits=[], bootstrap=0, budgets=None)
    for route in results["routes"]:
        assert route["fidelity"] is None and list(route["metrics"]) == ["test"]
        assert list(route["metrics"]["test"]) == list(ID_METRICS)
        assert route["budget"] is None and route["relative"] is None and route["fits_budget"] is None
        assert all(low is None and high is None for _, low, high in route["metrics"]["test"].values())
    assert results["settings"]["latency_batch_sizes"] == []


# ------------------------------------------------------------------------------------------ budgets


def test_relative_is_hand_division_and_fits_budget(built):
    _, results = built
    routes = {r["name"]: r for r in results["routes"]}
    rel, a = routes["random"]["relative"], BUDGETS["random"]
    assert rel["parameters"] == 120 / 100 and rel["flops"] == 1.5e6 / 1e6 and rel["weight_bytes"] == 100 / 400
    assert rel["peak_memory"] == 1500 / 1000
    assert rel["latency_p50"] == {"1": 1.1 / 1.0, "32": 3.3 / 3.0}
    assert rel["latency_p99"] == {"1": 1.5 / 1.2, "32": 4.4 / 4.0}
    assert rel["latency"] == max(1.5 / 1.2, 4.4 / 4.0)
    assert routes["random"]["budget"] == a
    assert routes["close"]["relative"]["latency"] == 1.0 and routes["close"]["relative"]["peak_memory"] == 1.0
    assert all(r["fits_budget"] is None for r in results["routes"])

    limited = _build(budget_limits={"memory": 1.6, "latency": 1.3}, bootstrap=0)
    assert limited["settings"]["budget"] == {"memory": 1.6, "latency": 1.3}
    assert [r["fits_budget"] for r in limited["routes"]] == [False, True, True]
    limited = _build(budget_limits={"latency": 1.2}, bootstrap=0)
    assert [r["fits_budget"] for r in limited["routes"]] == [False, True, False]


def test_fits_budget_branches():
    route = {"relative": {"peak_memory": 1.2, "latency": 1.5}}
    assert fits_budget(route) is None
    assert fits_budget(route, memory=1.2) is True and fits_budget(route, memory=1.19) is False
    assert fits_budget(route, latency=1.5) is True and fits_budget(route, latency=1.4) is False
    assert fits_budget(route, memory=2, latency=1.4) is False and fits_budget(route, memory=2, latency=2) is True
    assert fits_budget({"relative": None}, memory=2) is None
    assert fits_budget({"relative": {"peak_memory": None, "latency": 1.0}}, memory=2) is None
    assert fits_budget({"relative": {"peak_memory": 1.0, "latency": float("nan")}}, memory=2, latency=2) is None
    with pytest.raises(ValueError, match="memory budget"):
        fits_budget(route, memory=-1)


def test_zero_reference_gives_null_ratio():
    budgets = {**BUDGETS, "close": {**BUDGETS["close"], "weight_bytes": 0}}
    results = _build(budgets=budgets, bootstrap=0)
    assert results["routes"][2]["relative"]["weight_bytes"] is None


def test_parse_budget():
    assert parse_budget("memory=1.2,latency=1.5") == {"memory": 1.2, "latency": 1.5}
    assert parse_budget(" latency = 2 ") == {"latency": 2.0}
    for text, part in [("memory=1.2,latncy=1.5", "latncy"), ("memory", "'memory'"), ("memory=abc", "abc"),
                       ("memory=1,memory=2", "twice"), ("memory=-1", "positive"), ("memory=1,", "''"), ("", "budget")]:
        with pytest.raises(ValueError, match=part):
            parse_budget(text)


# ------------------------------------------------------------------------------------------ JSON


def test_nan_is_written_as_null(tmp_path):
    predictions = _predictions(("teacher", "close", "perfect"))
    results = _build(predictions, bootstrap=0)
    perfect = results["routes"][2]
    assert perfect["metrics"]["test"]["accuracy"][0] == 1.0
    assert perfect["metrics"]["test"]["cp_auroc"] == [None, None, None]
    path = write_results(results, tmp_path / "out")
    document = _strict_loads(path.read_text())
    assert document["routes"][2]["metrics"]["test"]["cp_auroc"] == [None, None, None]
    nan_results = {**results, "routes": [{**results["routes"][0], "extra": {"x": float("nan"), "y": np.inf}}]}
    document = _strict_loads(write_results(nan_results, tmp_path / "nan").read_text())
    assert document["routes"][0]["extra"] == {"x": None, "y": None}


def test_load_results_errors(tmp_path, built):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_results(tmp_path / "nowhere")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_results(bad)
    bad.write_text(json.dumps({"schema": "other/9"}))
    with pytest.raises(ValueError, match="other/9"):
        load_results(bad)
    _, results = built
    bad.write_text(json.dumps({k: v for k, v in results.items() if k != "seeds"}))
    with pytest.raises(ValueError, match="seeds"):
        load_results(bad)
    route = {k: v for k, v in results["routes"][0].items() if k != "fidelity"}
    bad.write_text(json.dumps({**results, "routes": [route]}))
    with pytest.raises(ValueError, match="'teacher' is missing keys \\['fidelity'\\]"):
        load_results(bad)
    bad.write_text(json.dumps({**results, "routes": [results["routes"][0]] * 2}))
    with pytest.raises(ValueError, match="unique"):
        load_results(bad)


def test_predictions_folder_without_results(tmp_path):
    predictions = {"Asymmetric Duo (sidekick s)": [_route("close", 0)], "single": [_route("random", 0)]}
    save_predictions(tmp_path, predictions, seeds=[7])
    loaded = load_predictions(tmp_path)
    assert list(loaded) == list(predictions)
    np.testing.assert_array_equal(loaded["single"][0]["shift_b"].uncertainty,
                                  predictions["single"][0]["shift_b"].uncertainty)
    assert (tmp_path / route_slug("single") / "seed7.npz").is_file()
    with pytest.raises(FileNotFoundError, match="seed7"):
        load_predictions(tmp_path, results={"routes": [{"name": "other"}], "seeds": [7]})


def test_route_slug():
    assert route_slug("single") == "single" and route_slug("duo_s-2.int8") == "duo_s-2.int8"
    slug = route_slug("Asymmetric Duo (sidekick s)")
    assert slug == route_slug("Asymmetric Duo (sidekick s)") and slug.startswith("asymmetric-duo-sidekick-s-")
    names = ["Duo (s)", "duo s", "Duo s", "duo/s", "../..", ".hidden", "x" * 200, "ü"]
    slugs = [route_slug(n) for n in names]
    assert len(set(slugs)) == len(names)
    assert all(s and "/" not in s and not s.startswith(".") and len(s) <= 80 for s in slugs)


# ------------------------------------------------------------------------------------------ bad inputs


def _drop_split(preds):
    preds["close"][1] = {k: v for k, v in preds["close"][1].items() if k != "shift_b"}
    return preds


def _other_labels(preds):
    p = preds["random"][0]["test"]
    preds["random"][0]["test"] = _make(p.logits, np.roll(p.labels, 1))
    return preds


@pytest.mark.parametrize(
    ("change", "kwargs", "match"),
    [
        (None, {"teacher": "nope"}, "unknown teacher route 'nope'"),
        (None, {"reference": "nope"}, "unknown reference route 'nope'"),
        (_drop_split, {}, r"route 'close', seed 3: predictions of split\(s\) \['shift_b'\] are missing"),
        (lambda p: {**p, "close": p["close"][:1]}, {}, "route 'close' has predictions of 1 seeds"),
        (_other_labels, {}, "labels of route 'random' differ .* split 'test', seed 0"),
        (None, {"seeds": [0, 1, 2]}, "seeds"),
        (None, {"seeds": [0, 0]}, "distinct"),
        (None, {"shift_splits": ["shift_a", "test"]}, "distinct"),
        (None, {"shift_splits": ["shift_a", "shift"]}, "'shift'"),
        (None, {"budget_limits": {"mem": 1.0}}, "budget_limits"),
        (None, {"budgets": {"close": BUDGETS["close"]}}, r"lacks route\(s\) \['teacher', 'random'\]"),
        (lambda p: {**p, "close": [{**s, "test": "x"} for s in p["close"]]}, {}, "expected a Predictions"),
    ],
)
def test_bad_inputs(change, kwargs, match):
    predictions = _predictions()
    if change is not None:
        predictions = change(predictions)
    budgets = kwargs.pop("budgets", BUDGETS)
    options = dict(seeds=SEEDS, reference="close", teacher="teacher", ood_splits=OOD, shift_splits=SHIFT,
                   bootstrap=0, command="x", data_info={})
    options.update(kwargs)
    with pytest.raises(ValueError, match=match):
        build_results(predictions, budgets, {n: META[n] for n in predictions}, **options)


def test_bad_meta_and_route_spec():
    predictions = _predictions()
    options = dict(seeds=SEEDS, reference=None, teacher=None, ood_splits=OOD, shift_splits=SHIFT, bootstrap=0,
                   command="x", data_info={})
    with pytest.raises(ValueError, match="`meta` must describe exactly"):
        build_results(predictions, None, {"close": META["close"]}, **options)
    with pytest.raises(ValueError, match="family"):
        build_results(predictions, None, {n: {"family": "bogus"} for n in predictions}, **options)
    with pytest.raises(ValueError, match="family must be one of"):
        RouteSpec("x", "bogus", torch.nn.Linear(2, 2), None)


# ------------------------------------------------------------------------------------------ real models


def test_predict_routes_and_measure_budgets_on_tiny_models():
    from hf_uq.data import load_digits_benchmark
    from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = load_digits_benchmark(0, shifts=())
        splits = {name: data[name].select(range(12)) for name in ("test", "ood_near")}
        processor = tiny_vit_image_processor()
        small = tiny_vit(hidden_size=32, num_hidden_layers=2, intermediate_size=64)
        large = tiny_vit(hidden_size=64, num_hidden_layers=2, seed=1)
        routes = [RouteSpec("small", "single", small, processor), RouteSpec("large", "teacher", large, processor)]
        with pytest.raises(ValueError, match="unique"):
            predict_routes([routes[0], routes[0]], splits)

        predictions = predict_routes(routes, splits, batch_size=5, progress=False, num_threads=1)
        assert list(predictions) == ["small", "large"] and list(predictions["small"]) == ["test", "ood_near"]
        direct = predict(large, splits["ood_near"], processor, progress=False)
        np.testing.assert_allclose(predictions["large"]["ood_near"].logits, direct.logits, atol=1e-6)
        assert predictions["small"]["test"].has_labels and not predictions["small"]["ood_near"].has_labels

        budgets = measure_budgets(routes, splits["test"], batch_sizes=(1, 16), repeats=3, warmup=1)
        for route in routes:
            budget = budgets[route.name]
            assert budget["parameters"] == count_parameters(route.model)
            assert budget["weight_bytes"] == 4 * budget["parameters"] and budget["peak_memory_bytes"] > 0
            assert list(budget["latency_ms"]) == ["1", "16"]
            assert all(0 < v["p50"] <= v["p99"] for v in budget["latency_ms"].values())
        assert budgets["large"]["flops"] > budgets["small"]["flops"] > 0

        results = build_results(
            {name: [p] for name, p in predictions.items()}, budgets,
            {r.name: {"family": r.family} for r in routes}, seeds=[0], reference="small", teacher="large",
            ood_splits=["ood_near"], shift_splits=[], bootstrap=0, command="test", data_info={"name": "digits"},
        )
        small_entry = results["routes"][0]
        assert small_entry["relative"]["parameters"] == 1.0 and results["routes"][1]["role"] == "teacher"
        assert results["routes"][1]["relative"]["flops"] == budgets["large"]["flops"] / budgets["small"]["flops"]
        assert results["data"]["labels"] == [str(i) for i in range(8)]
        assert set(small_entry["fidelity"]) == {"test", "ood", "below_threshold"}
    finally:
        torch.set_num_threads(threads)
