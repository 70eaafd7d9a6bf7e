"""`hf-uq benchmark --quick` end to end, the output folder it writes, and the zoo's training plan and cache.

The quick run (one seed, every route family) is made once per module; a second run on the same folder must reuse
every trained model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from hf_uq.cli import main
from hf_uq.evaluation.benchmark import run_benchmark
from hf_uq.evaluation.predict import Predictions
from hf_uq.evaluation.protocol import FAMILIES
from hf_uq.evaluation.results_io import ROUTE_KEYS, TOP_LEVEL_KEYS, load_predictions
from hf_uq.evaluation.routes import DEFAULT_ZOO, QUICK_ZOO, ZooConfig, plan_training
from hf_uq.evaluation.scoring import score_pooled
from hf_uq.evaluation.zoo_training import RECIPE_FILE, filtered_stderr, is_cached

KNOBS = {"sidekick size", "ensembled blocks", "distillation temperature", "bit width"}


def _trained_files(output) -> dict[str, float]:
    """mtime of every trained model's weights (members, sidekicks, BatchEnsembles, students)."""
    files = {}
    for root, _, names in os.walk(output / "models"):
        if RECIPE_FILE in names:
            path = os.path.join(root, "model.safetensors")
            files[path] = os.path.getmtime(path)
    return files


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("benchmark") / "quick"
    status = main(["benchmark", "--quick", "--output", str(output), "--budget", "memory=1.5,latency=3", "--quiet"])
    assert status == 0
    with open(output / "results.json", encoding="utf-8") as handle:
        results = json.load(handle)
    return output, results, _trained_files(output)


def test_folder_structure(quick_run):
    output, results, trained = quick_run
    for name in ("results.json", "report.md", "report.html"):
        assert (output / name).is_file(), name
    plots = sorted(p.name for p in (output / "plots").iterdir())
    assert {"pareto.png", "reliability.png", "risk_coverage.png", "ood_histograms.png"} <= set(plots)
    html = (output / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in html  # self-contained
    for route in results["routes"]:
        assert set(route["models"]) == {"0"}, route["name"]
        folder = output / route["models"]["0"]
        assert folder.parent == output / "models" / "seed0", route["name"]
        assert (folder / "config.json").is_file(), route["name"]
        assert (folder / "README.md").is_file(), route["name"]
        assert route["name"] in (folder / "README.md").read_text(encoding="utf-8")
        assert (output / "predictions").is_dir()
    # the teacher's members are cached next to the routes: 5 members, 1 sidekick, 2 BatchEnsembles, 1 student
    assert len(trained) == QUICK_ZOO.members + len(QUICK_ZOO.sidekicks) + len(QUICK_ZOO.be_blocks) + len(
        QUICK_ZOO.student_temperatures)


def test_results_keys(quick_run):
    _, results, _ = quick_run
    assert set(TOP_LEVEL_KEYS) <= set(results)
    assert results["schema"] == "hf_uq.results/1"
    assert results["seeds"] == [0]
    assert results["command"].startswith("hf-uq benchmark --quick")
    assert results["versions"]["hf_uq"] and results["versions"]["torch"]
    settings = results["settings"]
    assert settings["quick"] is True and settings["bootstrap"] == 200
    assert settings["budget"] == {"memory": 1.5, "latency": 3.0}
    assert settings["reference"] == "single" and settings["teacher"] == "deep ensemble"
    assert settings["latency_batch_sizes"] == [1, 32]
    data = results["data"]
    assert data["ood_splits"] == ["ood_near", "ood_far"] and data["calibration_split"] == "validation"
    assert data["shift_splits"] == ["shift_gaussian_noise_2", "shift_gaussian_blur_2", "shift_rotation_2"]
    assert data["labels"] == [str(i) for i in range(8)]
    assert results["timings"]["models_trained"] == len(quick_run[2])
    roles = {route["name"]: route["role"] for route in results["routes"]}
    assert roles["deep ensemble"] == "teacher" and roles["single"] == "reference"
    for route in results["routes"]:
        assert set(ROUTE_KEYS) <= set(route)
        metrics = route["metrics"]
        assert set(metrics) == {"test", "shift", *data["shift_splits"]}
        for key in ("accuracy", "nll", "brier", "ece", "aurc", "e_aurc", "sac", "cp_auroc", "ood_near/auroc",
                    "ood_far/fpr_at_95", "ood_far/aupr"):
            assert len(metrics["test"][key]) == 3, (route["name"], key)
        assert set(route["fidelity"]) == {"test", "shift", "ood", "below_threshold"}
        budget = route["budget"]
        assert budget["parameters"] > 0 and budget["flops"] > 0 and budget["peak_memory_bytes"] > 0
        assert set(budget["latency_ms"]) == {"1", "32"}
        assert route["relative"]["latency"] > 0
        assert isinstance(route["fits_budget"], bool)


def test_every_route_family_and_knob(quick_run):
    _, results, _ = quick_run
    routes = results["routes"]
    assert {route["family"] for route in routes} == set(FAMILIES) - {"user"}
    assert {route["knob"]["name"] for route in routes if route["knob"]} == KNOBS
    quantized = [route for route in routes if route["quantization"]]
    assert {route["family"] for route in quantized} == {"single", "duo"}
    assert all(r["quantization"]["backend"] == "quanto" and r["quantization"]["weights"] == "int8" for r in quantized)
    duo = next(route for route in routes if route["family"] == "duo" and not route["quantization"])
    temperatures = duo["extra"]["temperatures"]
    assert len(temperatures) == 1 and all(t >= 1.0 for t in temperatures[0])  # per seed, bounded below by 1


def _same(recorded, value) -> bool:
    if recorded is None:
        return math.isnan(value)
    return math.isclose(recorded, value, rel_tol=1e-9, abs_tol=1e-12)


def test_metrics_equal_a_recomputation_from_the_saved_predictions(quick_run):
    output, results, _ = quick_run
    predictions = load_predictions(output)
    settings, data = results["settings"], results["data"]
    options = dict(bootstrap=0, n_bins=settings["n_bins"], sac_accuracy=settings["sac_accuracy"])
    assert list(predictions) == [route["name"] for route in results["routes"]]
    for route in results["routes"]:
        per_seed = predictions[route["name"]]
        recomputed = {"test": score_pooled([p["test"] for p in per_seed],
                                           ood={s: [p[s] for p in per_seed] for s in data["ood_splits"]}, **options),
                      "shift": score_pooled([Predictions.concatenate([p[s] for s in data["shift_splits"]])
                                             for p in per_seed], **options)}
        for split in data["shift_splits"]:
            recomputed[split] = score_pooled([p[split] for p in per_seed], **options)
        for split, scores in recomputed.items():
            assert set(scores) == set(route["metrics"][split])
            for key, interval in scores.items():
                assert _same(route["metrics"][split][key][0], interval.estimate), (route["name"], split, key)


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for argv in (["--seeds", "0", "0"], ["--workers", "0"], ["--budget", "memory=abc"], ["--bootstrap", "-1"],
                 ["--output", str(a_file)]):
        assert main(["benchmark", "--quick", "--quiet", *argv]) == 2, argv
        error = capsys.readouterr().err.strip()
        assert error.startswith("hf-uq benchmark: error:") and "\n" not in error, argv
    assert not (tmp_path / "hf_uq_benchmark").exists()


def test_training_plan_and_cache_keys(tmp_path):
    jobs = {job.key: job for job in plan_training(DEFAULT_ZOO, [0, 1], str(tmp_path))}
    assert len(jobs) == 2 * (5 + 2 + 2 + 2)
    student = jobs["seed1/dirichlet_t2.5"]
    assert set(student.deps) == {f"seed1/member{m}" for m in range(5)}
    assert jobs["seed0/batch_ensemble_last2"].deps == ("seed0/member0",)
    assert not jobs["seed0/member0"].deps and jobs["seed0/member0"].path.startswith(str(tmp_path / "seed0"))
    # a changed setting changes the recipes of exactly the models it affects
    longer = {job.key: job for job in plan_training(dataclasses.replace(DEFAULT_ZOO, epochs=30), [0, 1], str(tmp_path))}
    changed = {key for key in jobs if jobs[key].recipe != longer[key].recipe}
    assert changed == {key for key in jobs if "sidekick" not in key}
    assert ZooConfig.from_dict(json.loads(json.dumps(DEFAULT_ZOO.to_dict()))) == DEFAULT_ZOO
    folder = tmp_path / "model"
    folder.mkdir()
    assert not is_cached(str(folder), student.recipe)
    (folder / "config.json").write_text("{}")
    (folder / RECIPE_FILE).write_text(json.dumps(student.recipe))
    assert is_cached(str(folder), student.recipe) and not is_cached(str(folder), jobs["seed0/member0"].recipe)


def test_filtered_stderr_drops_only_native_noise(capfd):
    with filtered_stderr():
        os.write(2, b"USDT:2026 SyncActivityProfilerHandler.cpp:39] profiler_start\nsomething real\n")
    assert capfd.readouterr().err == "something real\n"


def test_second_run_reuses_every_trained_model(quick_run):
    """Last in this module: it rewrites the folder (without bootstrap, report and cards)."""
    output, first, trained = quick_run
    lighter = dataclasses.replace(QUICK_ZOO, latency_repeats=2)  # evaluation settings only: same training recipes
    again = run_benchmark(output, seeds=[0], quick=True, bootstrap=0, zoo=lighter, report=False, cards=False,
                          progress=False)
    assert again["timings"]["models_trained"] == 0
    assert again["timings"]["models_cached"] == len(trained)
    assert _trained_files(output) == trained  # not one trained model was written again
    estimates = {r["name"]: r["metrics"]["test"]["accuracy"][0] for r in again["routes"]}
    assert estimates == {r["name"]: r["metrics"]["test"]["accuracy"][0] for r in first["routes"]}
    assert np.isfinite(again["timings"]["total_s"])
