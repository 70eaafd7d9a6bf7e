"""Choose a route from a `results.json`: filter by the deployment budget, then rank by the uncertainty that matters.

The decision procedure of `hf-uq recommend`:

1. **Budget.** A route fits when `relative.peak_memory <= memory` and `relative.latency <= latency` (both relative
   to the run's reference route, usually the single model; see docs/results_format.md). A bound that is not given
   is not checked; a route whose cost was not measured (`null`) does not fit a bound on that cost.
2. **Priority.** The routes that fit are ranked by one [`Priority`]:
   - `ood`: the mean OOD AUROC over the run's OOD sets (higher is better);
   - `calibration`: ECE on the in-distribution split, then NLL (lower is better);
   - `selective`: AURC on the in-distribution split (lower is better).
3. **Ties.** Routes are sorted by the estimate, and a route joins the tie group of the best route not yet placed
   when their intervals overlap: a tie group is reported as a tie, never as an arbitrary order. With two keys
   (calibration) a group tied on ECE is split again by NLL.
4. **Warnings.** When no route within budget keeps its fidelity to the teacher at or above the threshold
   (`settings.fidelity_threshold`, 0.7), and when the recommended route's interval overlaps the teacher's.

The interval of the mean OOD AUROC is the mean of the per-set bounds, which is conservative (at least as wide as a
bootstrap of the mean). A missing bound (`null`, e.g. with `bootstrap=0`) makes the interval a point.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from .results_io import check_results, fits_budget, load_results
from .scoring import format_interval

__all__ = [
    "Priority",
    "Recommendation",
    "RouteScore",
    "check_budget",
    "read_results",
    "recommend",
]

DEFAULT_FIDELITY_THRESHOLD = 0.7


class Priority(str, Enum):
    """Which uncertainty decides between the routes that fit the budget."""

    OOD = "ood"
    CALIBRATION = "calibration"
    SELECTIVE = "selective"


# ------------------------------------------------------------------------------------------------ results


def read_results(path: str | os.PathLike) -> dict[str, Any]:
    """
    Read a `results.json` (docs/results_format.md) with the protocol's [`~hf_uq.evaluation.load_results`], which
    validates the whole schema.

    Args:
        path (`str` or `os.PathLike`):
            The `results.json` file, or the run folder holding it.

    Returns:
        `dict`: the results document.

    Raises:
        `FileNotFoundError`: no such file. `ValueError`: not JSON, or not an hf_uq results document.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"results file not found: {path}")
    return load_results(path)


def get_route(results: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The route called `name`; a `ValueError` listing the routes otherwise."""
    for route in results.get("routes", []):
        if route.get("name") == name:
            return route
    names = ", ".join(repr(r.get("name")) for r in results.get("routes", []))
    raise ValueError(f"no route {name!r} in the results; routes: {names}")


# ---------------------------------------------------------------------------------------------- intervals


def as_interval(value: Any) -> tuple[float | None, float | None, float | None]:
    """`[estimate, low, high]` (any entry may be null) as a tuple of floats or None; None for a missing value."""
    if value is None:
        return (None, None, None)
    if isinstance(value, (int, float)):
        return (_number(value), None, None)
    values = [_number(v) for v in list(value)[:3]]
    return tuple(values + [None] * (3 - len(values)))  # type: ignore[return-value]


def _number(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _bounds(interval: Sequence[float | None]) -> tuple[float, float]:
    estimate, low, high = interval
    if low is None or high is None:
        return estimate, estimate  # type: ignore[return-value]
    return low, high


def intervals_overlap(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """Whether two `[estimate, low, high]` intervals overlap (a missing bound makes the interval a point)."""
    a_low, a_high = _bounds(a)
    b_low, b_high = _bounds(b)
    return a_low <= b_high and b_low <= a_high


# ------------------------------------------------------------------------------------------------- budget


def check_budget(
    route: Mapping[str, Any], memory: float | None = None, latency: float | None = None
) -> tuple[bool, list[str]]:
    """
    Whether a route fits a budget relative to the reference route, and why not.

    The verdict is the protocol's [`~hf_uq.evaluation.fits_budget`], with a route whose bounded cost is unknown
    counted as not fitting.

    Args:
        route (`Mapping`):
            One entry of `results["routes"]`.
        memory (`float`, *optional*):
            Bound on `relative.peak_memory`; not checked when None.
        latency (`float`, *optional*):
            Bound on `relative.latency` (the worst p99 ratio over batch sizes); not checked when None.

    Returns:
        `(fits, reasons)`: `reasons` names each exceeded (or unmeasured) bound, empty when the route fits.
    """
    relative = route.get("relative") or {}
    reasons = []
    for key, label, bound in (("peak_memory", "peak memory", memory), ("latency", "latency", latency)):
        if bound is None:
            continue
        value = _number(relative.get(key))
        if value is None:
            reasons.append(f"{label} not measured")
        elif value > bound:
            reasons.append(f"{label} {value:.2f}x > {bound:g}x")
    if memory is None and latency is None:
        return True, []
    fits = fits_budget(route, memory=memory, latency=latency) is True
    if not fits and not reasons:
        reasons.append("outside the budget")
    return fits, reasons if not fits else []


# ------------------------------------------------------------------------------------------------ ranking


@dataclass(frozen=True)
class RouteScore:
    """
    One ranked route.

    Args:
        name (`str`): the route's name. family (`str`): its family (docs/results_format.md).
        rank (`int`): 1 for the best tie group; tied routes share a rank.
        score (`tuple`): `(estimate, low, high)` of the priority's first metric.
        secondary (`tuple`, *optional*): the same for the second metric (NLL for `calibration`).
        fidelity (`float`, *optional*): Spearman fidelity to the teacher on the in-distribution split.
        peak_memory (`float`, *optional*), latency (`float`, *optional*): cost relative to the reference route.
        role (`str`, *optional*): `"teacher"`, `"reference"` or None.
    """

    name: str
    family: str
    rank: int
    score: tuple[float | None, float | None, float | None]
    secondary: tuple[float | None, float | None, float | None] | None
    fidelity: float | None
    peak_memory: float | None
    latency: float | None
    role: str | None = None


@dataclass
class Recommendation:
    """
    The outcome of [`recommend`].

    Args:
        priority ([`Priority`]): what ranked the routes. metric (`str`): the ranking metric, in words.
        memory (`float`, *optional*), latency (`float`, *optional*): the budget applied (None: unbounded).
        ranking (`list[list[RouteScore]]`): tie groups of the routes within budget, best group first.
        excluded (`dict[str, list[str]]`): routes left out (over budget, or without the metric) and why.
        explanation (`list[str]`): a few lines on the choice. warnings (`list[str]`): what to double-check.
    """

    priority: Priority
    metric: str
    memory: float | None
    latency: float | None
    ranking: list[list[RouteScore]] = field(default_factory=list)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    explanation: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def best(self) -> list[RouteScore]:
        """The first tie group (several routes when the intervals cannot separate them); empty when none fits."""
        return list(self.ranking[0]) if self.ranking else []

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (`priority` as its string value)."""
        out = asdict(self)
        out["priority"] = self.priority.value
        out["best"] = [s.name for s in self.best]
        return out

    def format(self) -> str:
        """The ranking table, the explanation and the warnings, as printed by `hf-uq recommend`."""
        lines = [f"priority: {self.priority.value} ({self.metric})", ""]
        if self.ranking:
            width = max(len(s.name) for group in self.ranking for s in group)
            for group in self.ranking:
                tied = len(group) > 1
                for s in group:
                    rank = f"{s.rank}{'=' if tied else ' '}"
                    cost = f"mem {_ratio(s.peak_memory)}  lat {_ratio(s.latency)}"
                    fid = "fidelity n/a" if s.fidelity is None else f"fidelity {s.fidelity:.2f}"
                    second = f"  NLL {format_interval(s.secondary)}" if s.secondary is not None else ""
                    lines.append(
                        f"{rank:>3} {s.name:<{width}}  {format_interval(s.score)}{second}  {cost}  {fid}"
                    )
            lines.append("")
        lines.extend(self.explanation)
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


_PRIORITY_METRICS = {
    Priority.OOD: "mean OOD AUROC, higher is better",
    Priority.CALIBRATION: "ECE, then NLL, lower is better",
    Priority.SELECTIVE: "AURC, lower is better",
}


def _keys(
    route: Mapping[str, Any], priority: Priority, id_split: str, ood_splits: Sequence[str]
) -> list[tuple[float | None, float | None, float | None]] | str:
    """The ranking intervals of a route (sign-flipped so that higher is better), or why it has none."""
    metrics = (route.get("metrics") or {}).get(id_split) or {}
    if priority is Priority.OOD:
        per_set = [as_interval(metrics.get(f"{ood}/auroc")) for ood in ood_splits]
        missing = [ood for ood, iv in zip(ood_splits, per_set, strict=True) if iv[0] is None]
        if missing:
            return f"no OOD AUROC on {', '.join(missing)}"
        mean = tuple(
            None if any(iv[i] is None for iv in per_set) else sum(iv[i] for iv in per_set) / len(per_set)
            for i in range(3)
        )
        return [mean]  # type: ignore[list-item]
    names = ("ece", "nll") if priority is Priority.CALIBRATION else ("aurc",)
    keys = []
    for name in names:
        interval = as_interval(metrics.get(name))
        if interval[0] is None:
            return f"no {name.upper()} on {id_split!r}"
        keys.append(interval)
    return keys


def _negate(interval: tuple[float | None, float | None, float | None]) -> tuple[float | None, ...]:
    estimate, low, high = interval
    return (-estimate, None if high is None else -high, None if low is None else -low)  # type: ignore[operator]


def _tie_groups(items: list[tuple[Any, list]], level: int) -> list[list[Any]]:
    """Group `(payload, keys)` items (keys: higher-is-better intervals) into tie groups, best first."""
    if not items:
        return []
    if level >= len(items[0][1]):
        return [[payload for payload, _ in items]]
    ordered = sorted(items, key=lambda item: -item[1][level][0])  # stable: display order breaks exact ties
    groups: list[list[tuple[Any, list]]] = []
    while ordered:
        leader = ordered[0]
        group = [item for item in ordered if intervals_overlap(leader[1][level], item[1][level])]
        groups.append(group)
        ordered = [item for item in ordered if not any(item is g for g in group)]
    out = []
    for group in groups:
        out.extend(_tie_groups(group, level + 1))
    return out


def recommend(
    results: Mapping[str, Any] | str | os.PathLike,
    priority: Priority | str,
    *,
    memory: float | None = None,
    latency: float | None = None,
) -> Recommendation:
    """
    Drop the routes over budget and rank the rest by an uncertainty priority, ties kept as ties.

    Args:
        results (`Mapping` or path):
            A results document (docs/results_format.md) or the path of a `results.json`.
        priority ([`Priority`] or `str`):
            `"ood"`, `"calibration"` or `"selective"`.
        memory (`float`, *optional*):
            Largest allowed peak memory relative to the reference route; None: not bounded.
        latency (`float`, *optional*):
            Largest allowed p99 latency relative to the reference route; None: not bounded.

    Returns:
        [`Recommendation`]: the tie groups, the excluded routes with reasons, an explanation and warnings.

    Raises:
        `ValueError`: an unknown priority, a negative bound, or results without what the priority needs.

    Example:

    ```python
    >>> from hf_uq.evaluation.recommend import recommend
    >>> rec = recommend("runs/quick/results.json", "ood", memory=1.2, latency=1.5)  # doctest: +SKIP
    >>> print(rec.format())  # doctest: +SKIP
    ```
    """
    if not isinstance(results, Mapping):
        results = read_results(results)
    else:
        check_results(results)
    try:
        priority = Priority(priority)
    except ValueError:
        choices = ", ".join(p.value for p in Priority)
        raise ValueError(f"unknown priority {priority!r}; choose one of: {choices}") from None
    for label, bound in (("memory", memory), ("latency", latency)):
        if bound is not None and not (bound > 0 and math.isfinite(bound)):
            raise ValueError(f"the {label} budget must be a positive number, got {bound}")
    data = results.get("data") or {}
    settings = results.get("settings") or {}
    id_split = data.get("id_split") or "test"
    ood_splits = list(data.get("ood_splits") or [])
    if priority is Priority.OOD and not ood_splits:
        raise ValueError("the results have no OOD sets (data.ood_splits is empty): --priority ood needs them")
    threshold = float(settings.get("fidelity_threshold") or DEFAULT_FIDELITY_THRESHOLD)
    reference = settings.get("reference") or "the reference route"

    rec = Recommendation(priority=priority, metric=_PRIORITY_METRICS[priority], memory=memory, latency=latency)
    routes = list(results["routes"])
    teacher = next((r for r in routes if r.get("role") == "teacher"), None)
    if teacher is None and settings.get("teacher"):
        teacher = next((r for r in routes if r.get("name") == settings["teacher"]), None)

    ranked: list[tuple[Mapping[str, Any], list]] = []
    fitting = []
    over: dict[str, list[str]] = {}
    for route in routes:
        fits, reasons = check_budget(route, memory, latency)
        if not fits:
            rec.excluded[route["name"]] = over[route["name"]] = reasons
            continue
        fitting.append(route)
        keys = _keys(route, priority, id_split, ood_splits)
        if isinstance(keys, str):
            rec.excluded[route["name"]] = [keys]
            continue
        ranked.append((route, keys))

    higher = [(route, [k if priority is Priority.OOD else _negate(k) for k in keys]) for route, keys in ranked]
    by_name = {route["name"]: keys for route, keys in ranked}
    for rank, group in enumerate(_tie_groups(higher, 0), start=1):
        rec.ranking.append([_score(route, by_name[route["name"]], rank, id_split) for route in group])

    budget = _budget_words(memory, latency, reference)
    dropped = "; ".join(f"{name} ({', '.join(reasons)})" for name, reasons in over.items())
    rec.explanation.append(
        f"Budget: {budget}. {len(fitting)} of {len(routes)} routes fit"
        + (f"; over budget: {dropped}." if over else ".")
    )
    ranked_by = {
        Priority.OOD: f"mean OOD AUROC over {', '.join(ood_splits)} against {id_split!r} (higher is better)",
        Priority.CALIBRATION: f"ECE on {id_split!r}, then NLL (lower is better)",
        Priority.SELECTIVE: f"AURC on {id_split!r} (lower is better)",
    }[priority]
    rec.explanation.append(f"Priority {priority.value}: ranked by {ranked_by}; routes whose intervals overlap tie.")
    if not rec.ranking:
        if fitting:
            rec.explanation.append("No route within budget has the metric this priority needs.")
        else:
            cheapest = _cheapest(routes)
            rec.explanation.append(
                "No route fits the budget." + (f" The cheapest measured route is {cheapest}." if cheapest else "")
            )
    else:
        best = rec.best
        lead = best[0]
        rec.explanation.append(
            f"Recommended: {lead.name} ({_describe(lead)})."
            if len(best) == 1
            else f"Tied for first (intervals overlap): {', '.join(s.name for s in best)}; "
            f"the cheapest in latency is {min(best, key=lambda s: (s.latency is None, s.latency or 0)).name}."
        )
        if len(best) > 1:
            rec.explanation.extend(f"  {s.name}: {_describe(s)}" for s in best)
        elif len(rec.ranking) > 1:
            runner = rec.ranking[1][0]
            rec.explanation.append(f"Next: {runner.name} ({_describe(runner)}).")

    if teacher is not None and fitting:
        fidelities = [_fidelity(r) for r in fitting]
        if not any(f is not None and f >= threshold for f in fidelities):
            rec.warnings.append(
                f"no route within budget keeps fidelity to the teacher >= {threshold:g}: their uncertainty "
                "no longer ranks inputs like the teacher's (the ensemble's diversity is lost)"
            )
    elif teacher is None:
        rec.warnings.append("the results have no teacher route: fidelity could not be checked")
    if teacher is not None and rec.ranking and teacher["name"] not in {s.name for s in rec.best}:
        teacher_keys = _keys(teacher, priority, id_split, ood_splits)
        if not isinstance(teacher_keys, str) and intervals_overlap(rec.best[0].score, teacher_keys[0]):
            rec.warnings.append(
                f"{rec.best[0].name}'s interval overlaps the teacher's ({teacher['name']}: "
                f"{format_interval(teacher_keys[0])}): this test set cannot tell them apart on this priority"
            )
    for group in rec.ranking:
        for s in group:
            if s.fidelity is not None and s.fidelity < threshold and s.role != "teacher":
                rec.explanation.append(f"Note: {s.name} has fidelity {s.fidelity:.2f} < {threshold:g} (flagged).")
    return rec


def _fidelity(route: Mapping[str, Any]) -> float | None:
    return as_interval((route.get("fidelity") or {}).get("test"))[0]


def _score(route: Mapping[str, Any], keys: list, rank: int, id_split: str) -> RouteScore:
    relative = route.get("relative") or {}
    return RouteScore(
        name=route["name"],
        family=str(route.get("family")),
        rank=rank,
        score=tuple(keys[0]),
        secondary=tuple(keys[1]) if len(keys) > 1 else None,
        fidelity=_fidelity(route),
        peak_memory=_number(relative.get("peak_memory")),
        latency=_number(relative.get("latency")),
        role=route.get("role"),
    )


def _describe(s: RouteScore) -> str:
    parts = [format_interval(s.score)]
    if s.secondary is not None:
        parts.append(f"NLL {format_interval(s.secondary)}")
    parts.append(f"peak memory {_ratio(s.peak_memory)}, latency {_ratio(s.latency)}")
    if s.fidelity is not None:
        parts.append(f"fidelity {s.fidelity:.2f}")
    return ", ".join(parts)


def _budget_words(memory: float | None, latency: float | None, reference: str) -> str:
    bounds = [f"{label} <= {value:g}x" for label, value in (("peak memory", memory), ("latency", latency))
              if value is not None]
    return f"{' and '.join(bounds)} of {reference}" if bounds else "none (every route is allowed)"


def _cheapest(routes: Sequence[Mapping[str, Any]]) -> str | None:
    measured = []
    for route in routes:
        relative = route.get("relative") or {}
        memory, latency = _number(relative.get("peak_memory")), _number(relative.get("latency"))
        if memory is not None and latency is not None:
            measured.append((max(memory, latency), route["name"], memory, latency))
    if not measured:
        return None
    _, name, memory, latency = min(measured)
    return f"{name} (peak memory {memory:.2f}x, latency {latency:.2f}x)"
