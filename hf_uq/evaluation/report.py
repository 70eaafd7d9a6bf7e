"""The human side of a benchmark run: `report.md`, a self-contained `report.html` and the PNGs under `plots/`.

[`write_report`] reads a `results.json` document (docs/results_format.md) and, optionally, the routes' saved
predictions, and writes:

- tables: the headline (every route's in-distribution and OOD metrics with 95% intervals), the covariate shift
  (pooled shift split), the diversity fidelity to the teacher (routes below the threshold flagged), and the budget
  (parameters, FLOPs, weights, memory, latency, all relative to the reference route);
- figures ([`hf_uq.evaluation.plots`]): reliability diagrams, risk-coverage curves, OOD score histograms (these
  three need predictions) and the cost-vs-uncertainty Pareto chart (results alone suffice).

`report.html` inlines its CSS and every figure (base64 PNG data URIs): it opens offline and can be mailed alone.
Figure files have fixed names ([`PLOT_FILES`]) so model cards can embed them.
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..functional.bootstrap import BootstrapInterval
from ..functional.fidelity import FIDELITY_THRESHOLD
from .plots import PLOT_FILES, draw_figures, id_metrics, ood_split_names
from .predict import Predictions
from .scoring import HIGHER_IS_BETTER, format_interval, format_si

__all__ = ["PLOT_FILES", "write_report"]

_CAPTIONS = {
    "pareto": "Cost vs uncertainty. Each route is numbered as in the legend; the grey staircase is the Pareto "
              "front (no other route is both cheaper and better). Costs are relative to the reference route.",
    "reliability": "Reliability diagrams on the in-distribution split, seeds pooled. A calibrated model's bars "
                   "follow the diagonal; hatched red is the gap between accuracy and confidence.",
    "risk_coverage": "Risk-coverage curves: the error rate among the most certain fraction of samples. Lower is "
                     "better; the area under each curve is the AURC.",
    "ood_histograms": "Uncertainty scores on the in-distribution split vs each OOD split, seeds pooled. "
                      "Less overlap means better OOD detection.",
}
_NA = "–"


# ------------------------------------------------------------------------------------------ document model


@dataclass
class _Table:
    headers: list[str]
    rows: list[list[str]]
    bold: set[tuple[int, int]] = field(default_factory=set)  # (row, column) whose estimate is bold
    row_class: dict[int, str] = field(default_factory=dict)  # HTML class of a row ("warn", "ref", ...)


# a block is ("h1" | "h2" | "p" | "code", text), ("kv", [(key, value)]), ("table", _Table) or ("plot", name)
_Block = tuple[str, Any]


# ------------------------------------------------------------------------------------------ validation


def _check_results(results: Any) -> tuple[str, list[Mapping[str, Any]]]:
    if not isinstance(results, Mapping):
        raise ValueError(f"`results` must be a dict (a parsed results.json), got {type(results).__name__}")
    if "routes" not in results:
        raise ValueError("`results` has no 'routes': pass a results.json document (docs/results_format.md)")
    routes = results["routes"]
    if isinstance(routes, (str, bytes)) or not isinstance(routes, Sequence) or not routes:
        raise ValueError("`results['routes']` must be a non-empty list of routes")
    data = results.get("data") or {}
    id_split = str(data.get("id_split") or "test")
    names: set[str] = set()
    for k, route in enumerate(routes):
        if not isinstance(route, Mapping) or not isinstance(route.get("name"), str) or not route["name"]:
            raise ValueError(f"route {k} of `results['routes']` must be a dict with a non-empty 'name'")
        name = route["name"]
        if name in names:
            raise ValueError(f"route name {name!r} appears twice in `results['routes']`")
        names.add(name)
        metrics = route.get("metrics")
        if not isinstance(metrics, Mapping) or not isinstance(id_metrics(route, id_split), Mapping):
            raise ValueError(f"route {name!r} has no metrics for the id split {id_split!r}")
        for split, values in metrics.items():
            if not isinstance(values, Mapping):
                raise ValueError(f"route {name!r}: metrics of split {split!r} must be a dict, got {values!r}")
            for metric, value in values.items():
                _interval(value, f"route {name!r} metric {split}/{metric}")
        fid = route.get("fidelity")
        for split in ("test", "shift", "ood") if isinstance(fid, Mapping) else ():
            _interval(fid.get(split), f"route {name!r} fidelity {split}")
    return id_split, list(routes)


def _interval(value: Any, where: str) -> BootstrapInterval | None:
    """A `[estimate, low, high]` list (JSON nulls allowed) as a NaN-padded interval; `None` when absent."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 3:
        raise ValueError(f"{where} must be [estimate, low, high], got {value!r}")
    try:
        return BootstrapInterval(*(float("nan") if v is None else float(v) for v in value))
    except (TypeError, ValueError):
        raise ValueError(f"{where} must hold numbers or nulls, got {value!r}") from None


def _check_predictions(
    predictions: Any, routes: list[Mapping[str, Any]], id_split: str
) -> dict[str, list[Mapping[str, Predictions]]]:
    if predictions is None:
        return {}
    if not isinstance(predictions, Mapping):
        raise ValueError(f"`predictions` must map route names to per-seed splits, got {type(predictions).__name__}")
    names = {route["name"] for route in routes}
    checked = {}
    for name, seeds in predictions.items():
        if name not in names:
            raise ValueError(f"`predictions` has route {name!r}, which `results['routes']` does not name")
        if isinstance(seeds, Mapping) or not isinstance(seeds, Sequence) or not seeds:
            raise ValueError(f"`predictions[{name!r}]` must be a non-empty list (one {{split: Predictions}} per seed)")
        for k, splits in enumerate(seeds):
            if not isinstance(splits, Mapping) or not isinstance(splits.get(id_split), Predictions):
                raise ValueError(f"`predictions[{name!r}][{k}]` has no Predictions for the id split {id_split!r}")
            bad = [s for s, p in splits.items() if not isinstance(p, Predictions)]
            if bad:
                raise ValueError(f"`predictions[{name!r}][{k}][{bad[0]!r}]` is not a Predictions")
        checked[name] = list(seeds)
    return {route["name"]: checked[route["name"]] for route in routes if route["name"] in checked}


# ------------------------------------------------------------------------------------------ formatting


def _cell(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    interval = _interval(value, "value")
    if interval is None or not np.isfinite(interval.estimate):
        return _NA
    return format_interval(interval, scale=scale, digits=digits)


def _estimate(value: Any) -> float:
    interval = _interval(value, "value")
    return float("nan") if interval is None else interval.estimate


def _si(value: Any, unit: str = "") -> str:
    return _NA if value is None else format_si(value, unit)


def _bytes(value: Any) -> str:
    if value is None:
        return _NA
    v = float(value)
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if v >= factor:
            return f"{v / factor:.3g} {unit}"
    return f"{v:.0f} B"


def _ms(value: Any) -> str:
    if value is None:
        return _NA
    v = float(value)
    return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"


def _with_ratio(text: str, ratio: Any) -> str:
    if text == _NA or ratio is None:
        return text
    return f"{text} ({float(ratio):.2f}×)"


def _route_label(route: Mapping[str, Any]) -> str:
    return f"{route['name']} ({route['role']})" if route.get("role") in ("teacher", "reference") else route["name"]


def _role_class(route: Mapping[str, Any]) -> str:
    return {"teacher": "teacher", "reference": "ref"}.get(str(route.get("role")), "")


def _bold_best(table: _Table, columns: Sequence[tuple[int, str]], estimates: list[list[float]]) -> None:
    """Bold the best estimate of each column (`columns`: table column, metric name for its direction)."""
    values = np.asarray(estimates, dtype=np.float64).reshape(len(table.rows), -1)
    for j, (column, metric) in enumerate(columns):
        finite = np.isfinite(values[:, j])
        if finite.sum() < 2:
            continue
        best = np.nanmax(values[:, j]) if HIGHER_IS_BETTER[metric.split("/")[-1]] else np.nanmin(values[:, j])
        for i in np.flatnonzero(finite & (values[:, j] == best)):
            table.bold.add((int(i), column))


# ------------------------------------------------------------------------------------------ sections


def _id_columns(settings: Mapping[str, Any], shift: bool) -> list[tuple[str, str, float, int]]:
    sac = round(float(settings.get("sac_accuracy") or 0.98) * 100, 2)
    columns = [("accuracy", "Accuracy ↑", 1.0, 3), ("nll", "NLL ↓", 1.0, 3), ("ece", "ECE ↓", 1.0, 3),
               ("aurc", "AURC×100 ↓", 100.0, 2)]
    if shift:
        columns.append(("e_aurc", "E-AURC×100 ↓", 100.0, 2))
    return columns + [("sac", f"SAC@{sac:g} ↑", 1.0, 3), ("cp_auroc", "CP-AUROC ↑", 1.0, 3)]


def _metric_table(routes: list[Mapping[str, Any]], split: str, columns: list[tuple[str, str, float, int]],
                  id_split: str | None = None) -> _Table:
    """`split`'s metrics of every route (the id split's, wherever they are stored, when `split == id_split`)."""
    table = _Table(["Route"] + [header for _, header, _, _ in columns], [])
    estimates = []
    for i, route in enumerate(routes):
        values = (id_metrics(route, split) if split == id_split else route["metrics"].get(split)) or {}
        table.rows.append([_route_label(route)] + [_cell(values.get(k), s, d) for k, _, s, d in columns])
        estimates.append([_estimate(values.get(k)) for k, _, _, _ in columns])
        if _role_class(route):
            table.row_class[i] = _role_class(route)
    _bold_best(table, [(j + 1, k) for j, (k, _, _, _) in enumerate(columns)], estimates)
    return table


def _header(results: Mapping[str, Any], id_split: str) -> list[_Block]:
    settings, data = results.get("settings") or {}, results.get("data") or {}
    command = str(results.get("command") or "hf-uq")
    kind = "evaluation" if command.split()[1:2] == ["evaluate"] else "benchmark"
    seeds = results.get("seeds") or []
    blocks: list[_Block] = [("h1", f"hf_uq {kind} report"), ("code", command)]
    budget = settings.get("budget")
    budget_text = ", ".join(f"{k} ≤ {v:g}×" for k, v in budget.items() if v is not None) if budget else "none"
    blocks.append(("kv", [
        ("Created", str(results.get("created") or _NA)),
        ("Seeds", ", ".join(map(str, seeds)) or _NA),
        ("Reference route", str(settings.get("reference") or _NA)),
        ("Teacher route", str(settings.get("teacher") or "none")),
        ("Intervals", f"{(settings.get('confidence') or 0.95) * 100:g}% bootstrap, {settings.get('bootstrap', _NA)} "
                      "resamples (seed-stratified; metrics are means over seeds)"),
        ("Budget", budget_text),
        ("Versions", ", ".join(f"{k} {v if v is not None else '(not installed)'}"
                               for k, v in (results.get("versions") or {}).items()) or _NA),
    ]))
    samples = data.get("num_samples") or {}
    labels = data.get("labels") or []
    blocks += [("h2", "Data"), ("kv", [
        ("Dataset", str(data.get("name") or _NA)),
        ("In-distribution split", f"{id_split} (calibration: {data.get('calibration_split') or _NA})"),
        ("OOD splits", ", ".join(data.get("ood_splits") or []) or "none"),
        ("Shift splits", ", ".join(data.get("shift_splits") or []) or "none"),
        ("Classes", f"{len(labels)}" + (f" ({', '.join(map(str, labels))})" if 0 < len(labels) <= 20 else "")),
        ("Samples per split (first seed)", ", ".join(f"{k} {v}" for k, v in samples.items()) or _NA),
    ])]
    return blocks


def _headline(results: Mapping[str, Any], routes: list[Mapping[str, Any]], id_split: str) -> list[_Block]:
    settings, data = results.get("settings") or {}, results.get("data") or {}
    columns = _id_columns(settings, shift=False)
    columns += [(f"{ood}/auroc", f"AUROC {ood} ↑", 1.0, 3) for ood in ood_split_names(data, routes, id_split)]
    return [("h2", f"Headline ({id_split} split)"),
            ("p", "Every route on the in-distribution split, with 95% bootstrap intervals in brackets; the best "
                  "estimate of each column is bold. OOD AUROC uses each route's own uncertainty score."),
            ("table", _metric_table(routes, id_split, columns, id_split))]


def _shift(results: Mapping[str, Any], routes: list[Mapping[str, Any]]) -> list[_Block]:
    blocks: list[_Block] = [("h2", "Covariate shift (all shift splits pooled)")]
    if not any(route["metrics"].get("shift") for route in routes):
        return blocks + [("p", "This run has no covariate-shift splits.")]
    columns = _id_columns(results.get("settings") or {}, shift=True)
    blocks += [("p", "Selective metrics rest on many more errors here than on the clean split."),
               ("table", _metric_table(routes, "shift", columns))]
    splits = [s for s in (results.get("data") or {}).get("shift_splits") or []
              if any(s in route["metrics"] for route in routes)]
    if splits:
        table = _Table(["Route"] + splits, [])
        for route in routes:
            table.rows.append([_route_label(route)] + [
                _cell([_estimate((route["metrics"].get(s) or {}).get("accuracy")), None, None]) for s in splits])
        blocks += [("p", "Accuracy on each shift split (estimates):"), ("table", table)]
    return blocks


def _fidelity(results: Mapping[str, Any], routes: list[Mapping[str, Any]]) -> list[_Block]:
    settings = results.get("settings") or {}
    threshold = float(settings.get("fidelity_threshold") or FIDELITY_THRESHOLD)
    blocks: list[_Block] = [("h2", "Diversity fidelity to the teacher")]
    if not any(isinstance(route.get("fidelity"), Mapping) for route in routes):
        return blocks + [("p", "No teacher route in this run: fidelity was not measured.")]
    blocks.append(("p", "Spearman correlation between each route's uncertainty and that of the teacher, "
                        f"{settings.get('teacher') or 'the teacher route'}, per split. Below {threshold:g} on the "
                        "test split the teacher's diversity is considered lost: those rows are flagged ⚠."))
    table = _Table(["Route", "Test", "Shift", "OOD", "Status"], [])
    for i, route in enumerate(routes):
        fid = route.get("fidelity")
        if not isinstance(fid, Mapping):
            table.rows.append([_route_label(route), _NA, _NA, _NA, _NA])
            continue
        cells = [_cell(fid.get(s), digits=2) for s in ("test", "shift", "ood")]
        test = _estimate(fid.get("test"))
        below = bool(fid.get("below_threshold")) or (np.isfinite(test) and test < threshold)
        weak = [s for s in ("shift", "ood") if _estimate(fid.get(s)) < threshold]
        if route.get("role") == "teacher":
            status = "teacher"
        elif below:
            status, table.row_class[i] = f"⚠ < {threshold:g}", "warn"
        elif weak:
            status = f"ok on test; {' and '.join(weak)} < {threshold:g}"
        else:
            status = "ok" if np.isfinite(test) else _NA
        table.rows.append([_route_label(route)] + cells + [status])
    return blocks + [("table", table)]


def _budget(results: Mapping[str, Any], routes: list[Mapping[str, Any]]) -> list[_Block]:
    settings = results.get("settings") or {}
    blocks: list[_Block] = [("h2", "Budget")]
    if not any(isinstance(route.get("budget"), Mapping) for route in routes):
        return blocks + [("p", "No cost measurements in this run.")]
    sizes = [str(b) for b in settings.get("latency_batch_sizes") or []] or sorted(
        {b for route in routes for b in ((route.get("budget") or {}).get("latency_ms") or {})}, key=int)
    limits = settings.get("budget")
    headers = ["Route"] + (["Fits budget"] if limits else [])
    headers += ["Parameters", "FLOPs/image", "Weights", "Peak memory"]
    table = _Table(headers + [f"{q} @ batch {b}" for b in sizes for q in ("P50", "P99")], [])
    for i, route in enumerate(routes):
        cost, rel = route.get("budget") or {}, route.get("relative") or {}
        row = [_route_label(route)] + ([_fits(route, limits)] if limits else [])
        row += [_with_ratio(_si(cost.get("parameters")), rel.get("parameters")),
               _with_ratio(_si(cost.get("flops")), rel.get("flops")),
               _with_ratio(_bytes(cost.get("weight_bytes")), rel.get("weight_bytes")),
               _with_ratio(_bytes(cost.get("peak_memory_bytes")), rel.get("peak_memory"))]
        for b in sizes:
            latency = (cost.get("latency_ms") or {}).get(b) or {}
            for q in ("p50", "p99"):
                row.append(_with_ratio(_ms(latency.get(q)), (rel.get(f"latency_{q}") or {}).get(b)))
        if limits and route.get("fits_budget") is False:
            table.row_class[i] = "over"
        table.rows.append(row)
        if _role_class(route) and i not in table.row_class:
            table.row_class[i] = _role_class(route)
    note = (f"Absolute values, with the ratio to the reference route ({settings.get('reference') or _NA}) in "
            "parentheses. Peak memory is measured at the largest batch size.")
    if limits:
        note += (" A route fits the budget when its peak-memory ratio and its worst P99 latency ratio (over the batch "
                 "sizes) stay within it; otherwise the limits it exceeds are named.")
    return blocks + [("p", note), ("table", table)]


def _fits(route: Mapping[str, Any], limits: Mapping[str, Any]) -> str:
    """`✓ yes`, `✗ no (memory, latency)` naming the limits exceeded, or `–` when not judged."""
    fits = route.get("fits_budget")
    if fits is None:
        return _NA
    if fits:
        return "✓ yes"
    rel = route.get("relative") or {}
    over = [name for name, key in (("memory", "peak_memory"), ("latency", "latency"))
            if limits.get(name) is not None and rel.get(key) is not None and float(rel[key]) > float(limits[name])]
    return "✗ no" + (f" ({', '.join(over)})" if over else "")


# ------------------------------------------------------------------------------------------ rendering


def _md_text(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(blocks: list[_Block], plots: Mapping[str, str]) -> str:
    out: list[str] = []
    for kind, content in blocks:
        if kind in ("h1", "h2"):
            out.append(f"{'#' * int(kind[1])} {content}")
        elif kind == "p":
            out.append(content)
        elif kind == "code":
            out.append(f"```\n{content}\n```")
        elif kind == "kv":
            out.append("\n".join(f"- **{key}:** {value}" for key, value in content))
        elif kind == "table":
            rows = [[_md_text(c) for c in content.headers], ["---"] * len(content.headers)]
            for i, row in enumerate(content.rows):
                rows.append([_md_text(_bold_estimate(c, "**", "**") if (i, j) in content.bold else c)
                             for j, c in enumerate(row)])
            out.append("\n".join("| " + " | ".join(r) + " |" for r in rows))
        elif kind == "plot" and content in plots:
            out.append(f"![{content}]({PLOT_FILES[content]})\n\n*{_CAPTIONS[content]}*")
    return "\n\n".join(out) + "\n"


def _bold_estimate(cell: str, open_: str, close: str) -> str:
    head, sep, tail = cell.partition(" ")
    return f"{open_}{head}{close}{sep}{tail}"


_CI = re.compile(r"^(.+?) (\[[^\]]*\]|\([^)]*×\))$")
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;background:#fafafa}
main{max-width:1280px;margin:0 auto;padding:24px 32px;background:#fff}
h1{margin-top:0}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:2em}
pre{background:#f3f3f3;padding:8px 12px;border-radius:4px;overflow-x:auto}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}dt{font-weight:600}dd{margin:0}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f0f0f0;position:sticky;top:0}td:first-child,th:first-child{text-align:left}
.ci{display:block;color:#888;font-size:11px}tr.teacher td{background:#f4f4f4}tr.ref td{background:#eef5fc}
tr.warn td{background:#fde8e8}tr.over td{background:#fff4e0}
figure{margin:16px 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:13px}.flag{color:#b00020;font-weight:600}
"""


def _html_cell(cell: str, column: int, bold: bool) -> str:
    match = _CI.match(cell) if column > 0 else None
    head, tail = (match.group(1), match.group(2)) if match else (cell, "")
    head = f"<strong>{html.escape(head)}</strong>" if bold else html.escape(head)
    if "⚠" in head or head.startswith("✗"):
        head = f'<span class="flag">{head}</span>'
    return head + (f' <span class="ci">{html.escape(tail)}</span>' if tail else "")


def _html(blocks: list[_Block], plots: Mapping[str, str], title: str) -> str:
    out: list[str] = []
    for kind, content in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{html.escape(content)}</{kind}>")
        elif kind == "code":
            out.append(f"<pre><code>{html.escape(content)}</code></pre>")
        elif kind == "kv":
            out.append("<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                                        for k, v in content) + "</dl>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in content.headers)
            body = []
            for i, row in enumerate(content.rows):
                cls = f' class="{content.row_class[i]}"' if i in content.row_class else ""
                cells = "".join(f"<td>{_html_cell(c, j, (i, j) in content.bold)}</td>" for j, c in enumerate(row))
                body.append(f"<tr{cls}>{cells}</tr>")
            out.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
                       f"<tbody>{''.join(body)}</tbody></table></div>")
        elif kind == "plot" and content in plots:
            with open(plots[content], "rb") as handle:
                data = base64.b64encode(handle.read()).decode("ascii")
            out.append(f'<figure><img alt="{content}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{html.escape(_CAPTIONS[content])}</figcaption></figure>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body><main>\n" + "\n".join(out) + "\n</main></body></html>\n")


# ------------------------------------------------------------------------------------------ public API


def write_report(
    results: Mapping[str, Any],
    folder: str,
    predictions: Mapping[str, Sequence[Mapping[str, Predictions]]] | None = None,
    *,
    plot_routes: Sequence[str] | None = None,
    dpi: int = 110,
) -> dict[str, Any]:
    """Write `report.md`, a self-contained `report.html` and the figures under `plots/` into `folder`.

    Every input is checked before anything is written.

    Args:
        results (`Mapping[str, Any]`):
            A `results.json` document (docs/results_format.md), already parsed.
        folder (`str`):
            The output folder (usually the one holding `results.json`); created when missing.
        predictions (`Mapping[str, Sequence[Mapping[str, Predictions]]]`, *optional*):
            Route name -> one `{split name: Predictions}` per seed (in the order of `results["seeds"]`), as saved
            under `predictions/`. Without them only the tables and the Pareto chart are written; routes without
            predictions are left out of the other figures.
        plot_routes (`Sequence[str]`, *optional*):
            The routes given a reliability diagram and OOD histograms; defaults to the teacher, the reference and
            the first route of every other family (at most 8). Risk-coverage curves always show every route.
        dpi (`int`, *optional*, defaults to 110):
            Resolution of the PNGs.

    Returns:
        `dict[str, Any]`: `{"markdown": path, "html": path, "plots": {figure name: path}}`, figure names from
        [`PLOT_FILES`] (only the figures that were drawn).

    Example:

    ```python
    >>> import json
    >>> from hf_uq.evaluation.report import write_report
    >>> results = json.load(open("runs/quick/results.json"))
    >>> paths = write_report(results, "runs/quick")
    >>> sorted(paths["plots"])
    ['pareto']
    ```
    """
    id_split, routes = _check_results(results)
    checked = _check_predictions(predictions, routes, id_split)
    if plot_routes is not None:
        if isinstance(plot_routes, str) or not isinstance(plot_routes, Sequence):
            raise ValueError(f"`plot_routes` must be a list of route names, got {plot_routes!r}")
        unknown = [name for name in plot_routes if name not in checked]
        if unknown:
            raise ValueError(f"`plot_routes` names {unknown[0]!r}, which has no predictions")
    blocks = _header(results, id_split)
    blocks += _headline(results, routes, id_split) + [("h2", "Cost vs uncertainty"), ("plot", "pareto")]
    blocks += _shift(results, routes) + _fidelity(results, routes) + _budget(results, routes)
    blocks += [("h2", "Calibration"), ("plot", "reliability"), ("h2", "Selective prediction"),
               ("plot", "risk_coverage"), ("h2", "OOD detection"), ("plot", "ood_histograms")]
    os.makedirs(os.path.join(folder, "plots"), exist_ok=True)
    written = draw_figures(results, routes, id_split, checked, folder, plot_routes=plot_routes, dpi=dpi)
    if "pareto" not in written:
        blocks.insert(blocks.index(("plot", "pareto")) + 1, ("p", "No cost measurements: no chart."))
    for name in ("reliability", "risk_coverage", "ood_histograms"):
        if name not in written:
            blocks.insert(blocks.index(("plot", name)) + 1,
                          ("p", "Needs saved predictions (or OOD splits): not drawn in this report."))
    title = blocks[0][1]
    paths = {"markdown": os.path.join(folder, "report.md"), "html": os.path.join(folder, "report.html")}
    with open(paths["markdown"], "w", encoding="utf-8") as handle:
        handle.write(_markdown(blocks, written))
    with open(paths["html"], "w", encoding="utf-8") as handle:
        handle.write(_html(blocks, written, title))
    return {**paths, "plots": written}
