"""`hf_uq.quantize`: post-training quantization of any image classifier, with a backend chosen by name.

The backends live in their own files (`quanto.py`, `bitsandbytes.py`) and are imported only when used, after a
check that their package is installed. Both expose the same small interface (see [`_Backend`]); this module does
what is common: validate the request, pick the layers (every `nn.Linear` / `nn.Conv2d` the backend can take,
minus the user's `skip` patterns), run the backend, and record what happened in a [`QuantizationInfo`].

Layers are found by walking the module tree, so hf_uq composites (duos, deep ensembles, temperature-scaled
models, ...) and future hf_uq models work without special cases. Only layers of exactly a supported type are
quantized (or subclasses that keep the parent's `forward`): a layer that subclasses `nn.Linear` with a forward of
its own would lose its behaviour if replaced by a quantized `nn.Linear`, so it is skipped and listed instead.
hf_uq's own [`~hf_uq.layers.BatchEnsembleLinear`] is a supported type for both backends: each has a quantized
variant that quantizes the shared weight and keeps the per-member fast weights and biases in floating point.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

import torch
from torch import nn

from ..layers.batch_ensemble import BatchEnsembleLinear

__all__ = [
    "BACKENDS",
    "HEADS",
    "QuantizationInfo",
    "QuantizationSkipWarning",
    "available_backends",
    "calibration_batches",
    "is_backend_available",
    "quantize",
]

#: Backend name -> (module of this package, import name checked for availability, pip requirement).
_BACKEND_SPECS: dict[str, tuple[str, str, str]] = {
    "quanto": ("quanto", "optimum.quanto", "optimum-quanto"),
    "bitsandbytes": ("bitsandbytes", "bitsandbytes", "bitsandbytes"),
}
#: The backends `quantize` knows, whether installed or not.
BACKENDS: tuple[str, ...] = tuple(_BACKEND_SPECS)
_BACKEND_ALIASES = {"optimum-quanto": "quanto", "optimum.quanto": "quanto", "bnb": "bitsandbytes"}

#: A `skip` entry meaning "every classification head": each `nn.Linear` (or `BatchEnsembleLinear`) whose
#: `out_features` equals `model.config.num_labels` (the head of a plain classifier, of a BatchEnsembleViT, and the
#: heads of every member of a composite).
HEADS = "heads"


class QuantizationSkipWarning(UserWarning):
    """Some layers could not be quantized by the chosen backend and were kept in floating point."""


class _Backend(Protocol):
    """What `quantize` needs from a backend module (see `quanto.py` and `bitsandbytes.py`)."""

    NAME: str
    WEIGHTS: Mapping[str, Any]
    ACTIVATIONS: Mapping[str, Any]

    def check_request(self, weights: str, activations: str | None, device: torch.device) -> None: ...

    def skip_reason(self, module: nn.Module, weights: str, activations: str | None,
                    options: Mapping[str, Any]) -> str | None: ...

    def apply(
        self, model: nn.Module, names: list[str], weights: str, activations: str | None,
        calibrate: Callable[[nn.Module], None] | None, options: dict[str, Any],
    ) -> dict[str, dict[str, Any]]: ...

    def layer_state(self, module: nn.Module) -> dict[str, torch.Tensor]: ...

    def restore(self, model: nn.Module, modules: Mapping[str, Mapping[str, Any]],
                state: Mapping[str, torch.Tensor]) -> None: ...


@dataclass
class QuantizationInfo:
    """
    What [`quantize`] did to a model; stored on the quantized model as `model.hf_uq_quantization` and in its
    `config.json` (`quantization_config`, `quant_method="hf_uq"`).

    Args:
        backend (`str`): `"quanto"` or `"bitsandbytes"`.
        weights (`str`): weight format, e.g. `"int8"`, `"int4"`.
        activations (`str`, *optional*): activation format (`"int8"`), or `None` for weight-only quantization.
        modules (`dict[str, dict]`): per quantized layer, the backend's settings needed to rebuild it on load
            (for optimum-quanto this includes its quantization map entry).
        skipped (`dict[str, str]`): layers with weights that stayed in floating point, with the reason.
        options (`dict`): backend options passed to `quantize` (JSON values).
    """

    backend: str
    weights: str
    activations: str | None
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def quantized(self) -> list[str]:
        """Names of the quantized layers."""
        return list(self.modules)

    @property
    def label(self) -> str:
        """A short name such as `"quanto w8a8"` or `"bitsandbytes w4"`."""
        bits = "".join(c for c in self.weights if c.isdigit()) or self.weights
        act = "".join(c for c in self.activations if c.isdigit()) if self.activations else ""
        return f"{self.backend} w{bits}" + (f"a{act or self.activations}" if self.activations else "")

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "weights": self.weights, "activations": self.activations,
                "modules": copy.deepcopy(self.modules), "skipped": dict(self.skipped),
                "options": copy.deepcopy(self.options)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuantizationInfo:
        return cls(backend=data["backend"], weights=data["weights"], activations=data.get("activations"),
                   modules={k: dict(v) for k, v in (data.get("modules") or {}).items()},
                   skipped=dict(data.get("skipped") or {}), options=dict(data.get("options") or {}))


# ------------------------------------------------------------------------------------------ backends


def _canonical_backend(backend: Any) -> str:
    if not isinstance(backend, str):
        raise ValueError(f"`backend` must be one of {BACKENDS}, got {backend!r}")
    name = _BACKEND_ALIASES.get(backend.lower(), backend.lower())
    if name not in _BACKEND_SPECS:
        raise ValueError(f"Unknown quantization backend {backend!r}; choose one of {BACKENDS}")
    return name


def is_backend_available(backend: str) -> bool:
    """Whether the package behind `backend` (`"quanto"` or `"bitsandbytes"`) is installed (nothing is imported)."""
    package = _BACKEND_SPECS[_canonical_backend(backend)][1]
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a missing parent package (`optimum`)
        return False


def available_backends() -> list[str]:
    """The installed quantization backends, in the order of [`BACKENDS`]."""
    return [name for name in BACKENDS if is_backend_available(name)]


def load_backend(backend: str) -> _Backend:
    """The backend module, imported on first use; `ValueError` telling what to install when it is missing."""
    name = _canonical_backend(backend)
    module_name, _, requirement = _BACKEND_SPECS[name]
    if not is_backend_available(name):
        raise ValueError(
            f"The {name!r} quantization backend needs the `{requirement}` package, which is not installed: "
            f"run `pip install {requirement}` (or `pip install 'hf_uq[quant]'` for every backend)"
        )
    try:
        return importlib.import_module(f".{module_name}", __package__)
    except ImportError as error:  # installed but broken (e.g. a missing native library)
        raise ValueError(
            f"The {name!r} quantization backend is installed but cannot be imported ({error}); reinstall it with "
            f"`pip install -U {requirement}`"
        ) from error


def _canonical_format(value: Any, supported: Mapping[str, Any], what: str, backend: str) -> str:
    """`"int8"` from `"int8"`, `"qint8"`, `"INT8"` or `8`; `ValueError` listing the supported formats otherwise."""
    text = f"int{value}" if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(text, str):
        text = text.lower()
        text = text[1:] if text.startswith("q") and text[1:] in supported else text
        if text in supported:
            return text
    raise ValueError(f"{backend} cannot quantize {what} to {value!r}; supported: {sorted(supported)}")


# ------------------------------------------------------------------------------------------ layer selection


def _keeps_forward(module: nn.Module, base: type[nn.Module]) -> bool:
    """True for `base` itself, or a subclass that does not override `forward` (safe to swap for a quantized one)."""
    return isinstance(module, base) and type(module).forward is base.forward


def is_plain(module: nn.Module, *bases: type[nn.Module]) -> bool:
    """Whether `module` is one of `bases` (or a subclass keeping its forward): the layers backends may replace."""
    return any(_keeps_forward(module, base) for base in bases)


def _has_matrix_weight(module: nn.Module) -> bool:
    weight = module._parameters.get("weight")
    return isinstance(weight, torch.Tensor) and weight.ndim >= 2


def _num_labels(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    num_labels = getattr(config, "num_labels", None)
    if not isinstance(num_labels, int):
        raise ValueError(f"skip={HEADS!r} needs a model with `config.num_labels`; list the head layers by name instead")
    return num_labels


def _check_skip(skip: Any) -> list[str]:
    if skip is None:
        return []
    patterns = [skip] if isinstance(skip, str) else list(skip) if isinstance(skip, Iterable) else None
    if patterns is None or not all(isinstance(p, str) and p for p in patterns):
        raise ValueError(f"`skip` must be a layer name / pattern or a list of them, got {skip!r}")
    return patterns


def _requested_skip(name: str, module: nn.Module, patterns: list[str], num_labels: int | None) -> str | None:
    """The pattern that excludes `name`, if any: exact name, a parent module's name, or an fnmatch pattern."""
    for pattern in patterns:
        if pattern == HEADS:
            if isinstance(module, (nn.Linear, BatchEnsembleLinear)) and module.out_features == num_labels:
                return pattern
        elif name == pattern or name.startswith(pattern + ".") or fnmatchcase(name, pattern):
            return pattern
    return None


def select_layers(
    model: nn.Module, backend: _Backend, weights: str, activations: str | None, skip: list[str],
    options: Mapping[str, Any],
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(layers to quantize, layers skipped because asked, layers skipped because the backend cannot take them)."""
    num_labels = _num_labels(model) if HEADS in skip else None
    chosen: list[str] = []
    requested: dict[str, str] = {}
    automatic: dict[str, str] = {}
    for name, module in model.named_modules():
        if not name:
            continue
        reason = backend.skip_reason(module, weights, activations, options)
        if reason is None:
            pattern = _requested_skip(name, module, skip, num_labels)
            if pattern is None:
                chosen.append(name)
            else:
                requested[name] = f"skipped as requested ({pattern!r})"
        elif _has_matrix_weight(module):
            automatic[name] = reason
    return chosen, requested, automatic


# ------------------------------------------------------------------------------------------ calibration


def calibration_batches(
    data: Any, image_processor: Any | None = None, batch_size: int = 32, max_batches: int | None = None
) -> Iterator[dict[str, torch.Tensor]]:
    """Forward keyword arguments (`{"pixel_values": ...}`) for activation calibration.

    Args:
        data: a `(N, C, H, W)` tensor; a `datasets.Dataset` (raw `image` column with `image_processor`, or one
            that yields `pixel_values`, e.g. [`~hf_uq.data.with_pixel_values`]); or any iterable of tensors or of
            mappings of forward inputs (`labels` / `label` are dropped).
        image_processor: the model's image processor, for datasets with an `image` column.
        batch_size: rows per batch for tensors and datasets.
        max_batches: stop after this many batches.
    """
    if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1):
        raise ValueError(f"`max_calibration_batches` must be a positive integer or None, got {max_batches!r}")
    count = 0
    for batch in _raw_batches(data, image_processor, batch_size):
        if max_batches is not None and count >= max_batches:
            return
        count += 1
        yield batch
    if count == 0:
        raise ValueError("`calibration_dataset` yielded no batches")


def _raw_batches(data: Any, image_processor: Any | None, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    from datasets import Dataset, DatasetDict

    if isinstance(data, torch.Tensor):
        if data.ndim != 4:
            raise ValueError(f"a calibration tensor must be (N, C, H, W) pixel values, got shape {tuple(data.shape)}")
        for start in range(0, len(data), batch_size):
            yield {"pixel_values": data[start : start + batch_size]}
    elif isinstance(data, DatasetDict):
        raise ValueError(f"pass one split as `calibration_dataset` (e.g. dataset['validation']), not {sorted(data)}")
    elif isinstance(data, Dataset):
        from ..evaluation.predict import iter_batches

        for batch in iter_batches(data, image_processor, batch_size):
            batch.pop("labels", None)
            yield batch
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        for item in data:
            if isinstance(item, torch.Tensor):
                yield {"pixel_values": item}
            elif isinstance(item, Mapping):
                yield {k: v for k, v in item.items() if k not in ("labels", "label") and isinstance(v, torch.Tensor)}
            else:
                raise ValueError(f"calibration batches must be tensors or mappings of tensors, got {type(item).__name__}")
    else:
        raise ValueError(
            "`calibration_dataset` must be a pixel-values tensor, a datasets.Dataset or an iterable of batches, "
            f"got {type(data).__name__}"
        )


def _calibrator(batches: Iterable[dict[str, torch.Tensor]]) -> Callable[[nn.Module], None]:
    """Runs the batches through a model in eval mode without gradients (modes restored afterwards)."""

    def run(model: nn.Module) -> None:
        device = next(iter(model.parameters())).device
        modes = [(m, m.training) for m in model.modules()]
        model.eval()
        try:
            with torch.no_grad():
                for batch in batches:
                    model(**{k: v.to(device) for k, v in batch.items()})
        finally:
            for module, training in modes:
                module.training = training

    return run


# ------------------------------------------------------------------------------------------ quantize


def quantize(
    model: nn.Module,
    backend: str = "quanto",
    weights: str | int = "int8",
    activations: str | int | None = None,
    calibration_dataset: Any | None = None,
    skip: str | Sequence[str] | None = None,
    *,
    image_processor: Any | None = None,
    calibration_batch_size: int = 32,
    max_calibration_batches: int | None = None,
    inplace: bool = False,
    **backend_options: Any,
) -> nn.Module:
    """
    Quantize an image classifier's layers with optimum-quanto or bitsandbytes; the outputs API is unchanged.

    Works for plain transformers / timm-wrapper classifiers and for every hf_uq model: the module tree is walked
    and every `nn.Linear` (and, for quanto, `nn.Conv2d`) the backend can take is replaced by its quantized
    counterpart. A [`~hf_uq.layers.BatchEnsembleLinear`] (BatchEnsembleViT) gets its shared weight quantized by
    either backend while its per-member fast weights and biases stay float. Layers the backend cannot take
    (bitsandbytes convolutions, bitsandbytes 4-bit layers whose `out_features` is not a multiple of 32 on CPU,
    subclasses of `nn.Linear` with a forward of their own) stay in floating point; they are listed in
    `model.hf_uq_quantization.skipped` and announced by a [`QuantizationSkipWarning`].

    Args:
        model (`nn.Module`): the classifier. Not modified unless `inplace=True` (a deep copy is quantized).
        backend (`str`, *optional*, defaults to `"quanto"`): `"quanto"` (optimum-quanto) or `"bitsandbytes"`.
        weights (`str`, *optional*, defaults to `"int8"`): quanto: `"int8"`, `"int4"`, `"int2"`, `"float8"`;
            bitsandbytes: `"int8"` (LLM.int8()), `"int4"` (= `"nf4"`), `"nf4"`, `"fp4"`.
        activations (`str`, *optional*): quanto only: `"int8"` (or `"float8"`) for static activation
            quantization, which needs `calibration_dataset`. bitsandbytes' int8 matmul quantizes activations
            on the fly by itself, so it takes `None` only.
        calibration_dataset (*optional*): data whose activation ranges calibrate static activation scales
            (`optimum.quanto.Calibration`): a pixel-values tensor, a `datasets.Dataset` (with `image_processor`
            for raw images) or an iterable of batches. Ignored for weight-only quantization.
        skip (`str` or `list[str]`, *optional*): layers kept in floating point: exact names, parent module names
            (`"small"` skips a duo's whole sidekick), fnmatch patterns (`"*.classifier"`), or [`HEADS`]
            (`"heads"`: every classification head).
        image_processor (*optional*): for a calibration dataset with an `image` column.
        calibration_batch_size (`int`, *optional*, defaults to 32): batch size of calibration forwards.
        max_calibration_batches (`int`, *optional*): cap on calibration forwards.
        inplace (`bool`, *optional*, defaults to `False`): quantize `model` itself instead of a copy.
        backend_options: backend settings: quanto `momentum` (calibration) and `quantize_outputs` (also quantize
            layer outputs, optimum-quanto's streamline scheme; default `False`); bitsandbytes `threshold` (int8
            outlier threshold, default 0), `compress_statistics` and `blocksize` (4-bit).

    Returns:
        The quantized model, same class and forward outputs, with `hf_uq_quantization` ([`QuantizationInfo`]).
        A `PreTrainedModel` also gets `config.quantization_config` and saves with `save_pretrained`; reload it
        with [`load_quantized`] or, after `import hf_uq`, `AutoModelForImageClassification.from_pretrained`.

    Raises:
        ValueError: unknown backend or format, a backend that is not installed, a combination this hardware
            cannot run, activations without calibration data, or a model that is already quantized.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    if getattr(model, "hf_uq_quantization", None) is not None or getattr(model, "hf_quantizer", None) is not None:
        raise ValueError("`model` is already quantized; quantize its floating-point original instead")
    name = _canonical_backend(backend)
    impl = load_backend(name)
    weights = _canonical_format(weights, impl.WEIGHTS, "weights", name)
    if activations is not None:
        activations = _canonical_format(activations, impl.ACTIVATIONS, "activations", name)
    skip_patterns = _check_skip(skip)
    parameter = next(iter(model.parameters()), None)
    if parameter is None:
        raise ValueError("`model` has no parameters to quantize")
    if parameter.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"`model` must hold floating-point weights, got {parameter.dtype}")
    impl.check_request(weights, activations, parameter.device)
    if activations is not None and calibration_dataset is None:
        raise ValueError(
            f"activations={activations!r} needs `calibration_dataset` (a few hundred in-distribution images, e.g. the "
            "validation split) to set static activation scales; or pass activations=None for weight-only quantization"
        )
    calibrate = None
    if activations is not None:
        calibrate = _calibrator(calibration_batches(calibration_dataset, image_processor, calibration_batch_size,
                                                    max_calibration_batches))
    chosen, requested, automatic = select_layers(model, impl, weights, activations, skip_patterns, backend_options)
    if not chosen:
        reasons = sorted(set((requested or automatic).values()))[:3]
        raise ValueError(f"{name} found no layer to quantize in {type(model).__name__}: {'; '.join(reasons)}")
    if not inplace:
        model = copy.deepcopy(model)
    modules = impl.apply(model, chosen, weights, activations, calibrate, dict(backend_options))
    info = QuantizationInfo(name, weights, activations, modules, {**requested, **automatic}, dict(backend_options))
    if automatic:
        shown = ", ".join(f"{k} ({v})" for k, v in list(automatic.items())[:4])
        more = f" and {len(automatic) - 4} more" if len(automatic) > 4 else ""
        warnings.warn(f"{info.label}: kept {len(automatic)} layer(s) in floating point: {shown}{more}; see "
                      "`model.hf_uq_quantization.skipped`", QuantizationSkipWarning, stacklevel=2)
    from .serialization import attach

    attach(model, info)
    return model
