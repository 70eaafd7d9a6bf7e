"""Uncertainty model cards: a model's evidence (metrics, cost, fidelity) as a Hub `README.md`.

[`model_card`] builds a `huggingface_hub.ModelCard` for one route of a `results.json` (docs/results_format.md):

- metadata: `model-index` entries (`huggingface_hub.EvalResult`) for accuracy, ECE, NLL, AURC, SAC@98 and CP-AUROC
  on the in-distribution split and on the pooled covariate shift, and OOD AUROC per OOD set, each with its metric
  arguments (`n_bins`, the SAC target `accuracy`, the `ood_set`); the values are the estimates of results.json,
  unrounded. An `hf_uq` block holds the route, its labels, splits, settings, cost and fidelity;
- body: rendered from `model_cards/template.md` (shipped in the wheel as `hf_uq/model_cards/template.md`): the route
  and its members, cost relative to the single model, fidelity to the teacher (flagged below the threshold), the
  quantization settings, the calibration split, the evaluation tables with intervals, the report's plots, intended
  use and what the uncertainty does not cover.

[`write_model_card`] writes `README.md` into a saved model's folder and copies the plots next to it (`plots/`,
linked relatively). [`minimal_model_card`] is the card of a model without results. [`card_metrics`] reads the
numbers back from a card's `model-index`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..evaluation.recommend import get_route, read_results
from ..evaluation.results_io import check_results
from .card_sections import (
    HF_UQ_MODEL_TYPES,
    SHIFT_SPLIT,
    calibration_section,
    cost_section,
    estimate,
    evaluation_section,
    fidelity_section,
    is_hf_uq_model,
    labels_line,
    md,
    plot_files,
    provenance_section,
    quantization_section,
    role_route,
    route_section,
    slug,
    usage_section,
)

__all__ = [
    "CARD_METRICS",
    "card_metrics",
    "infer_route",
    "minimal_model_card",
    "model_card",
    "save_card",
    "template_path",
    "uncertainty_eval_results",
    "write_model_card",
]

#: `(results.json key, model-index metric type, display name)` of the in-distribution metrics in `model-index`.
CARD_METRICS: tuple[tuple[str, str, str], ...] = (
    ("accuracy", "accuracy", "Accuracy"),
    ("ece", "ece", "ECE"),
    ("nll", "nll", "NLL"),
    ("aurc", "aurc", "AURC"),
    ("sac", "sac_at_98", "SAC@98"),
    ("cp_auroc", "cp_auroc", "CP-AUROC"),
)
OOD_METRIC_TYPE = "ood_auroc"
TASK = "image-classification"

def template_path() -> Path:
    """The card template: `hf_uq/model_cards/template.md` when installed, else the checkout's
    `model_cards/template.md`."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "model_cards" / "template.md", package.parent / "model_cards" / "template.md"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"hf_uq's model card template was not found (looked for model_cards/template.md in {package} and "
        f"{package.parent}); reinstall hf_uq"
    )


# ------------------------------------------------------------------------------------------------ helpers


def _plain(results: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-plain deep copy of an in-memory results dict: numpy values become Python numbers and lists, NaN
    becomes None (as in results.json), so that the card's YAML holds only plain values."""

    def default(value: Any) -> Any:
        for method in ("tolist", "item"):
            if hasattr(value, method):
                return getattr(value, method)()
        return os.fspath(value) if isinstance(value, os.PathLike) else str(value)

    return json.loads(json.dumps(results, default=default), parse_constant=lambda _: None)


def _resolve(results: Mapping[str, Any] | str | os.PathLike) -> tuple[dict[str, Any], Path | None]:
    """The results document and the folder its relative paths start from (None for an in-memory dict)."""
    if isinstance(results, Mapping):
        check_results(results)
        return _plain(results), None
    path = Path(results)
    folder = path if path.is_dir() else path.parent
    return read_results(path), folder


# ----------------------------------------------------------------------------------------- model-index


def uncertainty_eval_results(results: Mapping[str, Any], route: str | Mapping[str, Any]) -> list[EvalResult]:
    """
    The `model-index` entries of a route: [`CARD_METRICS`] on the in-distribution split and on the pooled shift
    (when the run has shift splits), and OOD AUROC per OOD set on the in-distribution split. Metrics whose
    estimate is null (undefined) are left out.

    Args:
        results (`Mapping`): the results document. route (`str` or `Mapping`): the route or its name.
    """
    route = get_route(results, route) if isinstance(route, str) else route
    data = results.get("data") or {}
    settings = results.get("settings") or {}
    id_split = data.get("id_split") or "test"
    name = str(data.get("name") or "unknown dataset")
    args = {"ece": {"n_bins": settings.get("n_bins", 15)}, "sac": {"accuracy": settings.get("sac_accuracy", 0.98)}}
    entries = []
    splits = [(id_split, name)]
    if SHIFT_SPLIT in (route.get("metrics") or {}):
        splits.append((SHIFT_SPLIT, f"{name} (covariate shift, pooled)"))
    for split, dataset_name in splits:
        metrics = route["metrics"].get(split) or {}
        common = {"task_type": TASK, "task_name": "Image Classification", "dataset_type": slug(name),
                  "dataset_name": dataset_name, "dataset_split": split}
        for key, metric_type, label in CARD_METRICS:
            value = estimate(metrics.get(key))
            if value is not None:
                entries.append(EvalResult(**common, metric_type=metric_type, metric_value=value,
                                          metric_name=label, metric_args=args.get(key)))
        if split != id_split:
            continue
        for ood in data.get("ood_splits") or []:
            value = estimate(metrics.get(f"{ood}/auroc"))
            if value is not None:
                entries.append(EvalResult(**common, metric_type=OOD_METRIC_TYPE, metric_value=value,
                                          metric_name=f"OOD AUROC ({ood})", metric_args={"ood_set": ood}))
    return entries


def card_metrics(card: ModelCard | Sequence[EvalResult]) -> dict[str, dict[str, float]]:
    """
    Read an hf_uq card's `model-index` back: `{split: {results.json metric key: value}}`, e.g.
    `{"test": {"ece": 0.021, "ood_near/auroc": 0.93, ...}, "shift": {...}}`.
    """
    eval_results = card if isinstance(card, Sequence) else (card.data.eval_results or [])
    by_type = {metric_type: key for key, metric_type, _ in CARD_METRICS}
    out: dict[str, dict[str, float]] = {}
    for result in eval_results:
        if result.metric_type == OOD_METRIC_TYPE:
            key = f"{(result.metric_args or {}).get('ood_set')}/auroc"
        elif result.metric_type in by_type:
            key = by_type[result.metric_type]
        else:
            continue
        out.setdefault(result.dataset_split or "", {})[key] = result.metric_value
    return out


# ------------------------------------------------------------------------------------------------- cards


def model_card(
    results: Mapping[str, Any] | str | os.PathLike,
    route: str,
    *,
    model_id: str | None = None,
    plots_dir: str | os.PathLike | None = None,
    model_dir: str | os.PathLike | None = None,
) -> ModelCard:
    """
    The uncertainty model card of one route of a benchmark or evaluate run.

    Args:
        results (`Mapping`, `str` or `os.PathLike`):
            The results document, or the path of a `results.json` (then its `plots/` folder is the default
            `plots_dir`).
        route (`str`):
            The route's name in `results["routes"]`.
        model_id (`str`, *optional*):
            The Hub repository id; names the card, its `model-index` and the usage snippet (default: the route name).
        plots_dir (`str` or `os.PathLike`, *optional*):
            Folder of the report's `*.png` plots, embedded as `plots/<name>.png` (relative links:
            [`write_model_card`] copies them next to the card).
        model_dir (`str` or `os.PathLike`, *optional*):
            The saved model's folder; its `config.json` lists the members on the card.

    Returns:
        `huggingface_hub.ModelCard`: the card. It carries `card.hf_uq_plots`, the plot files it links.

    Raises:
        `ValueError`: unknown route, or results that are not an hf_uq results document.
    """
    results, folder = _resolve(results)
    entry = get_route(results, route)
    if plots_dir is None and folder is not None:
        plots_dir = folder / "plots"
    model_dir = Path(model_dir) if model_dir is not None else None
    data, settings = results.get("data") or {}, results.get("settings") or {}
    fidelity_text, flagged = fidelity_section(results, entry)
    teacher = role_route(results, "teacher")
    metadata = {
        "route": entry["name"], "family": entry.get("family"), "role": entry.get("role"),
        "knob": entry.get("knob"), "quantization": entry.get("quantization"),
        "data": {k: data.get(k) for k in ("name", "id_split", "calibration_split", "ood_splits", "shift_splits",
                                          "labels")},
        "settings": {k: settings.get(k) for k in ("n_bins", "sac_accuracy", "bootstrap", "confidence",
                                                  "fidelity_threshold", "reference", "teacher")},
        "seeds": results.get("seeds"),
        "relative_cost": entry.get("relative"),
        "fidelity": entry.get("fidelity"),
        "results_schema": results.get("schema"),
    }
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag=TASK,
        tags=["hf_uq", "uncertainty", "image-classification", str(entry.get("family"))],
        model_name=model_id or entry["name"],
        eval_results=uncertainty_eval_results(results, entry) or None,
        hf_uq=metadata,
    )
    plots = plot_files(Path(plots_dir) if plots_dir is not None else None)
    flags = []
    if flagged:
        flags.append(f"> **Fidelity below {float(settings.get('fidelity_threshold') or 0.7):g}**: see "
                     "[Fidelity to the teacher](#fidelity-to-the-teacher).\n")
    if entry.get("fits_budget") is False:
        flags.append("> **Over the run's budget**: see [Cost](#cost-relative-to-the-single-model).\n")
    summary = (f"**{md(entry['name'])}** ({md(entry.get('family'))}) from an hf_uq run on "
               f"**{md(data.get('name', 'unknown data'))}**"
               + (f", compared with the teacher **{md(teacher['name'])}**" if teacher is not None else "")
               + ". Every number below has a bootstrap interval; uncertainty is judged by calibration, selective "
               "prediction and OOD detection, never by accuracy alone.")
    plots_md = ""
    if plots:
        plots_md = "## Plots\n\n" + "\n\n".join(
            f"![{md(p.stem.replace('_', ' '))}](plots/{p.name})" for p in plots) + "\n\n"
    limitations = [f"- OOD sets tested: {', '.join(f'`{md(o)}`' for o in data.get('ood_splits') or []) or 'none'}; "
                   f"shift splits tested: {', '.join(f'`{md(s)}`' for s in data.get('shift_splits') or []) or 'none'}."]
    n_test = (data.get("num_samples") or {}).get(data.get("id_split") or "test")
    accuracy = estimate(((entry.get("metrics") or {}).get(data.get("id_split") or "test") or {}).get("accuracy"))
    if n_test and accuracy is not None:
        limitations.append(f"- The `{md(data.get('id_split') or 'test')}` split has {n_test} samples per seed, "
                           f"about {round((1 - accuracy) * n_test)} of them misclassified by this model.")
    card = ModelCard.from_template(
        card_data,
        template_str=template_path().read_text(encoding="utf-8"),
        has_results=True,
        title=md(model_id or entry["name"]),
        summary=summary,
        flags="".join(flags),
        route_section=route_section(entry, model_dir, data.get("labels") or []),
        cost_section=cost_section(results, entry),
        fidelity_section=fidelity_text,
        quantization_section=quantization_section(entry),
        calibration_section=calibration_section(results, entry),
        evaluation_section=evaluation_section(results, entry),
        plots_section=plots_md,
        limitations_section="\n".join(limitations),
        usage_section=usage_section(model_id, is_hf_uq_model(entry, model_dir)),
        provenance_section=provenance_section(results),
    )
    _check_round_trip(card)
    card.hf_uq_plots = plots
    return card


def _check_round_trip(card: ModelCard) -> None:
    """Fail loudly if the written YAML would not parse back to the same metadata."""
    reparsed = ModelCard(str(card))
    if reparsed.data.to_dict() != card.data.to_dict():
        raise ValueError("the model card's metadata does not survive a YAML round trip")


def minimal_model_card(
    config: Any = None, *, model_id: str | None = None, model_dir: str | os.PathLike | None = None
) -> ModelCard:
    """
    The card of an hf_uq model without evaluation results: what it is and how to load it, with a note that its
    uncertainty has not been measured (no `model-index`).

    Args:
        config (`PretrainedConfig` or `dict`, *optional*):
            The model's config (for its type and architecture).
        model_id (`str`, *optional*):
            The Hub repository id, for the title and the usage snippet.
        model_dir (`str` or `os.PathLike`, *optional*):
            A saved model folder to read `config.json` from instead.
    """
    model_dir = Path(model_dir) if model_dir is not None else None
    if config is not None and not isinstance(config, Mapping):
        config = config.to_dict()
    if config is None and model_dir is not None and (model_dir / "config.json").is_file():
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    config = dict(config or {})
    model_type = config.get("model_type")
    hf_uq_model = model_type in HF_UQ_MODEL_TYPES or bool(config.get("auto_map"))
    architectures = ", ".join(map(md, config.get("architectures") or [])) or "unknown architecture"
    labels = list((config.get("id2label") or {}).values())
    route = f"`{md(model_type or 'unknown type')}` ({architectures})."
    if labels:
        route += " " + labels_line(labels)
    card_data = ModelCardData(library_name="transformers", pipeline_tag=TASK,
                              tags=["hf_uq", "uncertainty", "image-classification"])
    card = ModelCard.from_template(
        card_data, template_str=template_path().read_text(encoding="utf-8"), has_results=False,
        title=md(model_id or architectures), route_section=route, usage_section=usage_section(model_id, hf_uq_model),
    )
    card.hf_uq_plots = []
    return card


def infer_route(results: Mapping[str, Any], model_dir: str | os.PathLike, results_dir: str | os.PathLike) -> str:
    """
    The route whose saved model folder (`routes[i]["models"]`, relative to `results_dir`) is `model_dir`.

    Raises:
        `ValueError`: no route or several routes saved there; the message lists the routes to choose from.
    """
    target = Path(model_dir).resolve()
    matches = [r["name"] for r in results.get("routes", [])
               if any((Path(results_dir) / p).resolve() == target for p in (r.get("models") or {}).values())]
    if len(matches) == 1:
        return matches[0]
    names = [r["name"] for r in results.get("routes", [])]
    if matches:
        raise ValueError(f"{model_dir} is saved by several routes ({', '.join(map(repr, matches))}); "
                         "choose one with --route")
    raise ValueError(f"no route of the results saved its model in {model_dir}; choose one with --route: "
                     + ", ".join(map(repr, names)))


def write_model_card(
    model_dir: str | os.PathLike,
    results: Mapping[str, Any] | str | os.PathLike,
    route: str,
    *,
    plots_dir: str | os.PathLike | None = None,
    model_id: str | None = None,
) -> str:
    """
    Write the uncertainty card of `route` as `model_dir/README.md` and copy the plots to `model_dir/plots/`.

    Args:
        model_dir (`str` or `os.PathLike`):
            The saved model's folder (must exist).
        results (`Mapping`, `str` or `os.PathLike`):
            The results document or the path of `results.json` (its `plots/` is then the default `plots_dir`).
        route (`str`):
            The route's name.
        plots_dir (`str` or `os.PathLike`, *optional*):
            Folder of the report's `*.png` plots.
        model_id (`str`, *optional*):
            The Hub repository id the card will be pushed to.

    Returns:
        `str`: the path of the written `README.md`.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    card = model_card(results, route, model_id=model_id, plots_dir=plots_dir, model_dir=model_dir)
    return save_card(card, model_dir)


def save_card(card: ModelCard, folder: str | os.PathLike) -> str:
    """Save `card` as `folder/README.md` and copy the plots it links (`card.hf_uq_plots`) into `folder/plots/`."""
    folder = Path(folder)
    plots = getattr(card, "hf_uq_plots", None) or []
    if plots:
        (folder / "plots").mkdir(parents=True, exist_ok=True)
        for plot in plots:
            destination = folder / "plots" / Path(plot).name
            if Path(plot).resolve() != destination.resolve():
                shutil.copyfile(plot, destination)
    path = folder / "README.md"
    card.save(path)
    return str(path)
