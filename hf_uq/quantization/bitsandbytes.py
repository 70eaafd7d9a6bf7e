"""The bitsandbytes backend of [`hf_uq.quantize`] (imported only when that backend is asked for).

- `weights="int8"`: `bnb.nn.Linear8bitLt` (LLM.int8()): int8 weights with one absmax scale per output row
  (`SCB`); each forward quantizes its input per row on the fly and multiplies in int8 (`torch._int_mm` on AVX512
  CPUs), so activations are always quantized dynamically and `activations` must be `None`. `threshold > 0`
  turns on the outlier decomposition (columns with large activations stay in 16-bit).
- `weights="int4"` / `"nf4"` / `"fp4"`: `bnb.nn.Linear4bit`, blockwise 4-bit (NF4 by default), computed in
  bfloat16 by the CPU kernel. On CPU its packed layout needs `out_features` divisible by 32, so smaller layers
  (typically classification heads) are skipped and listed.

Only `nn.Linear` and BatchEnsemble layers are converted: bitsandbytes has no quantized convolution, so
convolutional networks keep their convolutions in floating point. A `BatchEnsembleLinear` becomes a
[`BnbBatchEnsembleLinear`]: its shared weight goes into a bias-free bitsandbytes layer (int8 or 4-bit, same rules),
its fast weights and per-member biases stay float (state dict: `shared.weight`, `shared.SCB`, ..., `fast_in_norm`,
`fast_out_norm`, `bias`). Persistence uses bitsandbytes' own state-dict format (`weight` + `SCB` for
int8; `weight` + `weight.absmax` / `weight.quant_map` / `weight.quant_state.*` for 4-bit), rebuilt by [`restore`]
without requantizing.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

import bitsandbytes as bnb
import torch
from torch import nn

from ..layers.batch_ensemble import (
    BatchEnsembleLinear,
    scale_member_inputs,
    scale_shift_member_outputs,
    split_members,
)
from .api import is_plain

NAME = "bitsandbytes"
#: hf_uq weight format -> bitsandbytes layer kind ("int8") or 4-bit quant type.
WEIGHTS: dict[str, str] = {"int8": "int8", "int4": "nf4", "nf4": "nf4", "fp4": "fp4"}
#: bitsandbytes quantizes activations dynamically inside its int8 matmul: no static activation formats.
ACTIVATIONS: dict[str, str] = {}
_DEVICES = ("cpu", "cuda", "xpu")
_OPTIONS = {"threshold", "compress_statistics", "blocksize"}


class _DropCastNotice(logging.Filter):
    """Drops the notice `MatMul8bitLt` logs on every float32 forward (it casts inputs to float16 by design)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


_FUNCTIONS_LOGGER = logging.getLogger("bitsandbytes.autograd._functions")
if not any(isinstance(f, _DropCastNotice) for f in _FUNCTIONS_LOGGER.filters):
    _FUNCTIONS_LOGGER.addFilter(_DropCastNotice())


def check_request(weights: str, activations: str | None, device: torch.device) -> None:
    """`ValueError` for a request bitsandbytes cannot run where the model lives."""
    if activations is not None:  # unreachable through `quantize` (ACTIVATIONS is empty); kept for direct calls
        raise ValueError("bitsandbytes quantizes activations on the fly; pass activations=None")
    if device.type not in _DEVICES:
        raise ValueError(
            f"bitsandbytes quantization here supports {'/'.join(_DEVICES)} models, but the model is on "
            f"{device.type!r}; move it to the CPU first, or use backend='quanto'"
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("the model is on CUDA but no CUDA device is available; move it to the CPU first")


def _four_bit_reason(module: nn.Linear | BatchEnsembleLinear) -> str | None:
    if module.weight.device.type == "cpu" and (module.out_features % 32 or module.in_features % 2):
        return (f"bitsandbytes 4-bit on CPU needs out_features divisible by 32 and even in_features "
                f"(got {module.in_features} -> {module.out_features})")
    return None


def skip_reason(module: nn.Module, weights: str, activations: str | None, options: Mapping[str, Any]) -> str | None:
    """`None` when bitsandbytes can quantize `module`, else why not."""
    if is_plain(module, nn.Linear, BatchEnsembleLinear):
        return _four_bit_reason(module) if weights != "int8" else None
    if isinstance(module, (nn.Linear, BatchEnsembleLinear)):
        return f"{type(module).__name__} overrides forward(); a bitsandbytes layer would drop its custom computation"
    return f"bitsandbytes has no quantized {type(module).__name__} (it quantizes nn.Linear and BatchEnsembleLinear)"


class BnbBatchEnsembleLinear(nn.Module):
    r"""
    A [`~hf_uq.layers.BatchEnsembleLinear`] whose shared weight lives in a bitsandbytes layer.

    Member `i` computes `y = (shared(x * r_i)) * s_i + b_i`, where `shared` is a bias-free `bnb.nn.Linear8bitLt`
    (int8 weight, LLM.int8() matmul with on-the-fly int8 activations) or `bnb.nn.Linear4bit` holding `W`. The
    fast weights `r_i`, `s_i` and the members' biases stay in floating point. Built by [`apply`] / [`restore`].

    Args:
        shared (`nn.Module`): the bitsandbytes layer of the shared weight, without bias.
        ensemble_size (`int`): number of members M.
        fast_in_norm (`torch.Tensor` of shape `(ensemble_size, in_features)`): the input fast weights `r`.
        fast_out_norm (`torch.Tensor` of shape `(ensemble_size, out_features)`): the output fast weights `s`.
        bias (`torch.Tensor` of shape `(ensemble_size, out_features)`, *optional*): the members' biases.
        scale_input_in_place (`bool`, *optional*, defaults to `False`): as in `BatchEnsembleLinear`.
    """

    def __init__(self, shared: nn.Module, ensemble_size: int, fast_in_norm: torch.Tensor, fast_out_norm: torch.Tensor,
                 bias: torch.Tensor | None = None, scale_input_in_place: bool = False):
        super().__init__()
        self.in_features = shared.in_features
        self.out_features = shared.out_features
        self.ensemble_size = ensemble_size
        self.scale_input_in_place = scale_input_in_place
        self.shared = shared
        self.fast_in_norm = nn.Parameter(fast_in_norm.detach().clone(), requires_grad=False)
        self.fast_out_norm = nn.Parameter(fast_out_norm.detach().clone(), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @property
    def r(self) -> torch.Tensor:
        return self.fast_in_norm

    @property
    def s(self) -> torch.Tensor:
        return self.fast_out_norm

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        members = self.ensemble_size
        lead = hidden_states.shape[:-1]
        x = split_members(hidden_states, members, self.in_features)
        x = scale_member_inputs(x, self.fast_in_norm.unsqueeze(1), self.scale_input_in_place)
        y = self.shared(x.reshape(-1, self.in_features)).view(members, -1, self.out_features).to(x.dtype)
        y = scale_shift_member_outputs(y, self.fast_out_norm.unsqueeze(1), self.bias)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"ensemble_size={self.ensemble_size}, bias={self.bias is not None}"


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _empty_layer(in_features: int, out_features: int, bias: bool, entry: Mapping[str, Any]) -> nn.Module:
    """A bitsandbytes layer of that shape, weights still unset (built on the meta device)."""
    args = (in_features, out_features, bias)
    if entry["weights"] == "int8":
        return bnb.nn.Linear8bitLt(*args, has_fp16_weights=False, threshold=float(entry.get("threshold", 0.0)),
                                   device="meta")
    return bnb.nn.Linear4bit(*args, quant_type=entry["quant_type"], device="meta",
                             compress_statistics=bool(entry.get("compress_statistics", False)))


def _quantized_layer(weight: torch.Tensor, bias: torch.Tensor | None, entry: Mapping[str, Any]) -> nn.Module:
    """A bitsandbytes layer holding the float `weight` `(out, in)` quantized as `entry` says, and `bias`."""
    weight = weight.detach()
    layer = _empty_layer(weight.shape[1], weight.shape[0], bias is not None, entry)
    if entry["weights"] == "int8":
        layer.weight = bnb.nn.Int8Params(weight.cpu(), requires_grad=False, has_fp16_weights=False).to(weight.device)
    else:
        layer.weight = bnb.nn.Params4bit(
            weight.cpu(), requires_grad=False, quant_type=entry["quant_type"], blocksize=entry["blocksize"],
            compress_statistics=entry["compress_statistics"], module=layer,
        ).to(weight.device)
    layer.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
    return layer


def apply(
    model: nn.Module,
    names: list[str],
    weights: str,
    activations: str | None,
    calibrate: Callable[[nn.Module], None] | None,
    options: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Replace the `nn.Linear` layers `names` of `model` by quantized bitsandbytes layers, in place.

    Options: `threshold` (int8 outlier threshold, default 0.0: pure int8), `compress_statistics` (4-bit double
    quantization of the scales, default `False`) and `blocksize` (4-bit block size, default 64).
    `calibrate` is unused: bitsandbytes needs no calibration.

    Returns:
        Per quantized layer, the settings [`restore`] needs.
    """
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown bitsandbytes option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    entries: dict[str, dict[str, Any]] = {}
    for name in names:
        module = model.get_submodule(name)
        if weights == "int8":
            entry = {"type": "Linear8bitLt", "weights": "int8", "threshold": float(options.get("threshold", 0.0))}
        else:
            entry = {"type": "Linear4bit", "weights": weights, "quant_type": WEIGHTS[weights],
                     "compress_statistics": bool(options.get("compress_statistics", False)),
                     "blocksize": int(options.get("blocksize", 64))}
        if isinstance(module, BatchEnsembleLinear):
            entry["type"] = "BatchEnsemble" + entry["type"]
            shared = _quantized_layer(module.weight, None, entry)
            layer = BnbBatchEnsembleLinear(shared, module.ensemble_size, module.fast_in_norm, module.fast_out_norm,
                                           module.bias, module.scale_input_in_place)
        else:
            layer = _quantized_layer(module.weight, module.bias, entry)
        layer.train(module.training)
        _set_module(model, name, layer)
        entries[name] = entry
    return entries


def layer_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors that [`restore`] needs for one quantized layer, without changing the live layer.

    bitsandbytes' own `state_dict` of a `Linear4bit` that has already run on CPU converts the layer's repacked
    weight back in place, and that conversion is lossy (the bfloat16 absmax the CPU kernel uses is left in its
    transposed layout), which is why bitsandbytes asks to save 4-bit models before any forward. Here the
    inverse runs on a copy, and the absmax is written in bitsandbytes' flat layout with exactly the values the
    CPU kernel uses, so a reloaded layer computes the same outputs as the live one.
    """
    if isinstance(module, BnbBatchEnsembleLinear):
        tensors = {f"shared.{key}": value for key, value in layer_state(module.shared).items()}
        tensors.update({k: v.detach() for k, v in module.named_parameters(recurse=False)})
        return tensors
    if not isinstance(module, bnb.nn.Linear4bit):
        return module.state_dict()
    weight = module.weight
    state = weight.quant_state
    data = weight.data
    if getattr(state, "packing_format_for_cpu", False):
        packed_absmax = state.absmax
        state = copy.copy(state)  # the inverse reassigns fields of the state it is given
        state.original_nested = False  # keep the absmax unquantized: its exact values are what the kernel uses
        data, state = bnb.functional._convert_weight_packed_for_cpu_inverse(data.clone(), state)
        state.absmax = packed_absmax.T.reshape(-1).float()
    tensors = {"weight": data.detach()}
    tensors.update({f"weight.{k}": v.detach() for k, v in state.as_dict(packed=True).items()})
    if module.bias is not None:
        tensors["bias"] = module.bias.detach()
    return tensors


def _restored_layer(in_features: int, out_features: int, entry: Mapping[str, Any], state: Mapping[str, torch.Tensor],
                    prefix: str, device: torch.device, bias: torch.Tensor | None) -> nn.Module:
    """The bitsandbytes layer whose tensors are `state[prefix + ...]`, rebuilt without requantizing."""

    def take(key: str) -> torch.Tensor:
        if prefix + key not in state:
            raise ValueError(f"the quantized weights file lacks {prefix + key!r}")
        return state[prefix + key].to(device)

    layer = _empty_layer(in_features, out_features, bias is not None, entry)
    if entry["weights"] == "int8":
        data = take("weight")
        layer.weight = bnb.nn.Int8Params(data, requires_grad=False, has_fp16_weights=False, CB=data, SCB=take("SCB"))
    else:
        stats_prefix = f"{prefix}weight."
        stats = {key[len(stats_prefix):]: value.to(device) for key, value in state.items() if key.startswith(stats_prefix)}
        layer.weight = bnb.nn.Params4bit.from_prequantized(
            data=take("weight"), quantized_stats=stats, requires_grad=False, device=device, module=layer
        )
    layer.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
    return layer


def restore(model: nn.Module, modules: Mapping[str, Mapping[str, Any]], state: Mapping[str, torch.Tensor]) -> None:
    """Rebuild the bitsandbytes layers `modules` (entries from [`apply`]) on a float `model` from `state`."""
    for name, entry in modules.items():
        module = model.get_submodule(name)
        batch_ensemble = str(entry.get("type", "")).startswith("BatchEnsemble")
        expected = BatchEnsembleLinear if batch_ensemble else nn.Linear
        if not isinstance(module, expected):
            raise ValueError(f"layer {name!r} is a {type(module).__name__}, expected {expected.__name__} to rebuild")
        device = module.weight.device if module.weight.device.type != "meta" else torch.device("cpu")

        def take(key: str, prefix: str = f"{name}.", device: torch.device = device) -> torch.Tensor:
            if prefix + key not in state:
                raise ValueError(f"the quantized weights file lacks {prefix + key!r}")
            return state[prefix + key].to(device)

        bias = None if module.bias is None else take("bias")
        if batch_ensemble:
            shared = _restored_layer(module.in_features, module.out_features, entry, state, f"{name}.shared.", device,
                                     None)
            layer = BnbBatchEnsembleLinear(shared, module.ensemble_size, take("fast_in_norm"), take("fast_out_norm"),
                                           bias, module.scale_input_in_place)
        else:
            layer = _restored_layer(module.in_features, module.out_features, entry, state, f"{name}.", device, bias)
        layer.train(module.training)
        _set_module(model, name, layer)
