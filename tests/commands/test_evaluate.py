"""`hf-uq evaluate`: results.json on users' checkpoints, one-line errors for bad input, sharding under accelerate."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoImageProcessor, AutoModelForImageClassification

from hf_uq import cli
from hf_uq.data import DIGITS_LABELS, load_image_dataset
from hf_uq.evaluation import load_predictions, predict, score_pooled
from hf_uq.evaluation.distributed import shard_bounds
from hf_uq.evaluation.results_io import ROUTE_KEYS, TOP_LEVEL_KEYS
from hf_uq.evaluation.user_eval import route_names
from hf_uq.functional import fidelity

REPO = Path(__file__).resolve().parents[2]
FAST = ["--bootstrap", "20", "--num-threads", "1", "--cpu", "--quiet"]


def _evaluate(workspace, output, *extra: str) -> list[str]:
    return ["evaluate", "--model", str(workspace["vit"]), "--teacher", str(workspace["cnn"]),
            "--dataset", str(workspace["data"]), "--ood", str(workspace["near"]), "--calibration-split",
            "validation", "--output", str(output), *FAST, *extra]


@pytest.fixture(scope="module")
def single_run(workspace, tmp_path_factory):
    """One in-process run with the report (shared by the tests below)."""
    output = tmp_path_factory.mktemp("single") / "out"
    assert cli.main(_evaluate(workspace, output, "--budget", "memory=1.5,latency=100")) == 0
    return output, json.loads((output / "results.json").read_text())


def _direct(folder: Path, split) -> object:
    model = AutoModelForImageClassification.from_pretrained(folder)
    return predict(model, split, AutoImageProcessor.from_pretrained(folder), progress=False, num_threads=1)


def _same(value, expected) -> bool:
    return (value is None and math.isnan(expected)) or value == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_results_json_structure(single_run, workspace):
    output, results = single_run
    assert tuple(results) == TOP_LEVEL_KEYS
    assert results["schema"] == "hf_uq.results/1" and results["seeds"] == [0]
    assert results["command"].startswith("hf-uq evaluate --model ")
    data = results["data"]
    assert data["name"] == str(workspace["data"]) and data["id_split"] == "test"
    assert data["calibration_split"] == "validation" and data["ood_splits"] == ["near"]
    assert data["shift_splits"] == [] and data["labels"] == DIGITS_LABELS
    assert data["num_samples"] == {"test": 41, "validation": 16, "near": 25}
    assert results["settings"]["reference"] == "vit" and results["settings"]["teacher"] == "cnn"
    assert results["settings"]["budget"] == {"memory": 1.5, "latency": 100.0}

    vit, cnn = results["routes"]
    assert [tuple(route) for route in (vit, cnn)] == [ROUTE_KEYS] * 2
    assert (vit["name"], vit["family"], vit["role"]) == ("vit", "user", "reference")
    assert (cnn["name"], cnn["family"], cnn["role"]) == ("cnn", "user", "teacher")
    assert vit["extra"]["architecture"] == "ViTForImageClassification"
    assert (output / vit["models"]["0"]).resolve() == workspace["vit"].resolve()
    assert set(vit["metrics"]) == {"test"}
    assert vit["relative"]["parameters"] == 1.0 and cnn["relative"]["parameters"] > 1
    assert vit["fits_budget"] is True and isinstance(cnn["fits_budget"], bool)
    assert cnn["fidelity"]["test"] == [1.0, 1.0, 1.0]
    assert all(len(v) == 3 for v in vit["metrics"]["test"].values())
    for name in ("report.md", "report.html", "predictions/index.json"):
        assert (output / name).is_file(), name


def test_metrics_match_a_direct_predict(single_run, workspace):
    output, results = single_run
    test = load_image_dataset(workspace["data"], split="test")
    near = load_image_dataset(workspace["near"], split="train", label_column=None)
    direct = {name: {"test": _direct(workspace[name], test), "near": _direct(workspace[name], near)}
              for name in ("vit", "cnn")}
    saved = load_predictions(output / "predictions")
    for route in results["routes"]:
        mine = direct[route["name"]]
        expected = score_pooled([mine["test"]], ood={"near": [mine["near"]]}, bootstrap=0)
        assert set(route["metrics"]["test"]) == set(expected)
        for key, interval in expected.items():
            assert _same(route["metrics"]["test"][key][0], interval.estimate), key
        stored = saved[route["name"]][0]
        assert set(stored) == {"test", "validation", "near"}
        np.testing.assert_array_equal(stored["test"].labels, mine["test"].labels)
        np.testing.assert_allclose(stored["near"].logits, mine["near"].logits, rtol=1e-5, atol=1e-6)
        assert (stored["near"].labels == -1).all()
    vit = results["routes"][0]
    u = {name: direct[name]["test"].uncertainty for name in direct}
    assert _same(vit["fidelity"]["test"][0], fidelity(u["vit"], u["cnn"]))


def test_save_to_disk_data_and_ood_names(workspace, tmp_path):
    """A `save_to_disk` dataset; OOD sets named after their split (same dataset) or folder, made unique."""
    output = tmp_path / "out"
    argv = ["evaluate", "--model", str(workspace["vit"]), "--dataset", str(workspace["saved"]),
            "--ood", f"{workspace['saved']}:validation", "--ood", str(workspace["near"]), "--ood",
            str(workspace["near"]), "--output", str(output), "--no-budget", "--no-report", *FAST]
    assert cli.main(argv) == 0
    results = json.loads((output / "results.json").read_text())
    data = results["data"]
    assert data["ood_splits"] == ["validation", "near", "near_2"]
    assert data["ood_sources"] == {"validation": f"{workspace['saved']}:validation",
                                   "near": str(workspace["near"]), "near_2": str(workspace["near"])}
    assert data["num_samples"] == {"test": 16, "validation": 8, "near": 25, "near_2": 25}
    assert data["labels"] == DIGITS_LABELS and data["calibration_split"] is None
    (route,) = results["routes"]
    assert route["budget"] is None and route["fidelity"] is None and route["role"] == "reference"
    assert {"validation/auroc", "near/auroc", "near_2/auroc"} <= set(route["metrics"]["test"])
    assert not (output / "report.md").exists()


def test_route_names_are_unique(tmp_path):
    for run in ("run1", "run2"):
        (tmp_path / run / "model").mkdir(parents=True)
    a, b = str(tmp_path / "run1" / "model"), str(tmp_path / "run2" / "model")
    assert route_names([a, b, a, "org/vit-base"]) == ["run1/model", "run2/model", "run1/model (2)", "org/vit-base"]


@pytest.mark.parametrize("rows,shards", [(41, 2), (40, 2), (3, 4), (0, 2), (10, 3)])
def test_shard_bounds_cover_every_row_once(rows, shards):
    bounds = [shard_bounds(rows, shards, i) for i in range(shards)]
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1


# ------------------------------------------------------------------------------------------ bad input


def _bad(capsys, argv: list[str]) -> str:
    """Runs the command, expecting exit status 2 and exactly one line on stderr; returns the line."""
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if line.startswith("hf-uq")]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("hf-uq evaluate: error: ")
    return err[0]


def _argv(workspace, tmp_path, *, model=("vit",), dataset="data", ood=("near",), extra=()) -> list[str]:
    argv = ["evaluate"]
    for name in model:
        argv += ["--model", str(workspace[name]) if name in workspace else name]
    argv += ["--dataset", str(workspace[dataset]) if dataset in workspace else dataset]
    for name in ood:
        argv += ["--ood", str(workspace[name]) if name in workspace else name]
    return argv + ["--output", str(tmp_path / "out"), *FAST, *extra]


def test_missing_model_folder(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, model=[str(tmp_path / "nowhere")]))
    assert "Model folder" in line and "nowhere" in line and "does not exist" in line
    assert not (tmp_path / "out").exists()


def test_model_without_image_processor(workspace, tmp_path, capsys):
    folder = tmp_path / "bare"
    AutoModelForImageClassification.from_pretrained(workspace["vit"]).save_pretrained(folder)
    line = _bad(capsys, _argv(workspace, tmp_path, model=[str(folder)]))
    assert "No image processor found for model" in line and "image_processor.save_pretrained" in line


def test_missing_dataset_folder(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, dataset=str(tmp_path / "no_data")))
    assert "no_data" in line and "does not exist" in line


def test_dataset_without_label_column(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, dataset="no_label"))
    assert "Label column 'label' not found" in line and "['image', 'digit']" in line


def test_model_labels_differ_from_the_dataset(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, model=["other_labels"]))
    assert "differ" in line and "'class_0'" in line and "only the dataset has ['0', '1'" in line


@pytest.mark.parametrize("ood,expected", [("near_rgb", "8x8 pixels with 3 channels"),
                                          ("near_16px", "16x16 pixels with 1 channel")])
def test_ood_images_of_another_format(workspace, tmp_path, capsys, ood, expected):
    line = _bad(capsys, _argv(workspace, tmp_path, ood=["near", ood]))
    assert f"OOD set '{ood}'" in line and expected in line and "has 8x8 pixels with 1 channel" in line


def test_empty_split(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, dataset="saved", extra=["--split", "empty"]))
    assert "Split 'empty'" in line and "is empty" in line


def test_unknown_split(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, extra=["--split", "tset"]))
    assert "Unknown split 'tset'" in line and "'test'" in line and "'validation'" in line


def test_models_with_different_label_spaces(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, model=["vit", "ten_labels"]))
    assert "'vit' and 'ten_labels' have different label spaces" in line and "'8', '9'" in line


def test_bad_budget(workspace, tmp_path, capsys):
    line = _bad(capsys, _argv(workspace, tmp_path, extra=["--budget", "memory=two"]))
    assert "'two' is not a number" in line


# ------------------------------------------------------------------------------------------ accelerate


# ~35 s on an idle 2-core machine: two interpreters importing torch, transformers and hf_uq
def test_two_processes_match_one(single_run, workspace, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` on a machine without GPUs runs two CPU processes (gloo);
    `--cpu --num_processes 2` would start one, as accelerate launches multi-CPU jobs only through mpirun."""
    single_output, single = single_run
    output = tmp_path / "ddp"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1",
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_DATASETS_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "hf_uq.cli",
               *_evaluate(workspace, output, "--no-budget", "--no-report")]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    print(f"accelerate launch with 2 processes took {time.perf_counter() - start:.1f} s")

    results = json.loads((output / "results.json").read_text())
    assert results["settings"]["num_processes"] == 2 and single["settings"]["num_processes"] == 1
    assert results["data"]["num_samples"] == single["data"]["num_samples"]
    for mine, theirs in zip(results["routes"], single["routes"], strict=True):
        assert mine["name"] == theirs["name"] and mine["budget"] is None
        for key, interval in theirs["metrics"]["test"].items():
            for a, b in zip(mine["metrics"]["test"][key], interval, strict=True):
                assert (a is None and b is None) or a == pytest.approx(b, rel=1e-6, abs=1e-9), key
        assert mine["fidelity"]["test"] == pytest.approx(theirs["fidelity"]["test"], rel=1e-6)
    sharded, whole = load_predictions(output / "predictions"), load_predictions(single_output / "predictions")
    for route, per_seed in whole.items():
        for split, predictions in per_seed[0].items():
            np.testing.assert_array_equal(sharded[route][0][split].labels, predictions.labels)
            np.testing.assert_allclose(sharded[route][0][split].logits, predictions.logits, rtol=1e-5, atol=1e-6)
