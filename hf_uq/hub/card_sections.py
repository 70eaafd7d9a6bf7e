"""The Markdown body of an uncertainty model card: one function per section of `model_cards/template.md`.

Used by [`~hf_uq.hub.cards.model_card`]; every function reads a results document (docs/results_format.md) and
returns Markdown. Text from the results (route, dataset, label and split names) goes through [`md`], which keeps it
on one line and out of table syntax and HTML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..evaluation.recommend import as_interval
from ..evaluation.scoring import format_interval, format_si

SHIFT_SPLIT = "shift"

FAMILIES = {
    "teacher": "Deep ensemble (the teacher): independently trained members whose averaged prediction sets the "
    "uncertainty quality the cheaper routes are measured against, at the cost of every member.",
    "single": "A single model: the cost reference every ratio on this card is relative to.",
    "temperature": "Temperature scaling: one model whose logits are divided by a temperature fitted on the "
    "calibration split; it fixes over- or under-confidence but adds no diversity.",
    "mc_dropout": "MC dropout: dropout stays on at inference and several stochastic forward passes are averaged.",
    "duo": "Asymmetric Duo (arXiv 2505.18636): a large model and a small sidekick with its own errors, their "
    "logits fused with one temperature each; the cost is one large plus one small forward pass.",
    "batch_ensemble": "BatchEnsemble (Wen et al. 2020): members share slow weights and differ by rank-1 fast "
    "weights, optionally only in the last blocks; parameters stay ~1x, compute grows for the ensembled blocks.",
    "dirichlet": "Ensemble distribution distillation (Malinin et al. 2020): one network predicts a Dirichlet over "
    "class probabilities, fitted to the teacher's members, in exactly one forward pass.",
    "sidekick": "The small sidekick of a duo, on its own.",
    "user": "A model supplied by the user.",
}
HF_UQ_MODEL_TYPES = frozenset(
    {"duo", "deep_ensemble", "temperature_scaled", "dirichlet_student", "batch_ensemble_vit"}
)
HF_UQ_FAMILIES = frozenset({"teacher", "temperature", "duo", "batch_ensemble", "dirichlet"})
TABLE_METRICS = (  # (key, label, scale) of the body's in-distribution table
    ("accuracy", "Accuracy", 1.0), ("nll", "NLL", 1.0), ("brier", "Brier", 1.0), ("ece", "ECE", 1.0),
    ("aurc", "AURC ×100", 100.0), ("e_aurc", "E-AURC ×100", 100.0), ("sac", "SAC", 1.0),
    ("cp_auroc", "CP-AUROC", 1.0),
)


def slug(text: str) -> str:
    return re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9_.\-/]+", "-", text)).strip("-/") or "dataset"


def md(text: Any) -> str:
    """Text safe inside a Markdown table cell or a line: one line, no pipes or HTML tags."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def fmt(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    interval = as_interval(value)
    return format_interval(interval, scale, digits)


def estimate(value: Any) -> float | None:
    return as_interval(value)[0]


def human(value: Any, unit: str = "") -> str:
    return "n/a" if value is None else format_si(value, unit, sep=" ")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def role_route(results: Mapping[str, Any], role: str) -> dict[str, Any] | None:
    routes = results.get("routes", [])
    found = next((r for r in routes if r.get("role") == role), None)
    name = (results.get("settings") or {}).get(role)
    if found is None and name:
        found = next((r for r in routes if r.get("name") == name), None)
    return found


# ---------------------------------------------------------------------------------------------- sections


def members(model_dir: Path | None) -> list[str]:
    """One line per member read from a saved model's `config.json`."""
    if model_dir is None or not (model_dir / "config.json").is_file():
        return []
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))

    def describe(sub: Mapping[str, Any]) -> str:
        parts = [f"`{md(sub.get('model_type', '?'))}`"]
        for key in ("architecture", "hidden_size", "num_hidden_layers", "image_size"):
            if sub.get(key) is not None:
                parts.append(f"{key.replace('_', ' ')} {md(sub[key])}")
        return ", ".join(parts)

    lines = [f"- saved as `{md(config.get('model_type', '?'))}` ({', '.join(map(md, config.get('architectures') or []))})"]
    for key, value in config.items():
        if key.endswith("_config") and isinstance(value, Mapping):
            lines.append(f"- {md(key[: -len('_config')])}: {describe(value)}")
        elif key == "member_configs" and isinstance(value, list):
            lines.extend(f"- member {i}: {describe(v)}" for i, v in enumerate(value) if isinstance(v, Mapping))
    for key in ("ensemble_size", "ensemble_layers", "temperature", "temperatures", "uncertainty_score"):
        if config.get(key) is not None:
            lines.append(f"- {key.replace('_', ' ')}: `{md(json.dumps(config[key]))}`")
    return lines


def labels_line(labels: Sequence[Any]) -> str:
    shown = ", ".join(f"`{md(label)}`" for label in labels[:50])
    return f"Classes ({len(labels)}): {shown}{', ...' if len(labels) > 50 else ''}."


def route_section(route: Mapping[str, Any], model_dir: Path | None, labels: Sequence[Any] = ()) -> str:
    family = str(route.get("family"))
    lines = [f"**{md(route['name'])}**, family `{md(family)}`. {FAMILIES.get(family, '')}".rstrip()]
    knob = route.get("knob")
    if isinstance(knob, Mapping) and knob.get("name"):
        lines.append(f"\nSwept parameter: {md(knob['name'])} = `{md(knob.get('value'))}`.")
    if route.get("role"):
        lines.append(f"\nRole in the run: {md(route['role'])}.")
    details = members(model_dir)
    extra = route.get("extra") or {}
    details.extend(f"- {md(k)}: `{md(json.dumps(v))}`" for k, v in extra.items())
    if details:
        lines.append("\n" + "\n".join(details))
    if labels:
        lines.append("\n" + labels_line(labels))
    return "\n".join(lines)


def cost_section(results: Mapping[str, Any], route: Mapping[str, Any]) -> str:
    settings = results.get("settings") or {}
    rows = []
    seen = set()
    for other in (route, role_route(results, "reference"), role_route(results, "teacher")):
        if other is None or other["name"] in seen:
            continue
        seen.add(other["name"])
        budget, rel = other.get("budget") or {}, other.get("relative") or {}
        latency = budget.get("latency_ms") or {}
        p99 = ", ".join(f"bs {bs}: {human((v or {}).get('p99'), 'ms')}" for bs, v in latency.items()) or "n/a"

        def cell(value: Any, ratio: Any, unit: str = "") -> str:
            text = human(value, unit)
            return f"{text} ({ratio:.2f}x)" if isinstance(ratio, (int, float)) else text

        rows.append([
            md(other["name"]) + (" (this model)" if other is route else f" ({md(other.get('role'))})"),
            cell(budget.get("parameters"), rel.get("parameters")),
            cell(budget.get("flops"), rel.get("flops"), "FLOPs"),
            cell(budget.get("weight_bytes"), rel.get("weight_bytes"), "B"),
            cell(budget.get("peak_memory_bytes"), rel.get("peak_memory"), "B"),
            f"{p99} ({rel['latency']:.2f}x)" if isinstance(rel.get("latency"), (int, float)) else p99,
        ])
    reference = md(settings.get("reference") or "the single model")
    text = table(["route", "parameters", "FLOPs / image", "weights", "peak memory", "latency p99"], rows)
    text += (f"\n\nRatios are relative to **{reference}**. Latency ratio = the worst p99 ratio over the batch "
             "sizes, the number a latency budget bounds; peak memory is measured at the largest batch size.")
    if route.get("fits_budget") is not None:
        budget = settings.get("budget") or {}
        verdict = "fits" if route["fits_budget"] else "does **not** fit"
        text += (f"\n\nThis model {verdict} the run's budget (peak memory <= {budget.get('memory')}x, "
                 f"latency <= {budget.get('latency')}x).")
    return text


def fidelity_section(results: Mapping[str, Any], route: Mapping[str, Any]) -> tuple[str, bool]:
    """The fidelity section and whether it is flagged."""
    settings = results.get("settings") or {}
    threshold = float(settings.get("fidelity_threshold") or 0.7)
    teacher = role_route(results, "teacher")
    fidelity = route.get("fidelity") or {}
    if teacher is None or estimate(fidelity.get("test")) is None:
        return "Not measured: the run had no teacher ensemble to compare this model's uncertainty with.", False
    if teacher is route:
        return "This model is the teacher: the reference every other route's fidelity is measured against.", False
    rows = [[split, fmt(fidelity.get(split))] for split in ("test", "shift", "ood") if fidelity.get(split)]
    text = (f"Spearman rank correlation between this model's uncertainty and the teacher's "
            f"(**{md(teacher['name'])}**) on the same inputs; {threshold:g} or more means the model ranks inputs "
            "by trustworthiness much like the ensemble does.\n\n" + table(["inputs", "fidelity"], rows))
    flagged = bool(fidelity.get("below_threshold")) or (estimate(fidelity.get("test")) or 0.0) < threshold
    if flagged:
        text += (f"\n\n> **Warning: fidelity below {threshold:g}.** This model's uncertainty does not rank inputs like "
                 "the teacher's: it does not carry the ensemble's diversity. Do not rely on it as a stand-in for "
                 "the ensemble's uncertainty.")
    return text, flagged


def quantization_section(route: Mapping[str, Any]) -> str:
    quant = route.get("quantization")
    if not quant:
        return "None: the weights are stored at full precision."
    lines = [f"- {key}: `{md(json.dumps(value) if not isinstance(value, str) else value)}`"
             for key, value in quant.items()]
    return "Post-training quantization:\n\n" + "\n".join(lines)


def calibration_section(results: Mapping[str, Any], route: Mapping[str, Any]) -> str:
    data = results.get("data") or {}
    split = data.get("calibration_split")
    n = (data.get("num_samples") or {}).get(split)
    if not split:
        return "No calibration split is recorded for this run."
    text = (f"Temperatures and every other post-hoc fit used the `{md(split)}` split"
            + (f" ({n} samples)" if n else "") + "; the evaluation splits below were never used for fitting.")
    temps = (route.get("extra") or {}).get("temperatures")
    if temps is not None:
        text += f" Fitted temperatures (per seed): `{md(json.dumps(temps))}`."
    return text


def evaluation_section(results: Mapping[str, Any], route: Mapping[str, Any]) -> str:
    data, settings = results.get("data") or {}, results.get("settings") or {}
    id_split = data.get("id_split") or "test"
    metrics = route.get("metrics") or {}
    columns = [(route, id_split, "this model")]
    if SHIFT_SPLIT in metrics:
        columns.append((route, SHIFT_SPLIT, "this model, shift"))
    for role in ("reference", "teacher"):
        other = role_route(results, role)
        if other is not None and other is not route:
            columns.append((other, id_split, f"{md(other['name'])} ({role})"))
    rows = [[label] + [fmt((c[0].get("metrics") or {}).get(c[1], {}).get(key), scale) for c in columns]
            for key, label, scale in TABLE_METRICS]
    confidence = settings.get("confidence", 0.95)
    text = (f"On **{md(data.get('name', 'the evaluation data'))}**, split `{md(id_split)}`: estimate "
            f"[{confidence:.0%} bootstrap interval] over seeds {md(results.get('seeds'))}; ECE with "
            f"{settings.get('n_bins', 15)} equal-width bins, SAC at {settings.get('sac_accuracy', 0.98):g} "
            "selective accuracy.\n\n" + table(["metric"] + [c[2] for c in columns], rows))
    teacher = role_route(results, "teacher")
    oods = data.get("ood_splits") or []
    if oods:
        rows = []
        for ood in oods:
            row = [md(ood)] + [fmt(metrics.get(id_split, {}).get(f"{ood}/{m}")) for m in ("auroc", "fpr_at_95", "aupr")]
            if teacher is not None and teacher is not route:
                row.append(fmt((teacher.get("metrics") or {}).get(id_split, {}).get(f"{ood}/auroc")))
            rows.append(row)
        header = ["OOD set", "AUROC", "FPR@95", "AUPR"] + (["teacher AUROC"] if len(rows[0]) > 4 else [])
        text += ("\n\n### Out-of-distribution detection\n\nThe model's `uncertainty` separating "
                 f"`{md(id_split)}` (negative) from each OOD set (positive).\n\n" + table(header, rows))
    shifts = [s for s in data.get("shift_splits") or [] if s in metrics]
    if shifts:
        rows = [[md(s)] + [fmt(metrics[s].get(k), scale) for k, _, scale in TABLE_METRICS[:5]] for s in shifts]
        text += ("\n\n### Covariate shift, per split\n\n"
                 + table(["split"] + [label for _, label, _ in TABLE_METRICS[:5]], rows))
    return text


def plot_files(plots_dir: Path | None) -> list[Path]:
    if plots_dir is None or not Path(plots_dir).is_dir():
        return []
    return sorted(Path(plots_dir).glob("*.png"))


def usage_section(model_id: str | None, hf_uq_model: bool) -> str:
    repo = model_id or "path/to/this/folder"
    lines = ["```python", "from transformers import AutoImageProcessor, AutoModelForImageClassification", "",
             f'processor = AutoImageProcessor.from_pretrained("{repo}", trust_remote_code=True)',
             f'model = AutoModelForImageClassification.from_pretrained("{repo}", trust_remote_code=True)',
             'outputs = model(**processor(images, return_tensors="pt"))']
    if hf_uq_model:
        lines += ["outputs.uncertainty  # (batch,), higher = less trustworthy", "```", "",
                  "`trust_remote_code=True` loads the model's code from this repository, so hf_uq need not be "
                  "installed; with hf_uq installed the same classes load without it."]
    else:
        lines += ["uncertainty = 1 - outputs.logits.softmax(-1).max(-1).values  # higher = less trustworthy", "```"]
    return "\n".join(lines)


def is_hf_uq_model(route: Mapping[str, Any] | None, model_dir: Path | None) -> bool:
    if model_dir is not None and (model_dir / "config.json").is_file():
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        return config.get("model_type") in HF_UQ_MODEL_TYPES or bool(config.get("auto_map"))
    return route is not None and route.get("family") in HF_UQ_FAMILIES


def provenance_section(results: Mapping[str, Any]) -> str:
    versions = results.get("versions") or {}
    settings = results.get("settings") or {}
    items = [("command", results.get("command")), ("created", results.get("created")),
             ("seeds", results.get("seeds")), ("bootstrap resamples", settings.get("bootstrap")),
             ("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v))]
    return "\n".join(f"- {label}: `{md(value)}`" for label, value in items if value not in (None, "", []))
