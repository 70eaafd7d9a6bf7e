"""Saving and loading hf_uq-quantized models through the transformers quantizer registry.

A quantized folder is a normal transformers folder plus one file:

- `config.json` carries `quantization_config = {"quant_method": "hf_uq", "backend", "weights", "activations",
  "modules", "skipped", "options"}`: the backend, its settings and, per quantized layer, what is needed to
  rebuild it (for optimum-quanto, its quantization map entry and whether the layer quantizes its outputs);
- `model.safetensors` holds every tensor *outside* the quantized layers, written by transformers as usual
  (legacy key names included);
- `hf_uq_quantized.safetensors` holds the quantized layers' tensors in the backend's own state-dict format
  (optimum-quanto: `weight._data`, `weight._scale`, `input_scale`, ...; bitsandbytes: `weight` + `SCB`, or the
  4-bit `weight.absmax` / `weight.quant_state.*` entries), under the model's module names.

Importing `hf_uq` registers [`HfUqQuantizationConfig`] and [`HfUqQuantizer`] for `quant_method="hf_uq"`, so
`AutoModelForImageClassification.from_pretrained(folder)` builds the float skeleton, lets transformers load
`model.safetensors` (the quantized layers' keys are expected to be missing there), then rebuilds the quantized
layers from `hf_uq_quantized.safetensors` with the backend's `restore` (optimum-quanto's quantization-map +
requantize idea; bitsandbytes' prequantized parameters). [`load_quantized`] does the same with a clearer error
for folders that are not hf_uq-quantized. Without `import hf_uq`, transformers does not know `quant_method
"hf_uq"`, warns, and would load an incomplete float model: always import hf_uq first.
"""

from __future__ import annotations

import os
import re
from types import MethodType
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModelForImageClassification, PreTrainedModel
from transformers.quantizers import HfQuantizer
from transformers.quantizers.auto import (
    AUTO_QUANTIZATION_CONFIG_MAPPING,
    AUTO_QUANTIZER_MAPPING,
    register_quantization_config,
    register_quantizer,
)
from transformers.utils.quantization_config import QuantizationConfigMixin

from .api import QuantizationInfo, load_backend

__all__ = [
    "QUANTIZED_WEIGHTS_NAME",
    "QUANT_METHOD",
    "HfUqQuantizationConfig",
    "HfUqQuantizer",
    "attach",
    "is_hf_uq_quantized",
    "load_quantized",
    "register",
]

#: `quant_method` of hf_uq-quantized checkpoints.
QUANT_METHOD = "hf_uq"
#: The file holding the quantized layers' tensors, next to `model.safetensors`.
QUANTIZED_WEIGHTS_NAME = "hf_uq_quantized.safetensors"


class HfUqQuantizationConfig(QuantizationConfigMixin):
    """
    The `quantization_config` of a model quantized by [`hf_uq.quantize`] (`quant_method="hf_uq"`).

    It describes an already-quantized checkpoint; it cannot quantize a float checkpoint on load (call
    [`hf_uq.quantize`] on the loaded float model instead). Its fields are those of [`QuantizationInfo`].
    """

    def __init__(self, backend: str, weights: str, activations: str | None = None,
                 modules: dict[str, dict[str, Any]] | None = None, skipped: dict[str, str] | None = None,
                 options: dict[str, Any] | None = None, **kwargs: Any):
        self.quant_method = QUANT_METHOD
        self.backend = backend
        self.weights = weights
        self.activations = activations
        self.modules = dict(modules or {})
        self.skipped = dict(skipped or {})
        self.options = dict(options or {})

    @classmethod
    def from_info(cls, info: QuantizationInfo) -> HfUqQuantizationConfig:
        return cls(**info.to_dict())

    @property
    def info(self) -> QuantizationInfo:
        return QuantizationInfo.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"quant_method": QUANT_METHOD, **QuantizationInfo.from_dict(self.__dict__).to_dict()}


class HfUqQuantizer(HfQuantizer):
    """transformers' side of hf_uq-quantized checkpoints: rebuild the quantized layers after the float ones load."""

    requires_calibration = True  # describes pre-quantized checkpoints only
    quantization_config: HfUqQuantizationConfig

    def __init__(self, quantization_config: HfUqQuantizationConfig, **kwargs: Any):
        super().__init__(quantization_config, **kwargs)
        self._checkpoint_files: list[str] | None = None
        self._save_directory: str | None = None

    def validate_environment(self, *args: Any, **kwargs: Any) -> None:
        load_backend(self.quantization_config.backend)  # ValueError naming the package to install
        device_map = kwargs.get("device_map")
        if isinstance(device_map, dict) and len(set(map(str, device_map.values()))) > 1:
            raise ValueError("hf_uq-quantized models load on one device; pass no device_map (or a single device)")

    def _process_model_before_weight_loading(self, model: PreTrainedModel, **kwargs: Any) -> PreTrainedModel:
        self._checkpoint_files = kwargs.get("checkpoint_files")
        names = list(self.quantization_config.modules)
        if names:  # the quantized layers' tensors live in QUANTIZED_WEIGHTS_NAME, not in model.safetensors
            pattern = "^(?:" + "|".join(re.escape(n) for n in names) + r")\."
            model._keys_to_ignore_on_load_missing = set(model._keys_to_ignore_on_load_missing or ()) | {pattern}
        return model

    def _process_model_after_weight_loading(self, model: PreTrainedModel, **kwargs: Any) -> PreTrainedModel:
        info = self.quantization_config.info
        state = load_file(_quantized_weights_path(model, self._checkpoint_files))
        load_backend(info.backend).restore(model, info.modules, state)
        attach(model, info, quantizer=self)
        return model.eval()

    def get_state_dict_and_metadata(self, model: PreTrainedModel) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The float part of the state dict for `model.safetensors`; writes the quantized part alongside."""
        if self._save_directory is None:
            raise ValueError("save a quantized model with `model.save_pretrained(folder)`")
        quantized, rest = split_state_dict(model, self.quantization_config.info)
        save_file(quantized, os.path.join(self._save_directory, QUANTIZED_WEIGHTS_NAME),
                  metadata={"format": "pt", "quant_method": QUANT_METHOD, "backend": self.quantization_config.backend})
        return rest, {}

    def is_serializable(self) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return False


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous plain `torch.Tensor` copy (safetensors rejects subclasses, views and shared storage)."""
    tensor = tensor.detach()
    if type(tensor) is not torch.Tensor:
        tensor = tensor.as_subclass(torch.Tensor)
    return tensor.clone().contiguous()


def split_state_dict(model: nn.Module, info: QuantizationInfo) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(tensors of the quantized layers, every other tensor of `model.state_dict()`).

    The quantized layers' tensors come from the backend's `layer_state` (which never changes a live layer); the
    rest is the state dict of the model with those layers taken out for the moment.
    """
    backend = load_backend(info.backend)
    quantized: dict[str, torch.Tensor] = {}
    layers = {name: model.get_submodule(name) for name in info.modules}
    for name, layer in layers.items():
        quantized.update({f"{name}.{key}": _plain(value) for key, value in backend.layer_state(layer).items()})
    try:
        for name in layers:
            _set_module(model, name, nn.Identity())
        rest = model.state_dict()
    finally:
        for name, layer in layers.items():
            _set_module(model, name, layer)
    return quantized, rest


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _quantized_weights_path(model: PreTrainedModel, checkpoint_files: list[str] | None) -> str:
    if checkpoint_files:
        path = os.path.join(os.path.dirname(checkpoint_files[0]), QUANTIZED_WEIGHTS_NAME)
        if os.path.isfile(path):
            return path
    source = getattr(model.config, "name_or_path", None)
    if source:
        from transformers.utils import cached_file

        path = cached_file(source, QUANTIZED_WEIGHTS_NAME, _raise_exceptions_for_missing_entries=False)
        if path is not None:
            return path
    raise ValueError(f"{QUANTIZED_WEIGHTS_NAME} is missing next to the checkpoint of {source!r}: the folder holds an "
                     "incomplete hf_uq-quantized model; save it again with `model.save_pretrained`")


def _save_quantized(self: PreTrainedModel, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
    """`save_pretrained` of a quantized model: transformers' own, plus `hf_uq_quantized.safetensors`.

    Remote code is not bundled (`remote_code` is ignored): loading the quantized layers needs hf_uq anyway.
    A `state_dict` argument is not supported.
    """
    kwargs.pop("remote_code", None)
    if kwargs.get("state_dict") is not None:
        raise ValueError("`state_dict` cannot be passed when saving a quantized model")
    quantizer = self.hf_quantizer
    quantizer._save_directory = os.fspath(save_directory)
    try:
        return PreTrainedModel.save_pretrained(self, save_directory, *args, **kwargs)
    finally:
        quantizer._save_directory = None


def attach(model: nn.Module, info: QuantizationInfo, quantizer: HfUqQuantizer | None = None) -> nn.Module:
    """Mark `model` as hf_uq-quantized: `model.hf_uq_quantization`, and for a `PreTrainedModel` its
    `config.quantization_config`, `hf_quantizer` and a `save_pretrained` that writes the quantized layers."""
    model.hf_uq_quantization = info
    if isinstance(model, PreTrainedModel):
        config = HfUqQuantizationConfig.from_info(info)
        model.config.quantization_config = config
        if quantizer is None:
            quantizer = HfUqQuantizer(config, pre_quantized=True)
        else:
            quantizer.quantization_config = config
        model.hf_quantizer = quantizer
        model.is_quantized = True
        model.quantization_method = QUANT_METHOD
        model.save_pretrained = MethodType(_save_quantized, model)
    return model


def is_hf_uq_quantized(config: Any) -> bool:
    """Whether a config (object or dict) describes an hf_uq-quantized checkpoint."""
    quantization = config.get("quantization_config") if isinstance(config, dict) else getattr(config, "quantization_config", None)
    if isinstance(quantization, QuantizationConfigMixin):
        quantization = quantization.to_dict()
    return isinstance(quantization, dict) and quantization.get("quant_method") == QUANT_METHOD


def load_quantized(path: str | os.PathLike, model_class: type | None = None, **kwargs: Any) -> PreTrainedModel:
    """
    Load a model saved by `save_pretrained` after [`hf_uq.quantize`], with identical outputs.

    Equivalent to `AutoModelForImageClassification.from_pretrained(path)` after `import hf_uq`, but raises a clear
    `ValueError` when the folder is not an hf_uq-quantized checkpoint.

    Args:
        path (`str` or `os.PathLike`): a local folder (or Hub id).
        model_class (*optional*): the class to load with; defaults to `AutoModelForImageClassification`.
        kwargs: passed to `from_pretrained`.
    """
    register()
    config = AutoConfig.from_pretrained(path, **{k: v for k, v in kwargs.items() if k in ("revision", "token", "cache_dir", "local_files_only")})
    if not is_hf_uq_quantized(config):
        raise ValueError(f"{os.fspath(path)!r} is not an hf_uq-quantized checkpoint (no quantization_config with "
                         f"quant_method={QUANT_METHOD!r}); load it with from_pretrained, then call hf_uq.quantize")
    return (model_class or AutoModelForImageClassification).from_pretrained(path, **kwargs)


def register() -> None:
    """Register `quant_method="hf_uq"` with transformers (idempotent; done when `hf_uq.quantization` is imported)."""
    if QUANT_METHOD not in AUTO_QUANTIZATION_CONFIG_MAPPING:
        register_quantization_config(QUANT_METHOD)(HfUqQuantizationConfig)
    if QUANT_METHOD not in AUTO_QUANTIZER_MAPPING:
        register_quantizer(QUANT_METHOD)(HfUqQuantizer)
