"""Find and load hf_uq's `evaluate` metric modules, and the input checks those modules share.

The modules live in the top-level ``metrics/<name>/`` folder of a checkout, where
``evaluate.load("metrics/<name>")`` reads them. pyproject.toml maps the package ``hf_uq.metrics``
to that folder, so a wheel carries them (with their cards) as ``hf_uq/metrics/<name>/`` and
``load_metric(name)`` works after a plain ``pip install``, offline.

Nothing here imports ``evaluate`` or ``datasets`` at module level: each costs seconds to import.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .functional import msp, top_label
from .functional._validation import check_labels, check_probs, check_scores, to_numpy

if TYPE_CHECKING:
    import datasets
    import evaluate

__all__ = ["available_metrics", "load_metric", "metrics_dir"]

# Compute-time options of the hf_uq metrics. `evaluate.combine` passes every keyword to every
# module, so each module ignores the others' options and rejects anything else.
SIBLING_OPTIONS = frozenset({"n_bins", "binning", "norm", "uncertainty", "accuracy"})
# The config that turns `uncertainty` into an input accumulated by `add_batch`.
WITH_UNCERTAINTY = "with_uncertainty"


def metrics_dir() -> Path:
    """The folder that holds one sub-folder per metric module.

    That is the package ``hf_uq.metrics``: ``hf_uq/metrics/`` in a wheel, the checkout's
    ``metrics/`` in an editable install. An editable install made before pyproject.toml mapped
    ``hf_uq.metrics`` (or a checkout on ``PYTHONPATH``) does not know that package; then the
    ``metrics/`` folder of the checkout hf_uq was imported from is used.
    """
    spec = importlib.util.find_spec("hf_uq.metrics")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "metrics" / "__init__.py").is_file():
        return checkout / "metrics"
    raise FileNotFoundError(
        "hf_uq's metric modules were not found: neither the package `hf_uq.metrics` nor a "
        f"`metrics/` folder next to {Path(__file__).resolve().parent} exists; reinstall hf_uq"
    )


def available_metrics() -> list[str]:
    """Names accepted by :func:`load_metric` (folders ``<name>/`` holding ``<name>.py``)."""
    root = metrics_dir()
    return sorted(d.name for d in root.iterdir() if (d / f"{d.name}.py").is_file())


def load_metric(name: str, **kwargs: Any) -> evaluate.EvaluationModule:
    """Load one of hf_uq's metric modules with ``evaluate.load``, from the installed files.

    Works offline: the module is read from disk, never from the Hub. ``kwargs`` go to
    ``evaluate.load`` (e.g. ``config_name="with_uncertainty"``, ``keep_in_memory=True``,
    ``cache_dir=...``, ``experiment_id=...``).

    Raises:
        ValueError: ``name`` is not one of :func:`available_metrics`.
    """
    names = available_metrics()
    if name not in names:
        raise ValueError(f"unknown hf_uq metric {name!r}; available metrics: {', '.join(names)}")
    import evaluate

    return evaluate.load(str(metrics_dir() / name), **kwargs)


# ----------------------------------------------------------------------------------------------
# Shared by the modules in metrics/: features, structural checks per batch, validation at compute.


def probability_features(config_name: str, *, uncertainty_config: bool) -> datasets.Features:
    """``predictions`` (a probability row per sample) and integer ``references``; with the
    ``with_uncertainty`` config (when the metric offers it) also a float ``uncertainty``."""
    import datasets

    configs = ["default", WITH_UNCERTAINTY] if uncertainty_config else ["default"]
    if config_name not in configs:
        raise ValueError(f"unknown config_name {config_name!r}; this metric has {configs}")
    features = {
        "predictions": datasets.Sequence(datasets.Value("float64")),
        "references": datasets.Value("int64"),
    }
    if config_name == WITH_UNCERTAINTY:
        features["uncertainty"] = datasets.Value("float64")
    return datasets.Features(features)


def score_features(config_name: str) -> datasets.Features:
    """One float ``predictions`` score and one integer ``references`` per sample."""
    import datasets

    if config_name != "default":
        raise ValueError(f"unknown config_name {config_name!r}; this metric has ['default']")
    return datasets.Features(
        {"predictions": datasets.Value("float64"), "references": datasets.Value("int64")}
    )


class InputChecks:
    """Mixin for an ``evaluate.EvaluationModule``: checks each batch before evaluate stores it.

    evaluate casts inputs to the declared features on the way in: a label of 1.5 silently
    becomes 1, a label "1" is parsed, NaN labels fail with a bare "cannot convert float NaN to
    integer", and a wrong number of dimensions gives a generic "don't match the expected format".
    So dtypes, shapes, lengths and whole-number labels are checked here first; values (NaN, rows
    summing to 1, label range) are checked by hf_uq.functional at compute time, where indices
    refer to the whole dataset.
    """

    #: number of dimensions of each input in a batch
    INPUT_NDIM: dict[str, int] = {"predictions": 2, "references": 1, "uncertainty": 1}
    #: inputs holding integer labels (floats must be whole numbers)
    LABEL_INPUTS: tuple[str, ...] = ("references",)
    #: whether the metric has the `with_uncertainty` config
    UNCERTAINTY_CONFIG: bool = False

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Compute the metric on everything added so far plus the given inputs.

        Args:
            predictions: model outputs (optional when batches were added).
            references: labels (optional when batches were added).
            **kwargs: the metric's options.
        """
        nothing_added = self.writer is None and self.num_process == 1
        if nothing_added and predictions is None and references is None:
            # evaluate raises an AttributeError here when keep_in_memory=True
            raise ValueError(
                "no samples: call add() or add_batch() before compute(), or pass "
                "`predictions` and `references` to compute()"
            )
        return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch of predictions and references (hf_uq checks shapes and labels first).

        Args:
            predictions: model outputs for the batch.
            references: labels for the batch.
        """
        batch = {"predictions": predictions, "references": references, **kwargs}
        return super().add_batch(**self._checked(batch, batch=True))

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one prediction and reference (hf_uq checks shapes and labels first).

        Args:
            prediction: model output for one sample.
            reference: label for one sample.
        """
        # evaluate.combine calls add(predictions=..., references=...); evaluate lets those win
        example = {"predictions": prediction, "references": reference, **kwargs}
        return super().add(**self._checked(example, batch=False))

    def _checked(self, inputs: dict[str, Any], batch: bool) -> dict[str, Any]:
        names = self._feature_names()
        extra = [k for k in inputs if k not in names]
        if "uncertainty" in extra and self.UNCERTAINTY_CONFIG:
            raise ValueError(
                "`uncertainty` is not an input of this config: pass it to compute() for the whole "
                f"dataset, or load the metric with config_name={WITH_UNCERTAINTY!r} to add it "
                "batch by batch"
            )
        if extra:
            return inputs  # evaluate's add/add_batch names the bad inputs
        checked, lengths = {}, {}
        for name, value in inputs.items():
            if value is None:
                checked[name] = value
                continue
            arr = to_numpy(value, name)
            if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
                raise ValueError(f"`{name}` must be numeric, got dtype {arr.dtype}")
            ndim = self.INPUT_NDIM[name] - (0 if batch else 1)
            if arr.ndim != ndim and not (batch and arr.size == 0):
                what = "a batch" if batch else "one sample"
                raise ValueError(
                    f"`{name}` for {what} must have {ndim} dimension(s), got shape {arr.shape}"
                )
            if name in self.LABEL_INPUTS and arr.dtype.kind == "f":
                _check_whole(arr.reshape(-1), name)
            if batch:
                lengths[name] = len(arr)
            checked[name] = arr if arr.ndim else arr.item()
        if len(set(lengths.values())) > 1:
            desc = ", ".join(f"`{k}` has {n}" for k, n in lengths.items())
            raise ValueError(f"length mismatch in the batch: {desc} samples")
        return checked


def _check_whole(arr: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(arr) | (arr != np.round(arr))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"`{name}` must hold integer labels, got {arr[i]} at index {i}")


def check_sibling_options(metric: str, options: dict[str, Any]) -> None:
    """Accept (and ignore) another hf_uq metric's compute options; reject anything else."""
    unknown = sorted(set(options) - SIBLING_OPTIONS)
    if unknown:
        raise TypeError(
            f"{metric} got unexpected keyword argument(s) {unknown}; the options of the other "
            f"hf_uq metrics ({', '.join(sorted(SIBLING_OPTIONS))}) are ignored, nothing else is"
        )


def _require_samples(predictions: Any) -> None:
    if len(predictions) == 0:
        raise ValueError("no samples: `predictions` and `references` are empty")


def probs_and_labels(predictions: Any, references: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated (N, C) probabilities and (N,) labels, errors naming evaluate's input names."""
    _require_samples(predictions)
    if isinstance(predictions, list):
        widths = sorted({len(row) for row in predictions})
        if len(widths) > 1:
            raise ValueError(
                f"`predictions` rows have different lengths ({widths[0]} and {widths[-1]} classes):"
                " every row must hold one probability per class"
            )
    probs = check_probs(predictions, "predictions")
    labels = check_labels(references, probs.shape[1], probs.shape[0], "references")
    return probs, labels


def selective_inputs(predictions: Any, references: Any, uncertainty: Any) -> tuple[Any, np.ndarray]:
    """``(uncertainty, correct)`` for the selective metrics; msp when ``uncertainty`` is None."""
    probs, labels = probs_and_labels(predictions, references)
    correct = top_label(probs)[1] == labels
    if uncertainty is None:
        return msp(probs), correct
    u = check_scores(uncertainty, "uncertainty")
    if len(u) != len(labels):
        raise ValueError(
            f"length mismatch: `uncertainty` has {len(u)} entries but there are "
            f"{len(labels)} samples"
        )
    return u, correct


def ood_groups(predictions: Any, references: Any) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the in-distribution (reference 0) and OOD (reference 1) samples."""
    _require_samples(predictions)
    scores = check_scores(predictions, "predictions")
    refs = to_numpy(references, "references").reshape(-1)
    if len(refs) != len(scores):
        raise ValueError(
            f"length mismatch: `predictions` has {len(scores)} and `references` {len(refs)} samples"
        )
    is_ood = refs == 1
    bad = ~is_ood & (refs != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"`references` must be 1 (OOD) or 0 (in-distribution), got {refs[i]} at index {i}"
        )
    if is_ood.all() or not is_ood.any():
        only = "OOD (1)" if is_ood.all() else "in-distribution (0)"
        raise ValueError(
            f"`references` hold only {only} samples: OOD metrics need both classes present"
        )
    return scores[~is_ood], scores[is_ood]
