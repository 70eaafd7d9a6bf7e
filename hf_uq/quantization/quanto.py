"""The optimum-quanto backend of [`hf_uq.quantize`] (imported only when that backend is asked for).

optimum-quanto swaps `nn.Linear` / `nn.Conv2d` for its `QLinear` / `QConv2d`, and hf_uq's `BatchEnsembleLinear`
for [`~quanto_layers.QBatchEnsembleLinear`] (shared weight quantized; fast weights and biases stay float). Frozen
weights are `WeightQBytesTensor` (8-bit: int8 data + a float scale per output channel) or `WeightQBitsTensor`
(4/2-bit, packed, grouped scales and shifts). With int8 activations each quantized layer also quantizes its input
with a static `input_scale`, set by running calibration data under `optimum.quanto.Calibration`; on CPU (torch >=
2.6) the int8 x int8 products then run in `torch._int_mm`, which [`~quanto_layers.FusedW8A8QLinear`] calls
directly (bit-identical to `QLinear`, about a quarter of its per-call overhead). Layer outputs stay in floating
point unless `quantize_outputs=True` (see [`apply`]); whether a layer quantizes its output is recorded per layer
(`"quantize_output"`) so that a reloaded model behaves identically.

Persistence: a quantized layer's `state_dict` holds `weight._data`, `weight._scale` (`weight._shift` for 4/2-bit),
`bias`, `input_scale` and `output_scale`; [`restore`] re-creates the layers from the quantization map
(`optimum.quanto.quantize` on the float skeleton) and loads them (quanto's `_load_from_state_dict` rebuilds the
quantized tensors), the same idea as `optimum.quanto.requantize`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from optimum.quanto import Calibration, WeightQBitsTensor, freeze, qtypes
from optimum.quanto import quantize as quanto_quantize
from optimum.quanto.nn import QLinear, QModuleMixin
from torch import nn
from torch.nn import functional as F

from ..layers.batch_ensemble import BatchEnsembleLinear
from .api import is_plain
from .quanto_layers import QBatchEnsembleLinear, fuse_w8a8, is_fusable  # noqa: F401  (registers the BE layer)

NAME = "quanto"
#: hf_uq weight format -> optimum-quanto qtype name.
WEIGHTS: dict[str, str] = {"int8": "qint8", "int4": "qint4", "int2": "qint2", "float8": "qfloat8"}
#: hf_uq activation format -> optimum-quanto qtype name.
ACTIVATIONS: dict[str, str] = {"int8": "qint8", "float8": "qfloat8"}
_DEVICES = ("cpu", "cuda", "mps", "xpu")
_OPTIONS = {"momentum", "quantize_outputs"}


class InferenceSafeQLinear(QLinear):
    """A `QLinear` whose 4/2-bit weights also run under `torch.inference_mode()`.

    optimum-quanto 0.2.7 transposes a packed `WeightQBitsTensor` inside its linear function, which raises
    "Cannot set version_counter for inference tensor" under inference mode; there the weight is dequantized
    explicitly instead (the same arithmetic: quanto's CPU path dequantizes too). Elsewhere it is `QLinear`.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight = self.qweight
        if isinstance(weight, WeightQBitsTensor) and torch.is_inference_mode_enabled():
            return F.linear(input, weight.dequantize(), self.bias)
        return super().forward(input)


def _finish(model: nn.Module, names: list[str], training: dict[str, bool]) -> None:
    """Restore each new layer's train/eval flag; make packed-weight linears inference-mode safe."""
    for name in names:
        module = model.get_submodule(name)
        module.train(training[name])
        if type(module) is QLinear and module.weight_qtype is not None and module.weight_qtype.bits < 8:
            module.__class__ = InferenceSafeQLinear


def _fuse(model: nn.Module, names: list[str]) -> None:
    """Give every w8a8 `QLinear` with float outputs among `names` the fused forward (bit-identical, faster)."""
    for name in names:
        module = model.get_submodule(name)
        if is_fusable(module):
            fuse_w8a8(module)


def check_request(weights: str, activations: str | None, device: torch.device) -> None:
    """`ValueError` for a request optimum-quanto cannot run where the model lives."""
    if device.type not in _DEVICES:
        raise ValueError(
            f"optimum-quanto runs on {'/'.join(_DEVICES)}, but the model is on {device.type!r}; move it first "
            "(e.g. `model.to('cpu')`)"
        )
    if device.type == "mps" and (weights == "float8" or activations == "float8"):
        raise ValueError("float8 tensors are not supported on MPS; use weights/activations 'int8' there")


def skip_reason(module: nn.Module, weights: str, activations: str | None, options: Mapping[str, Any]) -> str | None:
    """`None` when optimum-quanto can quantize `module` itself (not its children), else why not.

    `nn.LayerNorm` is taken only when its outputs are quantized (`quantize_outputs=True`): its weights are never
    quantized, so otherwise it would be an unchanged float layer.
    """
    if is_plain(module, nn.Linear, nn.Conv2d, BatchEnsembleLinear):
        return None
    if activations is not None and options.get("quantize_outputs") and is_plain(module, nn.LayerNorm):
        return None
    if isinstance(module, (nn.Linear, nn.Conv2d, BatchEnsembleLinear)):
        return f"{type(module).__name__} overrides forward(); a quanto layer would drop its custom computation"
    return f"optimum-quanto has no quantized {type(module).__name__}"


def _output_quantized(module: QModuleMixin) -> bool:
    """Whether the layer still quantizes its outputs (calibration's streamline mode may have removed the hook)."""
    handle = getattr(module, "_quantize_hooks", {}).get("output")
    return handle is not None and handle.id in module._forward_hooks


def _module_entry(module: QModuleMixin) -> dict[str, Any]:
    entry = {
        "type": "QLinear" if isinstance(module, QLinear) else type(module).__name__,  # fused or not: same state
        "weights": "none" if module.weight_qtype is None else module.weight_qtype.name,
        "activations": "none" if module.activation_qtype is None else module.activation_qtype.name,
    }
    if module.activation_qtype is not None:
        entry["quantize_output"] = _output_quantized(module)
    return entry


def apply(
    model: nn.Module,
    names: list[str],
    weights: str,
    activations: str | None,
    calibrate: Callable[[nn.Module], None] | None,
    options: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Quantize the layers `names` of `model` in place; calibrate activations; freeze.

    Options: `momentum` (float, default 0.9) of `Calibration`, and `quantize_outputs` (bool, default `False`).
    By default only each layer's *input* is quantized (with its calibrated `input_scale`), so every layer
    returns a plain float tensor. `quantize_outputs=True` is optimum-quanto's own scheme: layers also quantize
    their outputs and calibration's streamline mode keeps that only where the consumer is a quantized layer.
    It saves little here, and optimum-quanto 0.2.7 crashes (`TypeError: 'list' object is not callable`) when a
    quantized output meets `torch.stack`, as in duos and deep ensembles, so it is off by default.

    Returns:
        Per quantized layer: `{"type", "weights", "activations"}` (its optimum-quanto quantization map entry)
        plus `"quantize_output"` when activations are quantized.
    """
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown optimum-quanto option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    training = {name: model.get_submodule(name).training for name in names}
    # exact names (module names hold no fnmatch wildcards)
    quanto_quantize(model, weights=WEIGHTS[weights], activations=ACTIVATIONS.get(activations), include=names)
    _finish(model, names, training)
    quantize_outputs = bool(options.get("quantize_outputs", False))
    if activations is not None and not quantize_outputs:
        for name in names:
            model.get_submodule(name).disable_output_quantization()
        _fuse(model, names)
    if calibrate is not None:
        with Calibration(momentum=float(options.get("momentum", 0.9)), streamline=quantize_outputs):
            calibrate(model)
    freeze(model)
    return {name: _module_entry(module) for name, module in model.named_modules() if isinstance(module, QModuleMixin)}


def layer_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of one quantized layer (its optimum-quanto `state_dict`), keyed relative to the layer."""
    return module.state_dict()


def restore(model: nn.Module, modules: Mapping[str, Mapping[str, Any]], state: Mapping[str, torch.Tensor]) -> None:
    """Re-create the quantized layers `modules` (entries from [`apply`]) on a float `model` and load `state`."""
    groups: dict[tuple[str | None, str | None], list[str]] = {}
    for name, entry in modules.items():
        key = tuple(None if entry.get(k, "none") == "none" else entry[k] for k in ("weights", "activations"))
        for qtype in key:
            if qtype is not None and qtype not in qtypes:
                raise ValueError(f"layer {name!r}: unknown optimum-quanto qtype {qtype!r}")
        groups.setdefault(key, []).append(name)
    for (weights, activations), names in groups.items():
        present = dict(model.named_modules())
        missing = [n for n in names if n not in present]
        if missing:
            raise ValueError(f"the model has no layer(s) {missing[:3]} named in the quantization map")
        training = {name: present[name].training for name in names}
        quanto_quantize(model, weights=weights, activations=activations, include=names)
        _finish(model, names, training)
    result = model.load_state_dict(dict(state), strict=False)
    prefixes = tuple(f"{name}." for name in modules)
    missing = [key for key in result.missing_keys if key.startswith(prefixes)]
    if missing:
        raise ValueError(f"the quantized weights file lacks {missing[:4]}{' ...' if len(missing) > 4 else ''}")
    for name, entry in modules.items():
        module = model.get_submodule(name)
        if not isinstance(module, QModuleMixin) or module.weight_qtype is not None and not module.frozen:
            raise ValueError(f"layer {name!r} was not restored as a frozen optimum-quanto layer")
        if entry.get("quantize_output") is False:
            module.disable_output_quantization()
    _fuse(model, list(modules))
