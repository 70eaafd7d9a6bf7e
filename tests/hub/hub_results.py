"""Crafted `results.json` documents (docs/results_format.md) for the card and push tests (imported by them and by
conftest.py; a unique module name, since several test folders have a conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Names that stress YAML: quotes, colons, a leading dash, a hash, newlines, a line that reads as a YAML fence.
AWKWARD_LABELS = ['ze"ro', "one: 1", "it's", "- three", "# four", "fi\nve", "six\n---\nseven: 7", "<eight>"]
AWKWARD_DATASET = 'digits "embedded": v1\n---\nname: evil'


def _iv(estimate: float | None, width: float = 0.02) -> list[float | None]:
    if estimate is None:
        return [None, None, None]
    return [estimate, estimate - width, estimate + width]


def route(
    name: str,
    family: str,
    *,
    role: str | None = None,
    accuracy: float = 0.95,
    ece: float = 0.03,
    nll: float = 0.2,
    aurc: float = 0.01,
    sac: float = 0.8,
    cp_auroc: float | None = 0.9,
    ood: tuple[float, float] = (0.85, 0.7),
    fidelity: float | None = 0.8,
    memory: float | None = 1.0,
    latency: float | None = 1.0,
    width: float = 0.02,
    models: dict[str, str] | None = None,
    quantization: dict[str, Any] | None = None,
    shift: bool = True,
) -> dict[str, Any]:
    """One route entry; every metric an interval of half-width `width` around the given estimate."""

    def split_metrics(shifted: float) -> dict[str, Any]:
        out = {
            "accuracy": _iv(accuracy - shifted, width), "nll": _iv(nll + shifted, width),
            "brier": _iv(0.1 + shifted, width), "ece": _iv(ece + shifted / 2, width),
            "aurc": _iv(aurc + shifted / 10, width / 10), "e_aurc": _iv(aurc / 2, width / 10),
            "sac": _iv(sac - shifted, width), "cp_auroc": _iv(cp_auroc, width),
        }
        for ood_name, value in zip(("ood_near", "ood_far"), ood, strict=True):
            out[f"{ood_name}/auroc"] = _iv(value, width)
            out[f"{ood_name}/fpr_at_95"] = _iv(0.5, width)
            out[f"{ood_name}/aupr"] = _iv(value - 0.05, width)
        return out

    metrics = {"test": split_metrics(0.0)}
    if shift:
        metrics["shift"] = split_metrics(0.1)
        metrics["shift_noise_1"] = split_metrics(0.05)
        metrics["shift_blur_1"] = split_metrics(0.15)
    return {
        "name": name,
        "family": family,
        "knob": {"name": "sidekick size", "value": "s"} if family == "duo" else None,
        "quantization": quantization,
        "role": role,
        "models": models or {},
        "extra": {"temperatures": [[1.3, 2.1]]} if family == "duo" else {},
        "metrics": metrics,
        "fidelity": (
            {"test": _iv(fidelity, 0.05), "shift": _iv(fidelity, 0.05), "ood": _iv(fidelity, 0.05),
             "below_threshold": fidelity < 0.7}
            if fidelity is not None else {"test": None, "shift": None, "ood": None, "below_threshold": None}
        ),
        "budget": {"parameters": 123456, "flops": 1.2e6, "weight_bytes": 493824, "peak_memory_bytes": 2345678,
                   "latency_ms": {"1": {"p50": 0.8, "p99": 1.1}, "32": {"p50": 3.0, "p99": 3.6}}},
        "relative": {"parameters": 1.9, "flops": 1.15, "weight_bytes": 1.9, "peak_memory": memory,
                     "latency_p50": {"1": 1.2, "32": 1.1}, "latency_p99": {"1": 1.2, "32": 1.2},
                     "latency": latency},
        "fits_budget": None,
    }


def results_document(routes: list[dict[str, Any]], *, labels: list[str] | None = None,
                     dataset: str = "digits (embedded)") -> dict[str, Any]:
    return {
        "schema": "hf_uq.results/1",
        "command": "hf-uq benchmark --quick",
        "created": "2026-11-29T21:30:00+00:00",
        "versions": {"python": "3.11.9", "hf_uq": "0.1.0", "torch": "2.5", "optimum-quanto": None},
        "seeds": [0, 1, 2],
        "settings": {"bootstrap": 1000, "confidence": 0.95, "n_bins": 15, "sac_accuracy": 0.98,
                     "fidelity_threshold": 0.7, "budget": None, "latency_batch_sizes": [1, 32],
                     "reference": "single", "teacher": "deep ensemble", "quick": True},
        "data": {"name": dataset, "id_split": "test", "calibration_split": "validation",
                 "ood_splits": ["ood_near", "ood_far"], "shift_splits": ["shift_noise_1", "shift_blur_1"],
                 "labels": labels or [str(i) for i in range(8)],
                 "num_samples": {"test": 434, "validation": 145, "ood_near": 359, "ood_far": 400}},
        "routes": routes,
        "predictions": "predictions",
    }


def standard_routes(duo_models: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [
        route("deep ensemble", "teacher", role="teacher", accuracy=0.98, ece=0.02, ood=(0.93, 0.9),
              fidelity=1.0, memory=5.0, latency=5.0),
        route("single", "single", role="reference", ood=(0.85, 0.67), fidelity=0.6),
        route("Asymmetric Duo (sidekick s)", "duo", ood=(0.9, 0.85), fidelity=0.82, memory=1.15, latency=1.3,
              models=duo_models),
        route("BatchEnsemble int8", "batch_ensemble", ood=(0.88, 0.8), fidelity=0.55, memory=0.6, latency=2.0,
              quantization={"backend": "quanto", "weights": "int8", "activations": None,
                            "skipped": ["classifier"]}),
    ]


def write_results(folder: Path, document: dict[str, Any], plots: tuple[str, ...] = ()) -> Path:
    """Write results.json (and fake PNG plots under plots/) into `folder`; returns the results.json path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "results.json"
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    if plots:
        (folder / "plots").mkdir(exist_ok=True)
        for name in plots:
            (folder / "plots" / name).write_bytes(b"\x89PNG\r\n\x1a\n" + name.encode())
    return path
