"""`hf-uq recommend` on crafted results files: budget filtering, priorities, ties, warnings, and the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hf_uq.cli import main
from hf_uq.evaluation.recommend import (
    Priority,
    Recommendation,
    check_budget,
    read_results,
    recommend,
)


def _route(name: str, *, role: str | None = None, ood: tuple[float, float] = (0.8, 0.8), ece: float = 0.05,
           nll: float = 0.3, aurc: float = 0.02, width: float = 0.005, fidelity: float | None = 0.8,
           memory: float | None = 1.0, latency: float | None = 1.0) -> dict[str, Any]:
    """A route entry of docs/results_format.md with the metrics recommend reads, each +-`width`."""

    def iv(value: float) -> list[float]:
        return [value, value - width, value + width]

    return {
        "name": name, "family": "teacher" if role == "teacher" else "user", "knob": None, "quantization": None,
        "role": role, "models": {}, "extra": {},
        "metrics": {"test": {"accuracy": iv(0.95), "ece": iv(ece), "nll": iv(nll), "aurc": iv(aurc),
                             "ood_near/auroc": iv(ood[0]), "ood_far/auroc": iv(ood[1])}},
        "fidelity": {"test": None if fidelity is None else [fidelity, fidelity - 0.05, fidelity + 0.05],
                     "shift": None, "ood": None, "below_threshold": None if fidelity is None else fidelity < 0.7},
        "budget": {},
        "relative": {"peak_memory": memory, "latency": latency},
        "fits_budget": None,
    }


def _results(*routes: dict[str, Any], budget: dict[str, float] | None = None) -> dict[str, Any]:
    return {
        "schema": "hf_uq.results/1", "command": "hf-uq benchmark", "created": "2026-11-29T00:00:00+00:00",
        "versions": {}, "seeds": [0],
        "settings": {"fidelity_threshold": 0.7, "reference": "single", "teacher": "deep ensemble", "budget": budget},
        "data": {"name": "digits", "id_split": "test", "calibration_split": "validation",
                 "ood_splits": ["ood_near", "ood_far"], "shift_splits": []},
        "routes": list(routes), "predictions": "predictions",
    }


TEACHER = _route("deep ensemble", role="teacher", ood=(0.95, 0.93), ece=0.02, nll=0.15, aurc=0.005, fidelity=1.0,
                 memory=5.0, latency=5.0)
SINGLE = _route("single", role="reference", ood=(0.8, 0.7), ece=0.06, nll=0.35, aurc=0.02, fidelity=0.6)
OOD_WINNER = _route("duo", ood=(0.9, 0.88), ece=0.09, nll=0.5, aurc=0.05, memory=1.2, latency=1.3)
CALIBRATED = _route("temperature", ood=(0.75, 0.65), ece=0.01, nll=0.25, aurc=0.035, fidelity=0.65)
SELECTIVE = _route("batch ensemble", ood=(0.82, 0.75), ece=0.075, nll=0.4, aurc=0.008, memory=1.1, latency=1.4)
ALL = (TEACHER, SINGLE, OOD_WINNER, CALIBRATED, SELECTIVE)


def _names(rec: Recommendation) -> list[list[str]]:
    return [[s.name for s in group] for group in rec.ranking]


def test_nothing_fits():
    rec = recommend(_results(*ALL), "ood", memory=0.5)
    assert rec.ranking == [] and rec.best == []
    assert set(rec.excluded) == {r["name"] for r in ALL}
    assert rec.excluded["duo"] == ["peak memory 1.20x > 0.5x"]
    assert any(line.startswith("No route fits the budget. The cheapest measured route is single") for line in rec.explanation)
    assert "0 of 5 routes fit" in rec.explanation[0]


def test_one_fits():
    rec = recommend(_results(TEACHER, OOD_WINNER, SELECTIVE), "calibration", memory=1.15, latency=1.45)
    assert _names(rec) == [["batch ensemble"]]
    assert rec.best[0].name == "batch ensemble" and rec.best[0].rank == 1
    assert rec.excluded == {"deep ensemble": ["peak memory 5.00x > 1.15x", "latency 5.00x > 1.45x"],
                            "duo": ["peak memory 1.20x > 1.15x"]}
    assert any(line.startswith("Recommended: batch ensemble (0.075 [0.070, 0.080], NLL 0.400") for line in rec.explanation)


@pytest.mark.parametrize("priority, winner", [("ood", "duo"), ("calibration", "temperature"),
                                              ("selective", "batch ensemble")])
def test_the_priority_changes_the_winner(priority, winner):
    rec = recommend(_results(*ALL), priority, memory=1.5, latency=1.5)
    assert [s.name for s in rec.best] == [winner]
    assert "deep ensemble" in rec.excluded
    assert len(rec.ranking) == 4 and all(len(group) == 1 for group in rec.ranking)
    assert [s.rank for group in rec.ranking for s in group] == [1, 2, 3, 4]


def test_overlapping_intervals_are_a_tie():
    close = _route("close second", ood=(0.895, 0.875), width=0.01, latency=1.1)
    rec = recommend(_results(SINGLE, OOD_WINNER, close), "ood")
    assert _names(rec) == [["duo", "close second"], ["single"]]
    assert [s.rank for s in rec.ranking[0]] == [1, 1]
    assert rec.best[0].score == pytest.approx((0.89, 0.885, 0.895))
    assert any(line.startswith("Tied for first (intervals overlap): duo, close second; the cheapest in latency is "
                               "close second") for line in rec.explanation)
    table = rec.format()
    assert "\n 1= duo " in table and "\n 1= close second " in table and "\n 2  single " in table


def test_calibration_ties_on_ece_are_split_by_nll():
    a = _route("a", ece=0.030, nll=0.30)
    b = _route("b", ece=0.032, nll=0.20)
    c = _route("c", ece=0.031, nll=0.205)
    rec = recommend(_results(a, b, c), "calibration")
    assert _names(rec) == [["b", "c"], ["a"]]  # one ECE tie, separated by NLL
    assert rec.ranking[0][0].secondary == pytest.approx((0.2, 0.195, 0.205))


def test_intervals_without_bounds_are_points():
    a, b = _route("a", aurc=0.01), _route("b", aurc=0.01)
    c = _route("c", aurc=0.012)
    for r in (a, b, c):
        r["metrics"]["test"]["aurc"] = [r["metrics"]["test"]["aurc"][0], None, None]
    rec = recommend(_results(a, b, c), "selective")
    assert _names(rec) == [["a", "b"], ["c"]]


def test_fidelity_warning_when_no_route_within_budget_keeps_it():
    rec = recommend(_results(*ALL), "ood", memory=1.0, latency=1.0)
    assert _names(rec) == [["single"], ["temperature"]]
    assert any("no route within budget keeps fidelity to the teacher >= 0.7" in w for w in rec.warnings)
    assert "Note: temperature has fidelity 0.65 < 0.7 (flagged)." in rec.explanation
    rec = recommend(_results(*ALL), "ood", memory=1.5, latency=1.5)
    assert not any("fidelity" in w for w in rec.warnings)


def test_warning_when_the_best_overlaps_the_teacher():
    near_teacher = _route("near teacher", ood=(0.945, 0.93), width=0.01)
    rec = recommend(_results(TEACHER, near_teacher, SINGLE), "ood", memory=2)
    assert any(w.startswith("near teacher's interval overlaps the teacher's (deep ensemble: 0.940") for w in rec.warnings)
    rec = recommend(_results(*ALL), "ood", memory=2)
    assert not any("overlaps the teacher" in w for w in rec.warnings)
    rec = recommend(_results(*ALL), "ood")  # the teacher itself wins: nothing to warn about
    assert rec.best[0].name == "deep ensemble" and not any("overlaps the teacher" in w for w in rec.warnings)


def test_no_teacher_and_missing_metrics():
    no_ood = _route("no ood")
    del no_ood["metrics"]["test"]["ood_far/auroc"]
    results = _results(SINGLE, no_ood)
    results["settings"]["teacher"] = None
    rec = recommend(results, "ood")
    assert _names(rec) == [["single"]]
    assert rec.excluded == {"no ood": ["no OOD AUROC on ood_far"]}
    assert rec.warnings == ["the results have no teacher route: fidelity could not be checked"]


def test_unmeasured_cost_does_not_fit_a_bound_on_it():
    unmeasured = _route("unmeasured", memory=None)
    assert check_budget(unmeasured, memory=2.0) == (False, ["peak memory not measured"])
    assert check_budget(unmeasured, latency=2.0) == (True, [])
    assert check_budget(unmeasured) == (True, [])


def test_bad_input():
    assert Priority("ood") is Priority.OOD and Priority.OOD == "ood" and isinstance(Priority.OOD, str)
    with pytest.raises(ValueError, match="unknown priority 'accuracy'; choose one of: ood, calibration, selective"):
        recommend(_results(*ALL), "accuracy")
    with pytest.raises(ValueError, match="the memory budget must be a positive number"):
        recommend(_results(*ALL), "ood", memory=0)
    results = _results(*ALL)
    results["data"]["ood_splits"] = []
    with pytest.raises(ValueError, match="no OOD sets"):
        recommend(results, "ood")


# ---------------------------------------------------------------------------------------------- the command


def _write(tmp_path: Path, results: dict[str, Any]) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    return path


def test_cli_prints_the_ranking_and_explanation(tmp_path, capsys):
    path = _write(tmp_path, _results(*ALL))
    assert read_results(path)["routes"][0]["name"] == "deep ensemble"
    assert main(["recommend", "--results", str(path), "--priority", "calibration", "--memory", "1.5",
                 "--latency", "1.5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("priority: calibration (ECE, then NLL, lower is better)")
    assert "\n 1  temperature " in out and "Recommended: temperature" in out
    assert "over budget: deep ensemble (peak memory 5.00x > 1.5x, latency 5.00x > 1.5x)" in out


def test_cli_uses_the_run_budget_by_default_and_exits_1_when_nothing_fits(tmp_path, capsys):
    path = _write(tmp_path, _results(*ALL, budget={"memory": 0.5, "latency": 2.0}))
    assert main(["recommend", "--results", str(tmp_path), "--priority", "ood"]) == 1
    assert "No route fits the budget" in capsys.readouterr().out
    assert main(["recommend", "--results", str(path), "--priority", "ood", "--memory", "1.0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["priority"] == "ood" and data["memory"] == 1.0 and data["latency"] == 2.0
    assert data["best"] == ["single"]


def test_cli_bad_input_is_one_line_and_status_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_UQ_DEBUG", raising=False)
    assert main(["recommend", "--results", str(tmp_path / "none.json"), "--priority", "ood"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hf-uq recommend: error: results file not found") and err.count("\n") == 1
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    assert main(["recommend", "--results", str(tmp_path / "bad.json"), "--priority", "ood"]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["recommend", "--results", str(tmp_path / "bad.json"), "--priority", "speed"])
    assert exit_info.value.code == 2
