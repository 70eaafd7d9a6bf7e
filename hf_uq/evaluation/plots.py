"""The benchmark report's figures: reliability diagrams, risk-coverage curves, OOD histograms, cost-vs-uncertainty.

Each `plot_*` function draws on its own `matplotlib.figure.Figure` rendered by the Agg canvas (no pyplot, no global
state, no display needed) and writes one PNG; [`draw_figures`] picks the routes and data for the report and calls
them. matplotlib is imported inside the functions only, so importing this module costs nothing. The numbers come
from `hf_uq.functional` (calibration bins, ECE, risk-coverage curves); [`pareto_front`] is the one piece of
arithmetic that lives here.

Routes keep one look across every figure ([`route_styles`]): a colour per family (duos blue, BatchEnsembles green,
...), lighter shades for later routes of the same family, and dashed lines / hollow markers for quantized
variants.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import functional as F
from .predict import Predictions

__all__ = [
    "FAMILY_COLORS",
    "PLOT_FILES",
    "draw_figures",
    "id_metrics",
    "ood_split_names",
    "select_routes",
    "RouteStyle",
    "pareto_front",
    "plot_ood_histograms",
    "plot_pareto",
    "plot_reliability",
    "plot_risk_coverage",
    "route_styles",
]

#: Figure name -> path inside the output folder.
PLOT_FILES: dict[str, str] = {
    "reliability": "plots/reliability.png",
    "risk_coverage": "plots/risk_coverage.png",
    "ood_histograms": "plots/ood_histograms.png",
    "pareto": "plots/pareto.png",
}
_MAX_SELECTED = 8
#: Colour of each route family (`results.json` `"family"`); unknown families get `"#bcbd22"`.
FAMILY_COLORS: dict[str, str] = {
    "teacher": "#222222", "single": "#7f7f7f", "temperature": "#8c564b", "mc_dropout": "#9467bd",
    "duo": "#1f77b4", "batch_ensemble": "#2ca02c", "dirichlet": "#ff7f0e", "sidekick": "#17becf",
    "user": "#e377c2",
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_ID_COLOR, _OOD_COLOR = "#4c72b0", "#dd8452"


@dataclass(frozen=True)
class RouteStyle:
    """How one route is drawn in every figure.

    Args:
        number (`int`): 1-based position of the route in the report (the label of its Pareto points).
        color (`str`): hex colour (the family's colour, lightened for later routes of the family).
        marker (`str`): matplotlib marker, one per route within its family.
        filled (`bool`): `False` for quantized variants (hollow markers, dashed lines).
    """

    number: int
    color: str
    marker: str
    filled: bool

    @property
    def linestyle(self) -> Any:
        return (0, (4, 2)) if not self.filled else "-"


def _shade(color: str, amount: float) -> str:
    """`color` mixed with white by `amount` in [0, 1]."""
    rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.float64)
    mixed = rgb + (255.0 - rgb) * amount
    return "#" + "".join(f"{int(round(v)):02x}" for v in mixed)


def route_styles(routes: Sequence[Mapping[str, Any]]) -> dict[str, RouteStyle]:
    """The [`RouteStyle`] of every route of a `results.json` `"routes"` list, by route name."""
    sizes: dict[str, int] = {}
    for route in routes:
        family = str(route.get("family") or "user")
        sizes[family] = sizes.get(family, 0) + 1
    seen: dict[str, int] = {}
    styles = {}
    for number, route in enumerate(routes, start=1):
        family = str(route.get("family") or "user")
        rank = seen.get(family, 0)
        seen[family] = rank + 1
        base = FAMILY_COLORS.get(family, "#bcbd22")
        # later routes of a family are lighter, at most half-way to white
        color = _shade(base, 0.5 * rank / max(sizes[family] - 1, 1)) if sizes[family] > 1 else base
        styles[str(route["name"])] = RouteStyle(
            number=number, color=color, marker=_MARKERS[rank % len(_MARKERS)],
            filled=not route.get("quantization"),
        )
    return styles


def pareto_front(costs: Any, values: Any, higher_is_better: bool = False) -> np.ndarray:
    """Which points no other point beats: lower-or-equal cost and better-or-equal value, one of them strictly.

    Points with a NaN cost or value are never on the front (and never dominate). Equal points are all kept.

    Args:
        costs (`array-like` of shape `(n,)`): cost of each point (lower is better).
        values (`array-like` of shape `(n,)`): quality of each point.
        higher_is_better (`bool`, *optional*, defaults to `False`): whether a larger value is better.

    Returns:
        `np.ndarray` of shape `(n,)` and dtype bool: `True` for points on the front.
    """
    cost = np.asarray(costs, dtype=np.float64).reshape(-1)
    value = np.asarray(values, dtype=np.float64).reshape(-1)
    if cost.shape != value.shape:
        raise ValueError(f"`costs` and `values` must have the same length, got {cost.size} and {value.size}")
    if higher_is_better:
        value = -value
    valid = np.isfinite(cost) & np.isfinite(value)
    c, v = cost[valid], value[valid]
    # dominated[i]: some j with c_j <= c_i and v_j <= v_i, strictly better in one of them
    no_worse = (c[None, :] <= c[:, None]) & (v[None, :] <= v[:, None])
    better = (c[None, :] < c[:, None]) | (v[None, :] < v[:, None])
    front = np.zeros(cost.shape, dtype=bool)
    front[valid] = ~(no_worse & better).any(axis=1)
    return front


# ------------------------------------------------------------------------------------------ drawing helpers


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, path: str, dpi: int) -> str:
    figure.savefig(path, dpi=dpi, format="png", facecolor="white")
    return path


def _wrap(text: str, width: int = 30) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def _grid(figure: Any, count: int, ncols: int) -> list[Any]:
    nrows = -(-count // ncols)
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return list(axes[:count])


def _pooled(groups: Sequence[Predictions]) -> tuple[np.ndarray, np.ndarray]:
    probs = np.concatenate([p.probs for p in groups])
    labels = np.concatenate([p.labels for p in groups])
    return probs, labels


# ------------------------------------------------------------------------------------------ figures


def plot_reliability(
    routes: Mapping[str, Sequence[Predictions]],
    styles: Mapping[str, RouteStyle],
    path: str,
    *,
    n_bins: int = 15,
    dpi: int = 110,
) -> str:
    """Reliability diagrams, one panel per route, on in-distribution predictions pooled over seeds.

    Bars are the accuracy of each equal-width confidence bin ([`hf_uq.functional.calibration_bins`]), the hatched
    red part the gap to the bin's mean confidence; the title gives the pooled ECE ([`hf_uq.functional.ece`]).

    Args:
        routes (`Mapping[str, Sequence[Predictions]]`): route name -> its id-split predictions, one per seed.
        styles (`Mapping[str, RouteStyle]`): from [`route_styles`].
        path (`str`): the PNG to write.
        n_bins (`int`, *optional*, defaults to 15): confidence bins.
        dpi (`int`, *optional*, defaults to 110): resolution.

    Returns:
        `str`: `path`.
    """
    ncols = min(4, len(routes))
    nrows = -(-len(routes) // ncols)
    figure = _figure(3.1 * ncols, 3.2 * nrows + 0.3)
    for ax, (name, groups) in zip(_grid(figure, len(routes), ncols), routes.items(), strict=True):
        probs, labels = _pooled(groups)
        bins = F.calibration_bins(probs, labels, n_bins=n_bins)
        error = F.ece(probs, labels, n_bins=n_bins)
        filled = bins.counts > 0
        left, width = bins.edges[:-1][filled], np.diff(bins.edges)[filled]
        acc, conf = bins.accuracy[filled], bins.confidence[filled]
        ax.bar(left, acc, width=width, align="edge", color=_shade(styles[name].color, 0.35),
               edgecolor="white", linewidth=0.5, label="accuracy per bin")
        ax.bar(left, conf - acc, bottom=acc, width=width, align="edge", facecolor="none",
               edgecolor="#d62728", hatch="////", linewidth=0.8, label="gap to mean confidence")
        ax.plot([0, 1], [0, 1], linestyle="--", color="#555555", linewidth=1)
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy")
        ax.set_title(f"{_wrap(name)}\npooled ECE {error:.3f} (n={len(labels)})", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.25)
    handles, labels_ = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, labels_, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    figure.suptitle(f"Reliability ({n_bins} equal-width bins, seeds pooled)", fontsize=11)
    return _save(figure, path, dpi)


def plot_risk_coverage(
    splits: Mapping[str, Mapping[str, Sequence[Predictions]]],
    styles: Mapping[str, RouteStyle],
    path: str,
    *,
    labels: Mapping[str, Mapping[str, str]] | None = None,
    dpi: int = 110,
) -> str:
    """Risk-coverage curves of every route, one axes per split (e.g. the clean test split and the pooled shift).

    Each seed's curve comes from [`hf_uq.functional.risk_coverage_curve`] (tie-exact); seeds are averaged on a
    common coverage grid, never ranked together.

    Args:
        splits (`Mapping[str, Mapping[str, Sequence[Predictions]]]`): axes title -> route name -> predictions per
            seed.
        styles (`Mapping[str, RouteStyle]`): from [`route_styles`].
        path (`str`): the PNG to write.
        labels (`Mapping[str, Mapping[str, str]]`, *optional*): axes title -> route name -> legend text.
        dpi (`int`, *optional*, defaults to 110): resolution.

    Returns:
        `str`: `path`.
    """
    grid = np.linspace(0.0, 1.0, 401)[1:]
    figure = _figure(5.0 * len(splits) + 2.8, 4.4)
    axes = figure.subplots(1, len(splits), squeeze=False).ravel()
    for ax, (title, routes) in zip(axes, splits.items(), strict=True):
        top = 0.0
        for name, groups in routes.items():
            risks = []
            for p in groups:
                coverage, risk = F.risk_coverage_curve(p.uncertainty, p.correct)
                risks.append(np.interp(grid, coverage, risk))
            mean = np.mean(risks, axis=0)
            top = max(top, float(mean[grid >= 0.1].max()))
            style = styles[name]
            label = (labels or {}).get(title, {}).get(name, name)
            ax.plot(grid, mean, color=style.color, linestyle=style.linestyle, linewidth=1.4,
                    label=f"{style.number}. {label}")
        ax.set(xlim=(0, 1), ylim=(0, max(top * 1.1, 1e-3)), xlabel="coverage", ylabel="selective risk")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.25)
    entries: dict[str, Any] = {}
    for ax in axes:  # one entry per route, in report order, even when a route misses a split
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(text, handle)
    ordered = sorted(entries, key=lambda text: int(text.split(".", 1)[0]))
    figure.legend([entries[t] for t in ordered], ordered, loc="outside right upper", fontsize=8, frameon=False)
    figure.suptitle("Risk-coverage (lower is better; most certain samples first)", fontsize=11)
    return _save(figure, path, dpi)


def plot_ood_histograms(
    routes: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    path: str,
    *,
    id_split: str = "test",
    aurocs: Mapping[str, Mapping[str, float | None]] | None = None,
    dpi: int = 110,
) -> str:
    """Histograms of the uncertainty score on the id split vs each OOD split: one row per route, one column per set.

    Args:
        routes (`Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]]`): route name -> OOD split name ->
            `(id scores, OOD scores)`, seeds pooled.
        path (`str`): the PNG to write.
        id_split (`str`, *optional*, defaults to `"test"`): the id split's name, for the legend.
        aurocs (`Mapping[str, Mapping[str, float | None]]`, *optional*): route -> OOD split -> AUROC for the titles.
        dpi (`int`, *optional*, defaults to 110): resolution.

    Returns:
        `str`: `path`.
    """
    ncols = max(len(sets) for sets in routes.values())
    figure = _figure(3.9 * ncols + 0.4, 2.2 * len(routes) + 0.6)
    axes = figure.subplots(len(routes), ncols, squeeze=False)
    for row, (name, sets) in zip(axes, routes.items(), strict=True):
        for ax in row[len(sets):]:
            ax.set_visible(False)
        for ax, (split, (u_id, u_ood)) in zip(row, sets.items(), strict=False):
            edges = np.histogram_bin_edges(np.concatenate([u_id, u_ood]), bins=30)
            for scores, color, label in ((u_id, _ID_COLOR, f"{id_split} (in-distribution)"),
                                         (u_ood, _OOD_COLOR, "OOD split")):
                ax.hist(scores, bins=edges, density=True, histtype="stepfilled", alpha=0.45, color=color,
                        edgecolor=color, linewidth=1.2, label=label)
            auroc = (aurocs or {}).get(name, {}).get(split)
            suffix = f" (AUROC {auroc:.3f})" if auroc is not None and np.isfinite(auroc) else ""
            ax.set_title(f"{_wrap(name, 34)}\nvs {split}{suffix}", fontsize=8.5)
            ax.tick_params(labelsize=7)
            ax.set_yticks([])
        row[0].set_ylabel("density", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("uncertainty score", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside upper center", ncols=2, fontsize=8, frameon=False)
    return _save(figure, path, dpi)


@dataclass(frozen=True)
class _Axis:
    key: str
    label: str
    higher_is_better: bool = False


def plot_pareto(
    points: Sequence[Mapping[str, Any]],
    styles: Mapping[str, RouteStyle],
    path: str,
    *,
    x_axes: Sequence[tuple[str, str]] = (("latency", "latency (P99, worst batch) / reference"),
                                         ("flops", "FLOPs per image / reference")),
    y_axes: Sequence[tuple[str, str, bool]] = (("aurc", "AURC×100", False), ("ece", "ECE", False)),
    budget: Mapping[str, float] | None = None,
    dpi: int = 110,
) -> str:
    """Cost vs uncertainty quality: one panel per (quality, cost) pair, the Pareto front drawn as a staircase.

    Args:
        points (`Sequence[Mapping[str, Any]]`): per route `{"name": str, <x key>: float | None, <y key>:
            [estimate, low, high] | None}` (bounds may be `None`: no error bar).
        styles (`Mapping[str, RouteStyle]`): from [`route_styles`]; the legend numbers each route.
        path (`str`): the PNG to write.
        x_axes (`Sequence[tuple[str, str]]`): `(key, axis label)` of each cost column (log scale, relative).
        y_axes (`Sequence[tuple[str, str, bool]]`): `(key, axis label, higher_is_better)` of each quality row.
        budget (`Mapping[str, float]`, *optional*): `{"latency": ...}` draws the latency budget as a line.
        dpi (`int`, *optional*, defaults to 110): resolution.

    Returns:
        `str`: `path`.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    xs = [_Axis(k, label) for k, label in x_axes]
    ys = [_Axis(k, label, hib) for k, label, hib in y_axes]
    figure = _figure(5.2 * len(xs), 3.0 * len(ys) + 0.5 + 0.2 * len(points) / 3)
    axes = figure.subplots(len(ys), len(xs), squeeze=False)
    for i, y_axis in enumerate(ys):
        for j, x_axis in enumerate(xs):
            ax = axes[i][j]
            cost = np.array([_num(p.get(x_axis.key)) for p in points])
            cost[~(cost > 0)] = np.nan  # log axis
            interval = np.array([_interval3(p.get(y_axis.key)) for p in points]).reshape(-1, 3)
            value = interval[:, 0]
            front = pareto_front(cost, value, y_axis.higher_is_better)
            if front.any():
                # the staircase runs on to the costliest route: nothing right of the front's end beats it
                order = np.argsort(cost[front])
                step_x = np.append(cost[front][order], np.nanmax(cost))
                step_y = np.append(value[front][order], value[front][order][-1])
                ax.step(step_x, step_y, where="post", color="#999999", linewidth=1.2, zorder=1)
            shown = np.isfinite(cost) & np.isfinite(value)
            bars = shown & np.isfinite(interval[:, 1]) & np.isfinite(interval[:, 2])
            if bars.any():  # one collection for every error bar: much cheaper than one errorbar() per route
                ax.vlines(cost[bars], interval[bars, 1], interval[bars, 2], linewidth=1.0, alpha=0.6, zorder=2,
                          colors=[styles[p["name"]].color for p, b in zip(points, bars, strict=True) if b])
            for k, point in enumerate(points):
                if not shown[k]:
                    continue
                style = styles[point["name"]]
                ax.scatter(cost[k], value[k], marker=style.marker, s=70 if front[k] else 42, zorder=3,
                           facecolors=style.color if style.filled else "white", edgecolors=style.color,
                           linewidths=2.0 if front[k] else 1.3)
                ax.annotate(str(style.number), (cost[k], value[k]), xytext=(5, 3), textcoords="offset points",
                            fontsize=7.5, color="#333333", zorder=4)
            ax.axvline(1.0, color="#bbbbbb", linestyle=":", linewidth=1)
            limit = (budget or {}).get(x_axis.key)
            if limit is not None:
                ax.axvline(float(limit), color="#d62728", linestyle="--", linewidth=1)
                ax.text(float(limit), 1.0, " budget", color="#d62728", fontsize=7.5, va="top",
                        transform=ax.get_xaxis_transform())
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(FixedLocator(_ratio_ticks(ax.get_xlim())))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
            ax.xaxis.set_minor_locator(NullLocator())  # log-axis minor ticks cost more than the rest of the panel
            ax.grid(alpha=0.25)
            ax.tick_params(labelsize=8)
            ax.set_xlabel(x_axis.label, fontsize=8.5)
            ax.set_ylabel(f"{y_axis.label} {'(higher better)' if y_axis.higher_is_better else '(lower better)'}",
                          fontsize=8.5)
    handles = [
        Line2D([], [], linestyle="none", marker=styles[p["name"]].marker, markersize=7,
               markerfacecolor=styles[p["name"]].color if styles[p["name"]].filled else "white",
               markeredgecolor=styles[p["name"]].color, label=f"{styles[p['name']].number}. {p['name']}")
        for p in points
    ]
    handles.append(Line2D([], [], color="#999999", label="Pareto front (bold markers)"))
    figure.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    figure.suptitle("Cost vs uncertainty (error bars: 95% bootstrap; hollow = quantized)", fontsize=11)
    return _save(figure, path, dpi)


_NICE_RATIOS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0,
                3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0)


def _ratio_ticks(limits: tuple[float, float]) -> list[float]:
    """Readable ratio ticks inside `limits`, spread evenly on the log axis; 1x first when it is inside."""
    lo, hi = max(limits[0], 1e-12), max(limits[1], 1e-12)
    inside = [t for t in _NICE_RATIOS if lo <= t <= hi]
    gap = max(np.log10(hi / lo), 1e-12) / 9  # ticks at least a ninth of the axis apart
    ticks = [1.0] if 1.0 in inside else []
    for t in inside:
        if all(abs(np.log10(t / k)) >= gap for k in ticks):
            ticks.append(t)
    return sorted(ticks)


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _interval3(value: Any) -> list[float]:
    if value is None:
        return [float("nan")] * 3
    return [_num(v) for v in value]


def id_metrics(route: Mapping[str, Any], id_split: str) -> Mapping[str, Any] | None:
    """A route's in-distribution metrics: under the id split's name, or under `"test"` (where `build_results` puts
    them whatever the split is called); `None` when neither exists."""
    metrics = route.get("metrics") or {}
    found = metrics.get(id_split)
    return found if found is not None else metrics.get("test")


def ood_split_names(data: Mapping[str, Any], routes: Sequence[Mapping[str, Any]], id_split: str) -> list[str]:
    """The OOD splits of a run: `data["ood_splits"]`, else those named by the routes' `"<ood>/auroc"` metrics."""
    if data.get("ood_splits"):
        return [str(s) for s in data["ood_splits"]]
    found: dict[str, None] = {}
    for route in routes:
        for key in id_metrics(route, id_split) or {}:
            if key.endswith("/auroc"):
                found.setdefault(key.split("/")[0])
    return list(found)


# ------------------------------------------------------------------------------------------ the report's figures


def select_routes(routes: Sequence[Mapping[str, Any]], available: Sequence[str]) -> list[str]:
    """Routes worth a panel: the teacher, the reference, then the first (unquantized if any) route of each family.

    At most 8, only among `available`, in report order.
    """
    usable = [r for r in routes if r["name"] in available]
    chosen = [r["name"] for role in ("teacher", "reference") for r in usable if r.get("role") == role]
    families = {r.get("family") for r in usable if r["name"] in chosen}
    for prefer_plain in (True, False):
        for r in usable:
            if r.get("family") in families or (prefer_plain and r.get("quantization")):
                continue
            families.add(r.get("family"))
            chosen.append(r["name"])
    chosen = chosen[:_MAX_SELECTED]
    return [r["name"] for r in usable if r["name"] in chosen]


def draw_figures(
    results: Mapping[str, Any],
    routes: Sequence[Mapping[str, Any]],
    id_split: str,
    predictions: Mapping[str, Sequence[Mapping[str, Predictions]]],
    folder: str,
    *,
    plot_routes: Sequence[str] | None = None,
    dpi: int = 110,
) -> dict[str, str]:
    """Draw every figure of the report that `results` and `predictions` allow, under `folder`/[`PLOT_FILES`].

    Args:
        results (`Mapping[str, Any]`): the `results.json` document (checked by the caller).
        routes (`Sequence[Mapping[str, Any]]`): its routes, in report order.
        id_split (`str`): the in-distribution split.
        predictions (`Mapping[str, Sequence[Mapping[str, Predictions]]]`): route -> per seed `{split: Predictions}`
            (checked by the caller; may be empty: then only the Pareto chart is drawn).
        folder (`str`): the output folder (its `plots/` subfolder must exist).
        plot_routes (`Sequence[str]`, *optional*): routes given reliability diagrams and OOD histograms; defaults
            to [`select_routes`].
        dpi (`int`, *optional*, defaults to 110): resolution.

    Returns:
        `dict[str, str]`: figure name -> path, for the figures drawn.
    """
    settings, data = results.get("settings") or {}, results.get("data") or {}
    styles = route_styles(routes)
    path = {name: os.path.join(folder, relative) for name, relative in PLOT_FILES.items()}
    written: dict[str, str] = {}
    oods = ood_split_names(data, routes, id_split)
    points = []
    for route in routes:
        rel, metrics = route.get("relative") or {}, id_metrics(route, id_split) or {}
        aurc = metrics.get("aurc")
        point = {"name": route["name"], "latency": rel.get("latency"), "flops": rel.get("flops"),
                 "ece": metrics.get("ece"),
                 "aurc": None if aurc is None else [None if v is None else 100 * v for v in aurc]}
        points.append(point | {f"auroc:{o}": metrics.get(f"{o}/auroc") for o in oods})
    x_axes = [(key, label) for key, label in (("latency", "latency (P99, worst batch size) / reference"),
                                              ("flops", "FLOPs per image / reference"))
              if any(p[key] is not None for p in points)]
    if x_axes:
        y_axes = [("aurc", f"AURC×100 ({id_split})", False), ("ece", f"ECE ({id_split})", False)]
        y_axes += [(f"auroc:{o}", f"OOD AUROC {o}", True) for o in oods]
        written["pareto"] = plot_pareto(points, styles, path["pareto"], x_axes=x_axes, y_axes=y_axes,
                                        budget=settings.get("budget"), dpi=dpi)
    if not predictions:
        return written
    if plot_routes is not None:
        selected = [name for name in predictions if name in plot_routes]
    else:
        selected = select_routes(routes, list(predictions))
    n_bins = int(settings.get("n_bins") or 15)
    if selected:
        written["reliability"] = plot_reliability(
            {name: [seed[id_split] for seed in predictions[name]] for name in selected}, styles,
            path["reliability"], n_bins=n_bins, dpi=dpi)
    curves = {id_split: {name: [seed[id_split] for seed in seeds] for name, seeds in predictions.items()}}
    shifts = list(data.get("shift_splits") or [])
    shifted = {name: [Predictions.concatenate([seed[s] for s in shifts]) for seed in seeds]
               for name, seeds in predictions.items() if shifts and all(s in seed for seed in seeds for s in shifts)}
    if shifted:
        curves["shift (pooled)"] = shifted
    written["risk_coverage"] = plot_risk_coverage(curves, styles, path["risk_coverage"], dpi=dpi)
    histograms: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    aurocs: dict[str, dict[str, float]] = {}
    for name in selected:
        seeds = predictions[name]
        u_id = np.concatenate([seed[id_split].uncertainty for seed in seeds])
        sets = {o: (u_id, np.concatenate([seed[o].uncertainty for seed in seeds]))
                for o in oods if all(o in seed for seed in seeds)}
        if sets:
            histograms[name] = sets
            metrics = id_metrics(next(r for r in routes if r["name"] == name), id_split) or {}
            aurocs[name] = {o: _interval3(metrics.get(f"{o}/auroc"))[0] for o in sets}
    if histograms:
        written["ood_histograms"] = plot_ood_histograms(
            histograms, path["ood_histograms"], id_split=id_split, aurocs=aurocs, dpi=dpi)
    return written
