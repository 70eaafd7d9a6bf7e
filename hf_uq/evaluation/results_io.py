"""Reading and writing what the protocol produces: `results.json` and the saved predictions next to it.

The format is specified in `docs/results_format.md`: one JSON document (schema `"hf_uq.results/1"`, no NaN: every
undefined number is `null`) and a `predictions/` folder holding `<route slug>/seed<k>.npz` with the arrays of
each split's [`Predictions`] under `"<split>/<field>"`, plus `index.json` (route name -> slug, seeds) so that the
folder can be read back without `results.json`. Also here: the `--budget` helpers shared by the protocol and
`hf-uq recommend` ([`parse_budget`], [`fits_budget`]).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .predict import Predictions

__all__ = [
    "BUDGET_KEYS",
    "RESULTS_FILE",
    "ROUTE_KEYS",
    "SCHEMA",
    "TOP_LEVEL_KEYS",
    "check_results",
    "collect_versions",
    "fits_budget",
    "jsonable",
    "load_predictions",
    "load_results",
    "parse_budget",
    "route_slug",
    "save_predictions",
    "write_results",
]

#: The schema tag of every `results.json` this version writes and reads.
SCHEMA = "hf_uq.results/1"
#: The file name inside a results folder.
RESULTS_FILE = "results.json"
#: Keys every results document has.
TOP_LEVEL_KEYS: tuple[str, ...] = (
    "schema", "command", "created", "versions", "seeds", "settings", "data", "routes", "predictions",
)
#: Keys every entry of `routes` has.
ROUTE_KEYS: tuple[str, ...] = (
    "name", "family", "knob", "quantization", "role", "models", "extra", "metrics", "fidelity", "budget",
    "relative", "fits_budget",
)
#: The keys `--budget` accepts: bounds on `relative.peak_memory` and `relative.latency`.
BUDGET_KEYS: tuple[str, ...] = ("memory", "latency")
_INDEX_FILE = "index.json"
_OPTIONAL_FIELDS = ("member_logits", "total_uncertainty", "aleatoric_uncertainty", "epistemic_uncertainty")
_SAVED_FIELDS = ("logits", "labels", "uncertainty") + _OPTIONAL_FIELDS
_SAFE_SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
_VERSION_PACKAGES = (
    "torch", "transformers", "timm", "datasets", "evaluate", "numpy", "accelerate", "optimum-quanto", "bitsandbytes",
)


# ------------------------------------------------------------------------------------------ JSON


def jsonable(value: Any) -> Any:
    """A copy of `value` that `json.dumps(..., allow_nan=False)` accepts: NaN and +-inf become `None`.

    numpy scalars and arrays become Python numbers and lists, tuples become lists, mapping keys become strings,
    paths become strings.

    Args:
        value (`Any`):
            Nested dicts / lists / tuples of numbers, strings, booleans, `None`, numpy values and paths.

    Returns:
        `Any`: the converted value.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, torch.Tensor):
        return jsonable(value.detach().cpu().tolist())
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise ValueError(f"cannot write a {type(value).__name__} to JSON: {value!r}")


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_results(results: Any, source: str = "results") -> dict[str, Any]:
    """Check a results document's structure: the schema tag, every top-level key ([`TOP_LEVEL_KEYS`]), a list of
    routes each with [`ROUTE_KEYS`], unique route names. Returns a shallow copy; a `ValueError` naming `source` and
    the problem otherwise. Shared by [`load_results`], [`write_results`], the model cards and `recommend`."""
    if not isinstance(results, Mapping):
        raise ValueError(f"{source}: a results document must be a JSON object, got {type(results).__name__}")
    if results.get("schema") != SCHEMA:
        raise ValueError(f"{source}: schema is {results.get('schema')!r}, expected {SCHEMA!r}")
    missing = [key for key in TOP_LEVEL_KEYS if key not in results]
    if missing:
        raise ValueError(f"{source}: missing keys {missing}")
    if not isinstance(results["routes"], list):
        raise ValueError(f"{source}: `routes` must be a list, got {type(results['routes']).__name__}")
    if not isinstance(results["seeds"], list):
        raise ValueError(f"{source}: `seeds` must be a list, got {type(results['seeds']).__name__}")
    names = []
    for i, route in enumerate(results["routes"]):
        if not isinstance(route, Mapping):
            raise ValueError(f"{source}: routes[{i}] must be an object, got {type(route).__name__}")
        missing = [key for key in ROUTE_KEYS if key not in route]
        if missing:
            raise ValueError(f"{source}: route {route.get('name', i)!r} is missing keys {missing}")
        names.append(route["name"])
    duplicates = sorted({str(n) for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"{source}: route names must be unique, repeated: {duplicates}")
    return dict(results)


def write_results(results: Mapping[str, Any], folder: str | os.PathLike) -> Path:
    """Write `results` (from [`build_results`]) to `<folder>/results.json`, atomically.

    Args:
        results (`Mapping[str, Any]`):
            A results document (`docs/results_format.md`). NaN / inf anywhere are written as `null`.
        folder (`str` or `os.PathLike`):
            The results folder; created when missing.

    Returns:
        `Path`: the path of the written `results.json`.
    """
    document = jsonable(check_results(results, "write_results"))
    text = json.dumps(document, indent=2, allow_nan=False, ensure_ascii=False) + "\n"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RESULTS_FILE
    _atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path


def _results_path(path_or_folder: str | os.PathLike) -> Path:
    path = Path(path_or_folder)
    return path / RESULTS_FILE if path.is_dir() else path


def load_results(path_or_folder: str | os.PathLike) -> dict[str, Any]:
    """Read a `results.json` back and check its schema.

    Args:
        path_or_folder (`str` or `os.PathLike`):
            The file, or the folder holding `results.json`.

    Returns:
        `dict[str, Any]`: the document. A `NaN` written by another tool is read as `None`.

    Raises:
        `FileNotFoundError`: no such file (the message names the path).
        `ValueError`: the file is not JSON, has another schema, or lacks keys (the message names them).
    """
    path = _results_path(path_or_folder)
    if not path.is_file():
        raise FileNotFoundError(f"no results file at {path}")
    try:
        document = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda _: None)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    return check_results(document, str(path))


def collect_versions() -> dict[str, str | None]:
    """The versions that `results.json` records: Python, hf_uq and the libraries behind the numbers.

    Returns:
        `dict[str, str | None]`: `python`, `hf_uq`, then `torch`, `transformers`, `timm`, `datasets`, `evaluate`,
        `numpy`, `accelerate`, `optimum-quanto`, `bitsandbytes`; `None` for a package that is not installed.
    """
    versions: dict[str, str | None] = {"python": platform.python_version(), "hf_uq": _version("hf_uq")}
    if versions["hf_uq"] is None:
        import sys

        versions["hf_uq"] = getattr(sys.modules.get("hf_uq"), "__version__", None)
    for name in _VERSION_PACKAGES:
        versions[name] = _version(name)
    return versions


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------------ --budget and ratios


def parse_budget(text: str) -> dict[str, float]:
    """Parse a `--budget` string such as `"memory=1.2,latency=1.5"`.

    Args:
        text (`str`):
            Comma-separated `key=value` parts; keys from [`BUDGET_KEYS`] (each at most once), values positive
            numbers: the largest allowed `relative.peak_memory` / `relative.latency` (x the reference route).

    Returns:
        `dict[str, float]`, e.g. `{"memory": 1.2, "latency": 1.5}`.

    Raises:
        `ValueError`: naming the part that is not `key=value`, has an unknown or repeated key, or a bad value.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"budget must be 'memory=X,latency=Y' (either or both), got {text!r}")
    result: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key or not value:
            raise ValueError(f"budget part {part.strip()!r} is not key=value (e.g. 'memory=1.2,latency=1.5')")
        if key not in BUDGET_KEYS:
            raise ValueError(f"budget part {part.strip()!r}: unknown key {key!r}; use {' or '.join(BUDGET_KEYS)}")
        if key in result:
            raise ValueError(f"budget part {part.strip()!r}: {key!r} is given twice")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"budget part {part.strip()!r}: {value!r} is not a number") from None
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"budget part {part.strip()!r}: the bound must be a positive number, got {value!r}")
        result[key] = number
    return result


def _check_limit(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"the {name} budget must be a positive number (x the reference), got {value!r}")
    return float(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    return float(value) if math.isfinite(value) else None


def fits_budget(route_dict: Mapping[str, Any], memory: float | None = None, latency: float | None = None) -> bool | None:
    """Whether a route of `results.json` fits a `--budget`.

    Args:
        route_dict (`Mapping[str, Any]`):
            A route entry of `results.json` (its `relative` is read).
        memory (`float`, *optional*):
            Largest allowed `relative.peak_memory` (peak memory / the reference's).
        latency (`float`, *optional*):
            Largest allowed `relative.latency` (the worst P99 latency ratio over batch sizes).

    Returns:
        `bool | None`: `None` when no bound is given or when a bounded ratio is unknown (no budget measured,
        or a zero reference); else whether every given bound holds.
    """
    memory, latency = _check_limit("memory", memory), _check_limit("latency", latency)
    if memory is None and latency is None:
        return None
    relative = route_dict.get("relative") if isinstance(route_dict, Mapping) else None
    if not isinstance(relative, Mapping):
        return None
    fits = True
    for bound, key in ((memory, "peak_memory"), (latency, "latency")):
        if bound is None:
            continue
        value = _finite(relative.get(key))
        if value is None:
            return None
        fits = fits and value <= bound
    return fits


def _relative(budget: Mapping[str, Any] | None, reference: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if budget is None or reference is None:
        return None

    def ratio(a: Any, b: Any) -> float | None:
        a, b = _finite(a), _finite(b)
        return None if a is None or b is None or b == 0 else a / b

    latency, ref_latency = budget.get("latency_ms") or {}, reference.get("latency_ms") or {}
    sizes = [size for size in latency if size in ref_latency]
    p50 = {s: ratio(latency[s].get("p50"), ref_latency[s].get("p50")) for s in sizes}
    p99 = {s: ratio(latency[s].get("p99"), ref_latency[s].get("p99")) for s in sizes}
    defined = [v for v in p99.values() if v is not None]
    return {
        "parameters": ratio(budget.get("parameters"), reference.get("parameters")),
        "flops": ratio(budget.get("flops"), reference.get("flops")),
        "weight_bytes": ratio(budget.get("weight_bytes"), reference.get("weight_bytes")),
        "peak_memory": ratio(budget.get("peak_memory_bytes"), reference.get("peak_memory_bytes")),
        "latency_p50": p50,
        "latency_p99": p99,
        "latency": max(defined) if defined and len(defined) == len(p99) else None,
    }


# ------------------------------------------------------------------------------------------ predictions


def route_slug(name: str) -> str:
    """A stable, filesystem-safe folder name for a route.

    A name that is already safe (lowercase letters, digits, `.`, `_`, `-`; at most 80 characters; not starting
    with a dot) is kept; any other name becomes its readable part plus 8 hex digits of its SHA-1, so that two
    names never share a folder, e.g. `"Asymmetric Duo (sidekick s)"` -> `"asymmetric-duo-sidekick-s-<hash>"`.

    Args:
        name (`str`):
            The route's display name.

    Returns:
        `str`: the slug.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a route name must be a non-empty string, got {name!r}")
    if _SAFE_SLUG.match(name):
        return name
    readable = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "route"
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"{readable}-{digest}"


def _seed_items(route: str, value: Any, seeds: Sequence[int] | None) -> list[tuple[int, Mapping[str, Predictions]]]:
    if isinstance(value, Mapping) and all(isinstance(k, (int, np.integer)) for k in value):
        items = [(int(k), v) for k, v in value.items()]
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        keys = list(range(len(value))) if seeds is None else [int(s) for s in seeds]
        if len(keys) != len(value):
            raise ValueError(f"route {route!r} has predictions of {len(value)} seeds but `seeds` lists {len(keys)}")
        items = list(zip(keys, value, strict=True))
    else:
        raise ValueError(
            f"predictions of route {route!r} must be a list over seeds (or a seed -> splits mapping) of "
            f"{{split: Predictions}}, got {type(value).__name__}"
        )
    for seed, splits in items:
        if not isinstance(splits, Mapping):
            raise ValueError(f"predictions of route {route!r}, seed {seed}: expected {{split: Predictions}}")
        for split, predictions in splits.items():
            if not isinstance(split, str) or not split or "/" in split:
                raise ValueError(f"split names must be non-empty strings without '/', got {split!r}")
            if not isinstance(predictions, Predictions):
                raise ValueError(
                    f"route {route!r}, seed {seed}, split {split!r}: expected a Predictions, "
                    f"got {type(predictions).__name__}"
                )
    return items


def save_predictions(
    folder: str | os.PathLike,
    predictions_by_route: Mapping[str, Any],
    *,
    seeds: Sequence[int] | None = None,
) -> Path:
    """Save every route's predictions as `<folder>/<route slug>/seed<k>.npz` (+ `<folder>/index.json`).

    Each npz holds, for each split, the [`Predictions`] fields under `"<split>/<field>"`: `logits`, `labels`,
    `uncertainty`, and the optional fields the route has. `probs` is not stored: [`load_predictions`] recomputes
    it from the logits exactly as [`predict`] does.

    Args:
        folder (`str` or `os.PathLike`):
            The predictions folder (by convention `<results folder>/predictions`); created when missing.
        predictions_by_route (`Mapping[str, Any]`):
            Route name -> list over seeds of `{split: Predictions}` (the input of [`build_results`]), or route
            name -> `{seed: {split: Predictions}}`.
        seeds (`Sequence[int]`, *optional*):
            The seed of each list entry (names the files); defaults to 0, 1, ...

    Returns:
        `Path`: the folder.
    """
    if not isinstance(predictions_by_route, Mapping) or not predictions_by_route:
        raise ValueError("`predictions_by_route` must be a non-empty mapping of route name -> predictions")
    folder = Path(folder)
    slugs: dict[str, str] = {}
    plan = []
    for route, value in predictions_by_route.items():
        slug = route_slug(route)
        if slug in slugs.values():
            other = next(name for name, s in slugs.items() if s == slug)
            raise ValueError(f"routes {other!r} and {route!r} share the folder name {slug!r}: rename one")
        slugs[route] = slug
        plan.append((slug, _seed_items(route, value, seeds)))
    all_seeds = sorted({seed for _, items in plan for seed, _ in items})
    for slug, items in plan:
        (folder / slug).mkdir(parents=True, exist_ok=True)
        for seed, splits in items:
            arrays = {
                f"{split}/{field}": getattr(predictions, field)
                for split, predictions in splits.items()
                for field in _SAVED_FIELDS
                if getattr(predictions, field) is not None
            }
            path = folder / slug / f"seed{seed}.npz"
            _atomic_write(path, lambda tmp, arrays=arrays: _savez(tmp, arrays))
    index = {"routes": slugs, "seeds": all_seeds}
    text = json.dumps(index, indent=2, ensure_ascii=False) + "\n"
    _atomic_write(folder / _INDEX_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return folder


def _savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as handle:  # a file object: numpy would otherwise append ".npz" to the temp name
        np.savez_compressed(handle, **arrays)


def _read_npz(path: Path) -> dict[str, Predictions]:
    if not path.is_file():
        raise FileNotFoundError(f"no saved predictions at {path}")
    fields: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            split, _, field = key.rpartition("/")
            if not split or field not in _SAVED_FIELDS:
                raise ValueError(f"{path}: unexpected array {key!r} (expected '<split>/<field>')")
            fields.setdefault(split, {})[field] = data[key]
    result = {}
    for split, values in fields.items():
        missing = [f for f in ("logits", "labels", "uncertainty") if f not in values]
        if missing:
            raise ValueError(f"{path}: split {split!r} lacks {[f'{split}/{f}' for f in missing]}")
        probs = torch.from_numpy(values["logits"]).double().softmax(-1).numpy()
        result[split] = Predictions(probs=probs, **values)
    return result


def load_predictions(
    folder: str | os.PathLike, results: Mapping[str, Any] | str | os.PathLike | None = None
) -> dict[str, list[dict[str, Predictions]]]:
    """Read predictions saved by [`save_predictions`], in the shape [`build_results`] takes.

    Args:
        folder (`str` or `os.PathLike`):
            The predictions folder, or a results folder (holding `results.json`, whose `predictions` entry then
            names the predictions folder).
        results (`Mapping`, `str` or `os.PathLike`, *optional*):
            The results document (or its path): its routes (in order) and seeds are read. Without it, the
            folder's `index.json` names the routes; failing that, the route keys are the folder names.

    Returns:
        `dict[str, list[dict[str, Predictions]]]`: route name -> list over seeds (in the order of `results["seeds"]`,
        else ascending) of `{split: Predictions}`.
    """
    folder = Path(folder)
    if results is None and (folder / RESULTS_FILE).is_file():
        results = load_results(folder)
        if results["predictions"] is None:
            raise ValueError(f"{folder / RESULTS_FILE} records no predictions folder (`predictions` is null)")
        folder = folder / results["predictions"]
    elif results is not None and not isinstance(results, Mapping):
        results = load_results(results)
    if not folder.is_dir():
        raise FileNotFoundError(f"no predictions folder at {folder}")
    if results is not None:
        routes = {route["name"]: route_slug(route["name"]) for route in results["routes"]}
        seeds = [int(s) for s in results["seeds"]]
    elif (folder / _INDEX_FILE).is_file():
        try:
            index = json.loads((folder / _INDEX_FILE).read_text(encoding="utf-8"))
            routes, seeds = dict(index["routes"]), [int(s) for s in index["seeds"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{folder / _INDEX_FILE} is not a valid predictions index: {error}") from None
    else:
        routes = {p.name: p.name for p in sorted(folder.iterdir()) if p.is_dir()}
        found = {int(m.group(1)) for d in routes for f in (folder / d).iterdir()
                 if (m := re.fullmatch(r"seed(-?\d+)\.npz", f.name))}
        seeds = sorted(found)
    if not routes:
        raise ValueError(f"{folder} holds no saved predictions")
    return {
        name: [_read_npz(folder / slug / f"seed{seed}.npz") for seed in seeds] for name, slug in routes.items()
    }

