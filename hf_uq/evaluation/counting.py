"""FLOPs, parameters and weight bytes of a model, counted (see `budget` for the definitions)."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from ._budget_common import (
    Inputs,
    _check_inputs,
    _check_model,
    _eval_mode,
    _iter_params_and_buffers,
    _model_device,
    _to_device,
)

# ------------------------------------------------------------------------------------------ FLOPs


def _attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """q @ k^T and p @ v of SDPA, 2 FLOPs per MAC (like torch's own formula: no causal discount)."""
    *batch, s_q, d_qk = query_shape
    s_k, d_v = key_shape[-2], value_shape[-1]
    n = math.prod(batch)  # batch x query heads (grouped key/value heads are broadcast)
    return 2 * n * s_q * s_k * d_qk + 2 * n * s_q * s_k * d_v


def _weight_matmul_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """A (..., K) times a packed weight giving out (..., N): 2 * prod(out) * K, whatever B's layout."""
    if out_shape and not isinstance(out_shape[0], int):  # several outputs: the product comes first
        out_shape = out_shape[0]
    return 2 * math.prod(out_shape) * a_shape[-1]


#: namespace -> {op name: formula} for ops the stock registry lacks (resolved lazily: quantizers load late).
_EXTRA_FLOP_FORMULAS: dict[str, dict[str, Callable[..., int]]] = {
    "aten": dict.fromkeys(["_scaled_dot_product_flash_attention_for_cpu",
                           "_scaled_dot_product_fused_attention_overrideable"], _attention_flops),
    "quanto": {"qbytes_mm": _weight_matmul_flops},
    "bitsandbytes": dict.fromkeys(["int8_linear_matmul", "int8_scaled_mm", "int8_mixed_scaled_mm", "gemv_4bit",
                                   "gemm_4bit"], _weight_matmul_flops),
}

#: op names (after the namespace) that look like they should cost FLOPs; warned about when no formula exists.
_MATMUL_LIKE = re.compile(r"matmul|gemm|gemv|conv|attention|einsum|linear|(^|_)(b|addb?|scaled_|qbytes_)?mm($|_)")


def _extra_flop_formulas() -> dict[Any, Callable[..., int]]:
    """Formulas for ops the stock registry lacks; resolved at call time (quantization libraries load lazily)."""
    mapping = {}
    for namespace, formulas in _EXTRA_FLOP_FORMULAS.items():
        for name, formula in formulas.items():
            op = getattr(getattr(torch.ops, namespace), name, None)
            if op is not None and op not in flop_registry:
                mapping[op] = formula
    return mapping


class _OpRecorder(TorchDispatchMode):
    """Records which op overload packets a forward dispatches (to name the ones no FLOP formula covers)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[Any] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.overloadpacket)
        return func(*args, **(kwargs or {}))


def count_flops(model: nn.Module, inputs: Inputs) -> int:
    """FLOPs of one forward of `model` on `inputs`, counted by `FlopCounterMode` (2 FLOPs per multiply-add).

    Counted: matmuls (`mm`, `addmm`, `bmm`, `baddbmm`), convolutions, scaled-dot-product attention (the CPU
    flash kernel included) and optimum-quanto / bitsandbytes quantized matmuls. Not counted (0): bias adds,
    normalizations, activations, softmax, pooling, residual adds. A matmul-like op without a formula raises a
    `RuntimeWarning` naming it. The model runs in eval mode under `torch.no_grad()` (modes restored after);
    `inputs` is a tensor (passed positionally, as `pixel_values`) or a mapping of forward kwargs, moved to
    the model's device. Returns the FLOPs of the whole batch.
    """
    _check_model(model)
    args, kwargs = _to_device(*_check_inputs(inputs)[:2], _model_device(model))
    extra = _extra_flop_formulas()
    counter = FlopCounterMode(display=False, custom_mapping=extra)
    recorder = _OpRecorder()
    with _eval_mode(model), torch.no_grad(), counter, recorder:
        model(*args, **kwargs)
    known = set(flop_registry) | set(extra)
    missed = sorted(str(op) for op in recorder.ops if op not in known and _MATMUL_LIKE.search(op.__name__))
    if missed:
        warnings.warn(f"count_flops: no FLOP formula for {missed}; counted as 0", RuntimeWarning, stacklevel=2)
    return int(counter.get_total_flops())


def flops_per_image(model: nn.Module, example_pixel_values: Inputs) -> float:
    """[`count_flops`] of one forward on `example_pixel_values` divided by its batch size.

    Returns a float; it is a whole number whenever the model does the same work for every image.
    """
    _check_model(model)
    batch = _check_inputs(example_pixel_values)[2]
    total = count_flops(model, example_pixel_values)
    return total // batch if total % batch == 0 else total / batch


# ------------------------------------------------------------------------------------------ parameters / bytes


def _leaf_tensors(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """Plain tensors that hold `tensor`'s data: itself, or the inner tensors of a wrapper subclass."""
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        for name in names:
            inner = getattr(tensor, name)
            if isinstance(inner, torch.Tensor):
                yield from _leaf_tensors(inner)
    else:
        yield tensor


def _storage_key_and_bytes(tensor: torch.Tensor) -> tuple[Any, int]:
    """(identity of the storage, its size in bytes); falls back to the tensor itself when there is none."""
    if tensor.device.type != "meta":
        try:
            storage = tensor.untyped_storage()
            if storage.data_ptr() != 0:
                return ("storage", tensor.device, storage.data_ptr()), int(storage.nbytes())
        except (RuntimeError, NotImplementedError, TypeError):
            pass
    return ("tensor", id(tensor)), tensor.numel() * tensor.element_size()


def _attached_tensors(obj: Any, depth: int) -> Iterator[torch.Tensor]:
    """Tensors hung on an object's `__dict__` (and `depth` levels of plain objects below it)."""
    try:
        values = list(vars(obj).values())
    except TypeError:
        return
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))
        elif depth > 0 and hasattr(value, "__dict__") and not isinstance(value, (nn.Module, type)) and not callable(value):
            yield from _attached_tensors(value, depth - 1)


def _model_tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    """Parameters, buffers and tensors attached outside the state dict (e.g. bitsandbytes' `SCB`, `quant_state`)."""
    for tensor in _iter_params_and_buffers(model):
        yield tensor
        yield from _attached_tensors(tensor, depth=2)
    for module in model.modules():
        for name, value in vars(module).items():
            if name.startswith("_") or isinstance(value, (torch.Tensor, nn.Module, type)) or callable(value):
                continue
            if hasattr(value, "__dict__"):  # e.g. bitsandbytes' MatmulLtState on `module.state`
                yield from _attached_tensors(value, depth=1)


def _logical_numel(param: torch.Tensor) -> int:
    """Elements of the weight a parameter stands for (bitsandbytes 4-bit packs two per byte: unpack)."""
    shape = getattr(getattr(param, "quant_state", None), "shape", None)
    if isinstance(shape, (tuple, list)) and all(isinstance(d, int) for d in shape):
        return math.prod(shape)
    return param.numel()


def count_parameters(model: nn.Module) -> int:
    """Number of unique parameter elements, in the logical (unquantized) shape, whatever the storage dtype.

    A parameter shared between modules counts once, and so do distinct `Parameter` objects viewing the same
    memory with the same offset, shape and stride (weights tied by sharing storage). Tensor subclasses
    (optimum-quanto) report their logical shape; bitsandbytes 4-bit weights, stored packed, are counted in
    the shape recorded by their `quant_state`. Buffers are not parameters.
    """
    _check_model(model)
    seen: set[Any] = set()
    total = 0
    for param in model.parameters():
        if is_traceable_wrapper_subclass(param) or param.device.type == "meta":
            key: Any = ("id", id(param))
        else:
            storage_key, _ = _storage_key_and_bytes(param)
            key = (storage_key, param.storage_offset(), tuple(param.shape), tuple(param.stride()))
        if key not in seen:
            seen.add(key)
            total += _logical_numel(param)
    return total


def _unique_storage_bytes(tensors) -> int:
    storages = {}
    for tensor in tensors:
        for leaf in _leaf_tensors(tensor):
            key, nbytes = _storage_key_and_bytes(leaf)
            storages[key] = nbytes
    return sum(storages.values())


def weight_bytes(model: nn.Module) -> int:
    """Bytes the model's weights occupy: parameters, buffers and quantization side tensors, each storage once.

    How: every parameter and buffer is reduced to the plain tensors holding its data (a traceable tensor
    subclass, such as an optimum-quanto `WeightQBytesTensor`, is expanded through `__tensor_flatten__` into its
    int8 data and float scales), then the `untyped_storage().nbytes()` of each distinct storage is summed, so
    tied weights and views count once. Tensors hung on parameters or on module attribute objects outside the
    state dict are included too (bitsandbytes keeps int8 row scales on `weight.SCB` / `module.state.SCB` and
    4-bit `quant_state.absmax`). A tensor without a storage (meta) counts `numel * element_size`.

    For a float model this equals `sum(t.numel() * t.element_size())` over parameters and buffers.
    """
    _check_model(model)
    return _unique_storage_bytes(_model_tensors(model))


