"""Uncertainty model cards: model-index round trip, awkward names, body sections, plots, and `hf-uq card`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hub_results import (
    AWKWARD_DATASET,
    AWKWARD_LABELS,
    results_document,
    route,
    standard_routes,
    write_results,
)
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

from hf_uq.cli import main
from hf_uq.hub import cards
from hf_uq.hub.cards import card_metrics, minimal_model_card, model_card, write_model_card

ROOT = Path(__file__).resolve().parents[2]
DUO = "Asymmetric Duo (sidekick s)"
ID_KEYS = ("accuracy", "ece", "nll", "aurc", "sac", "cp_auroc")


def expected_metrics(document: dict, name: str) -> dict[str, dict[str, float]]:
    """Every number the card must carry, read straight from the results document."""
    entry = next(r for r in document["routes"] if r["name"] == name)
    test = entry["metrics"]["test"]
    out = {"test": {k: test[k][0] for k in ID_KEYS if test[k][0] is not None}}
    out["test"] |= {f"{o}/auroc": test[f"{o}/auroc"][0] for o in document["data"]["ood_splits"]}
    if "shift" in entry["metrics"]:
        out["shift"] = {k: entry["metrics"]["shift"][k][0] for k in ID_KEYS if entry["metrics"]["shift"][k][0] is not None}
    return out


@pytest.fixture
def model_dir(results_dir: Path) -> Path:
    """The duo's model folder (named in results.json), with a config.json describing its members."""
    folder = results_dir / "models" / "seed0" / "duo_s"
    folder.mkdir(parents=True)
    config = {"model_type": "duo", "architectures": ["DuoForImageClassification"], "temperatures": [1.3, 2.1],
              "large_config": {"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 2},
              "small_config": {"model_type": "vit", "hidden_size": 16, "num_hidden_layers": 1},
              "auto_map": {"AutoConfig": "configuration_duo.DuoConfig"}}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_card_round_trip_gives_back_every_metric(results_dir, model_dir):
    document = json.loads((results_dir / "results.json").read_text())
    path = write_model_card(model_dir, results_dir / "results.json", DUO, model_id="tester/duo")
    assert path == str(model_dir / "README.md")

    card = ModelCard.load(path)
    name, eval_results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert name == "tester/duo"
    assert card_metrics(eval_results) == expected_metrics(document, DUO)
    assert len(eval_results) == 6 + 2 + 6  # id metrics + OOD AUROC per set + shift metrics
    args = {(r.dataset_split, r.metric_type): r.metric_args for r in eval_results}
    assert args["test", "ece"] == {"n_bins": 15} and args["shift", "ece"] == {"n_bins": 15}
    assert args["test", "sac_at_98"] == {"accuracy": 0.98}
    assert {r.metric_args["ood_set"] for r in eval_results if r.metric_type == "ood_auroc"} == {"ood_near", "ood_far"}
    assert all(r.task_type == "image-classification" for r in eval_results)


def test_quotes_colons_and_newlines_in_names_give_valid_yaml(results_dir, model_dir):
    text = Path(write_model_card(model_dir, results_dir, DUO)).read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    metadata = yaml.safe_load(front)  # the front matter alone is valid YAML and ends at the right fence
    assert metadata["hf_uq"]["data"]["labels"] == AWKWARD_LABELS
    assert metadata["hf_uq"]["data"]["name"] == AWKWARD_DATASET
    assert body.lstrip().startswith("# Asymmetric Duo (sidekick s)")

    card = ModelCard(text)
    assert card.data["hf_uq"]["data"]["labels"] == AWKWARD_LABELS
    assert {r.dataset_name for r in card.data.eval_results} == {AWKWARD_DATASET, f"{AWKWARD_DATASET} (covariate shift, pooled)"}
    # in the body every name stays on one line, so no label can open a YAML block or break a table
    assert "`six --- seven: 7`" in body and "&lt;eight&gt;" in body
    assert not any(line.strip() == "---" for line in body.splitlines())


def test_body_sections(results_dir, model_dir):
    text = Path(write_model_card(model_dir, results_dir, DUO)).read_text(encoding="utf-8")
    for heading in ("Route and members", "Cost relative to the single model", "Fidelity to the teacher",
                    "Quantization", "Calibration", "Evaluation", "Plots", "Intended use",
                    "What the uncertainty does not cover"):
        assert f"## {heading}" in text, heading
    assert "- large: `vit`, hidden size 32, num hidden layers 2" in text
    assert "- small: `vit`, hidden size 16, num hidden layers 1" in text
    assert "Swept parameter: sidekick size = `s`" in text
    assert "| 2.35 MB (1.15x) |" in text and "(1.30x) |" in text  # peak memory and latency ratios
    assert "| test | 0.820 [0.770, 0.870] |" in text
    assert "Warning: fidelity below" not in text
    assert "None: the weights are stored at full precision." in text
    assert "`validation` split (145 samples)" in text
    assert "| ood_near | 0.900 [0.880, 0.920] |" in text
    assert "| shift_blur_1 |" in text
    assert "outputs.uncertainty" in text  # an hf_uq model (auto_map in its config)


def test_plots_are_copied_next_to_the_card_and_linked_relatively(results_dir, model_dir):
    text = Path(write_model_card(model_dir, results_dir / "results.json", DUO)).read_text(encoding="utf-8")
    for name in ("reliability.png", "risk_coverage.png"):
        assert f"](plots/{name})" in text
        assert (model_dir / "plots" / name).read_bytes() == (results_dir / "plots" / name).read_bytes()


def test_an_explicit_plots_dir_and_a_dict_without_plots(results_dir, model_dir, tmp_path):
    document = json.loads((results_dir / "results.json").read_text())
    card = model_card(document, DUO)  # in memory: no run folder, no plots
    assert "## Plots" not in card.text and card.hf_uq_plots == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "calibration.png").write_bytes(b"png")
    write_model_card(model_dir, document, DUO, plots_dir=tmp_path / "other")
    assert (model_dir / "plots" / "calibration.png").is_file()
    assert "](plots/calibration.png)" in (model_dir / "README.md").read_text()


def test_low_fidelity_quantization_and_null_metrics(tmp_path):
    quantized = route("BatchEnsemble int8", "batch_ensemble", fidelity=0.55, cp_auroc=None,
                      quantization={"backend": "quanto", "weights": "int8", "activations": None, "skipped": ["classifier"]})
    quantized["metrics"]["test"]["ece"] = [0.04, None, None]  # bootstrap=0: no bounds
    document = results_document([*standard_routes()[:2], quantized])
    card = model_card(document, "BatchEnsemble int8")
    assert "Warning: fidelity below 0.7" in card.text and "Fidelity below 0.7" in card.text
    assert "- backend: `quanto`" in card.text and "- weights: `int8`" in card.text
    assert '- skipped: `["classifier"]`' in card.text
    assert "| ECE | 0.040 |" in card.text
    metrics = card_metrics(card)
    assert "cp_auroc" not in metrics["test"] and metrics["test"]["ece"] == 0.04
    assert "outputs.uncertainty" in card.text  # batch_ensemble is an hf_uq family


def test_in_memory_results_with_numpy_values_and_nan(tmp_path):
    """What the benchmark runner passes before results.json is written: numpy numbers, NaN for undefined."""
    document = results_document(standard_routes())
    duo = document["routes"][2]
    duo["metrics"]["test"]["cp_auroc"] = [float("nan"), float("nan"), float("nan")]
    duo["metrics"]["test"]["ece"] = np.array([0.031, 0.02, 0.04], dtype=np.float32)
    duo["fidelity"]["test"] = [np.float64(0.82), np.float64(0.77), np.float64(0.87)]
    duo["budget"]["parameters"] = np.int64(123456)
    (tmp_path / "m").mkdir()
    card = ModelCard.load(write_model_card(tmp_path / "m", document, DUO))
    metrics = card_metrics(card)
    assert "cp_auroc" not in metrics["test"] and metrics["test"]["ece"] == pytest.approx(0.031)
    assert card.data["hf_uq"]["fidelity"]["test"] == [0.82, 0.77, 0.87]
    assert isinstance(document["routes"][2]["metrics"]["test"]["ece"], np.ndarray)  # the caller's dict is untouched


def test_teacher_and_runs_without_teacher_or_shift(tmp_path):
    document = results_document(standard_routes())
    assert "This model is the teacher" in model_card(document, "deep ensemble").text
    plain = route("single", "single", role="reference", shift=False, fidelity=None)
    document = results_document([plain])
    document["settings"]["teacher"] = None
    card = model_card(document, "single")
    assert "Not measured: the run had no teacher" in card.text
    assert set(card_metrics(card)) == {"test"}
    assert "1 - outputs.logits.softmax(-1)" in card.text  # a plain classifier has no `uncertainty` field


def test_unknown_route_and_bad_results(results_dir):
    with pytest.raises(ValueError, match=r"no route 'nope' in the results; routes: 'deep ensemble', 'single'"):
        model_card(results_dir / "results.json", "nope")
    with pytest.raises(ValueError, match="schema"):
        model_card({"schema": "other", "routes": []}, "x")
    document = json.loads((results_dir / "results.json").read_text())
    del document["predictions"]
    with pytest.raises(ValueError, match=r"missing keys \['predictions'\]"):  # the same check as load_results
        model_card(document, "single")
    document = json.loads((results_dir / "results.json").read_text())
    del document["routes"][0]["budget"]
    with pytest.raises(ValueError, match=r"is missing keys \['budget'\]"):
        model_card(document, "single")
    with pytest.raises(FileNotFoundError):
        write_model_card(results_dir / "missing", results_dir, DUO)


def test_minimal_card_has_no_model_index():
    card = minimal_model_card({"model_type": "temperature_scaled", "architectures": ["T"],
                               "id2label": {"0": 'a "b"', "1": "c: d"}}, model_id="me/x")
    reparsed = ModelCard(str(card))
    assert reparsed.data.eval_results is None and "model-index" not in reparsed.data.to_dict()
    assert "No evaluation results are attached" in reparsed.text and "Classes (2)" in reparsed.text


def test_template_ships_from_model_cards():
    assert cards.template_path() == ROOT / "model_cards" / "template.md"


# ------------------------------------------------------------------------------------------------ hf-uq card


def test_cli_card_infers_the_route_from_the_saved_model_paths(results_dir, model_dir, capsys):
    assert main(["card", str(model_dir), "--results", str(results_dir / "results.json")]) == 0
    assert f"(route '{DUO}')" in capsys.readouterr().out
    card = ModelCard.load(model_dir / "README.md")
    assert card.data["hf_uq"]["route"] == DUO
    assert (model_dir / "plots" / "reliability.png").is_file()


def test_cli_card_with_an_explicit_route_and_model_id(results_dir, model_dir):
    assert main(["card", str(model_dir), "--results", str(results_dir), "--route", "single",
                 "--model-id", "me/single"]) == 0
    card = ModelCard.load(model_dir / "README.md")
    assert card.data.model_name == "me/single" and card.data["hf_uq"]["route"] == "single"


def test_cli_card_errors_list_the_routes(results_dir, model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_UQ_DEBUG", raising=False)
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert main(["card", str(other), "--results", str(results_dir / "results.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hf-uq card: error: no route of the results saved its model in")
    assert "'deep ensemble', 'single', 'Asymmetric Duo (sidekick s)', 'BatchEnsemble int8'" in err

    document = json.loads((results_dir / "results.json").read_text())
    document["routes"][3]["models"] = {"0": "models/seed0/duo_s"}  # two routes claim the folder
    write_results(results_dir, document)
    assert main(["card", str(model_dir), "--results", str(results_dir / "results.json")]) == 2
    assert "saved by several routes ('Asymmetric Duo (sidekick s)', 'BatchEnsemble int8')" in capsys.readouterr().err

    assert main(["card", str(model_dir), "--results", str(results_dir / "results.json"), "--route", "nope"]) == 2
    assert "no route 'nope'" in capsys.readouterr().err
    assert main(["card", str(model_dir), "--results", str(tmp_path / "none.json")]) == 2
    assert "results file not found" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ packaging


def test_wheel_ships_the_template(tmp_path):
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("hf_uq", "metrics", "model_cards"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--quiet",
                           "-w", str(tmp_path / "wheel"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("hf_uq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hf_uq/model_cards/template.md" in names
    assert not any(n.startswith("model_cards/") for n in names)
