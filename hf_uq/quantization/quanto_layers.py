"""optimum-quanto layers of hf_uq: a fused int8 x int8 `QLinear` and a quantized [`BatchEnsembleLinear`].

Imported only by the optimum-quanto backend (`quanto.py`), after the check that optimum-quanto is installed.

- [`FusedW8A8QLinear`]: a frozen `QLinear` with int8 weights and static int8 inputs whose forward quantizes its
  input and calls `torch._int_mm` itself, with plain tensors. It computes exactly what optimum-quanto computes
  (same division, rounding, clamping, int32 -> float32 rescale and bias add, bit for bit) but without the
  forward pre-hook, the `ActivationQBytesTensor` wrapper and the `__torch_function__` / `autograd.Function`
  dispatch that cost ~55 us per layer and call on CPU (4x the whole float layer at ViT-tiny sizes).
- [`QBatchEnsembleLinear`]: the shared weight `W` of a BatchEnsemble layer quantized by optimum-quanto (int8,
  int4, int2 or float8, as for `QLinear`), while the per-member fast weights `r_i`, `s_i` and biases stay float.
  With int8 activations the product `(x * r_i) W^T` runs in int8: `x * r_i / input_scale` is rounded in one
  pass and the output rescale `input_scale * w_scale * s_i` and the bias add are fused into one `addcmul`.
  `input_scale` is calibrated on `x * r_i`, the tensor actually quantized, not on the layer input.

Both keep optimum-quanto's state-dict format (`weight._data`, `weight._scale`, `bias`, `input_scale`,
`output_scale`, plus `fast_in_norm` / `fast_out_norm` for BatchEnsemble), so persistence goes through the
same quantization-map + reload path as every other quanto layer.
"""

from __future__ import annotations

from typing import Any

import torch
from optimum.quanto import Calibration, WeightQBitsTensor, WeightQBytesTensor, qint8, qtype
from optimum.quanto.calibrate import absmax_scale
from optimum.quanto.nn import QLinear, QModuleMixin, register_qmodule
from optimum.quanto.tensor import ActivationQBytesTensor, Optimizer, quantize_activation
from torch.nn import functional as F

from ..layers.batch_ensemble import (
    BatchEnsembleLinear,
    scale_member_inputs,
    scale_shift_member_outputs,
    split_members,
)

__all__ = ["FusedW8A8QLinear", "QBatchEnsembleLinear", "fuse_w8a8", "is_fusable"]

_INT8_MIN, _INT8_MAX = -128, 127


def _quantize_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """optimum-quanto's per-tensor symmetric int8 quantization (`round(x / scale)` clamped), in place on a temporary."""
    data = x / scale
    return data.round_().clamp_(_INT8_MIN, _INT8_MAX).to(torch.int8)


def _int8_weight(weight: Any) -> WeightQBytesTensor | None:
    """The weight when it is an optimum-quanto int8 `WeightQBytesTensor` on the CPU (the fused path), else `None`."""
    if type(weight) is WeightQBytesTensor and weight.qtype == qint8 and weight.device.type == "cpu":
        return weight
    return None


def is_fusable(module: QModuleMixin) -> bool:
    """Whether `module` is a plain `QLinear` with int8 weights and int8 inputs, outputs left in float."""
    hooks = getattr(module, "_quantize_hooks", {})
    output = hooks.get("output")
    return (
        type(module) is QLinear
        and module.weight_qtype == qint8
        and module.activation_qtype == qint8
        and (output is None or output.id not in module._forward_hooks)
    )


def fuse_w8a8(module: QLinear) -> FusedW8A8QLinear:
    """Turn a frozen-or-not w8a8 `QLinear` (see [`is_fusable`]) into a [`FusedW8A8QLinear`], in place."""
    if not is_fusable(module):
        raise ValueError(f"{type(module).__name__} is not an int8-weight, int8-input QLinear with float outputs")
    handle = module._quantize_hooks.pop("input", None)
    if handle is not None:
        handle.remove()
    module._quantize_hooks.pop("output", None)
    module.__class__ = FusedW8A8QLinear
    return module


class FusedW8A8QLinear(QLinear):
    """
    A w8a8 optimum-quanto `QLinear` whose forward quantizes the input and runs `torch._int_mm` directly.

    Same arithmetic as `QLinear` (bit-identical outputs), a fraction of its per-call overhead. Created by
    [`fuse_w8a8`]; elsewhere than on the CPU, or for an input that is already quantized, it defers to
    optimum-quanto's own path.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight = _int8_weight(self.qweight)
        quantized = isinstance(input, ActivationQBytesTensor)
        if weight is None:  # not on the CPU: optimum-quanto's own path, input quantized as its hook would
            if not quantized:
                input = quantize_activation(input, qtype=self.activation_qtype, scale=self.input_scale)
            return super().forward(input)
        if quantized:
            data, scale = input._data, input._scale
        else:
            data, scale = _quantize_int8(input, self.input_scale), self.input_scale
        out = torch._int_mm(data.reshape(-1, self.in_features), weight._data.t())
        # as optimum-quanto's qbytes_int_mm: rescale in float32 (int32 * scale may overflow lower precisions)
        out = out.to(torch.float32).mul_(scale * weight._scale.t()).to(input.dtype)
        if self.bias is not None:
            out = out.add_(self.bias)
        return out.reshape(*input.shape[:-1], self.out_features)


def _calibration_momentum() -> float | None:
    """The momentum of the active `optimum.quanto.Calibration`, or `None` when not calibrating."""
    for mode in torch.overrides._get_current_function_mode_stack():
        if isinstance(mode, Calibration):
            return float(mode.momentum)
    return None


@register_qmodule(BatchEnsembleLinear)
class QBatchEnsembleLinear(QModuleMixin, BatchEnsembleLinear):
    """
    A [`~hf_uq.layers.BatchEnsembleLinear`] whose shared weight is an optimum-quanto quantized tensor.

    Member `i` computes `y = ((x * r_i) Q(W)^T) * s_i + b_i`; only `W` is quantized (per output channel for
    int8, grouped for int4/int2), `r_i`, `s_i` and `b_i` stay in floating point. With `activations="int8"`,
    `x * r_i` is quantized per tensor with the static `input_scale` and multiplied in int8 on the CPU; the scale
    is calibrated on `x * r_i` under `optimum.quanto.Calibration` (the layer tracks it itself, because quanto's
    own hook sees the layer input before the fast weights are applied). Output quantization is never used: the
    output rescale by `s_i` would undo it.

    Registered with optimum-quanto for `BatchEnsembleLinear`, so `optimum.quanto.quantize` and hf_uq's reload
    path create it like a `QLinear`. Its state dict is quanto's (`weight._data`, `weight._scale`, ...) plus the
    float `fast_in_norm` and `fast_out_norm`.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.disable_output_quantization()
        self._quantize_hooks.pop("output", None)
        self._calibrated_scale: torch.Tensor | None = None

    @classmethod
    def qcreate(
        cls,
        module: BatchEnsembleLinear,
        weights: qtype | None,
        activations: qtype | None = None,
        optimizer: Optimizer | None = None,
        device: torch.device | str | None = None,
    ) -> QBatchEnsembleLinear:
        return cls(
            module.in_features,
            module.out_features,
            module.ensemble_size,
            bias=module.bias is not None,
            fast_weight_init=module.fast_weight_init,
            fast_weight_init_std=module.fast_weight_init_std,
            scale_input_in_place=module.scale_input_in_place,
            dtype=module.weight.dtype,
            device=device,
            weights=weights,
            activations=activations,
            optimizer=optimizer,
            quantize_input=False,
        )

    @classmethod
    def from_module(
        cls,
        module: BatchEnsembleLinear,
        weights: qtype | None = None,
        activations: qtype | None = None,
        optimizer: Optimizer | None = None,
    ) -> QBatchEnsembleLinear:
        qmodule = super().from_module(module, weights=weights, activations=activations, optimizer=optimizer)
        with torch.no_grad():
            qmodule.fast_in_norm = module.fast_in_norm
            qmodule.fast_out_norm = module.fast_out_norm
        return qmodule

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name in ("fast_in_norm", "fast_out_norm"):
            value = getattr(self, name)
            destination[prefix + name] = value if keep_vars else value.detach()

    def _input_scale(self, scaled: torch.Tensor) -> torch.Tensor:
        """`input_scale`, updated from `x * r` first when an `optimum.quanto.Calibration` is active."""
        momentum = _calibration_momentum()
        if momentum is None:
            return self.input_scale
        new = absmax_scale(scaled.detach(), self.activation_qtype).to(self.input_scale.dtype)
        previous = self._calibrated_scale
        scale = new if previous is None else momentum * previous + (1.0 - momentum) * new
        self._calibrated_scale = scale
        with torch.no_grad():  # quanto's global hook has just written the layer *input*'s scale here: overwrite it
            self.input_scale = scale.reshape(self.input_scale.shape).clone()
        return self.input_scale

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        members = self.ensemble_size
        lead = hidden_states.shape[:-1]
        x = split_members(hidden_states, members, self.in_features)
        r = self.fast_in_norm.unsqueeze(1)
        scale_out = self.fast_out_norm.unsqueeze(1)
        weight = self.qweight
        int8 = _int8_weight(weight)
        if self.activation_qtype == qint8 and int8 is not None:
            if _calibration_momentum() is None:
                scale = self.input_scale
                data = _quantize_int8_scaled(x, r / scale)  # never materializes x * r
            else:
                scaled = x * r
                scale = self._input_scale(scaled)
                data = _quantize_int8(scaled, scale)
            y = torch._int_mm(data.reshape(-1, self.in_features), int8._data.t())
            y = y.view(members, -1, self.out_features).to(x.dtype)
            rescale = (scale * int8._scale.t()) * scale_out  # (M, 1, out)
            return scale_shift_member_outputs(y, rescale, self.bias).reshape(*lead, self.out_features)
        x = scale_member_inputs(x, r, self.scale_input_in_place)
        if self.activation_qtype is not None:  # float8 activations, or a device without the fused kernel
            x = quantize_activation(x, qtype=self.activation_qtype, scale=self._input_scale(x))
        if isinstance(weight, WeightQBitsTensor) and torch.is_inference_mode_enabled():
            y = F.linear(x, weight.dequantize())  # see InferenceSafeQLinear in quanto.py
        else:
            y = F.linear(x, weight)
        return scale_shift_member_outputs(y, scale_out, self.bias).reshape(*lead, self.out_features)


def _quantize_int8_scaled(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """`round(x * factor)` clamped to int8, with `factor = r / input_scale` broadcast per member."""
    return (x * factor).round_().clamp_(_INT8_MIN, _INT8_MAX).to(torch.int8)
