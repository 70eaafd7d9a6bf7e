"""The cost side of every comparison: FLOPs, parameters, weight bytes, latency and peak memory, all measured.

- **FLOPs** ([`count_flops`], [`flops_per_image`]): one forward inside `torch.utils.flop_counter.FlopCounterMode`
  (2 FLOPs per multiply-add; bias adds, norms, activations, softmax and residuals cost 0). On CPU, SDPA runs
  `aten._scaled_dot_product_flash_attention_for_cpu`, which the stock registry lacks (a tiny ViT would lose its
  attention matmuls, ~11 % of its FLOPs); this module adds that formula and ones for the quantized matmuls of
  optimum-quanto and bitsandbytes, and warns (`RuntimeWarning`) about any matmul-like op still uncounted.
- **Parameters / weight bytes** ([`count_parameters`], [`weight_bytes`]): tied or storage-sharing weights count
  once; bytes are those of the real storages (quantized subclasses: packed data + scales).
- **Latency** ([`measure_latency`], [`compare_latency`]): `time.perf_counter` around single forwards under
  `torch.inference_mode()`, device synchronized; several models are timed interleaved, round-robin.
- **Peak memory** ([`peak_memory`]): PyTorch's allocator, read on CPU through the profiler's memory events.

[`budget_report`] / [`compare_budgets`] combine them; [`relative_budget`] gives ratios to a reference model.
Every function runs the model in eval mode and restores each submodule's own `training` flag afterwards.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils.flop_counter import FlopCounterMode, flop_registry

__all__ = [
    "count_flops", "flops_per_image", "count_parameters", "weight_bytes",
    "LatencyStats", "measure_latency", "compare_latency", "MemoryStats", "peak_memory",
    "budget_report", "compare_budgets", "relative_budget",
]

Inputs = torch.Tensor | Mapping[str, Any]

# ------------------------------------------------------------------------------------------ validation


def _check_model(model: Any, name: str = "model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise ValueError(f"{name} must be a torch.nn.Module, got {type(model).__name__}")
    return model


def _check_models(models: Any) -> None:
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty mapping of name -> nn.Module")
    for name, model in models.items():
        if not isinstance(name, str):
            raise ValueError(f"model names must be str, got {name!r}")
        _check_model(model, f"models[{name!r}]")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_inputs(inputs: Any) -> tuple[tuple, dict[str, Any], int]:
    """Call arguments (a tensor goes positionally, a mapping as kwargs) and the batch size: dim 0 of the tensor,
    of `pixel_values`, or of the mapping's first tensor."""
    if isinstance(inputs, torch.Tensor):
        args, kwargs, first = (inputs,), {}, inputs
    elif isinstance(inputs, Mapping) and inputs and all(isinstance(k, str) for k in inputs):
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        if not tensors:
            raise ValueError(f"inputs mapping holds no tensor (keys: {sorted(inputs)})")
        first = inputs["pixel_values"] if isinstance(inputs.get("pixel_values"), torch.Tensor) else tensors[0]
        args, kwargs = (), dict(inputs)
    else:
        raise ValueError("inputs must be a tensor (pixel_values) or a non-empty mapping of forward kwargs "
                         f"with str keys, got {type(inputs).__name__}")
    if first.ndim == 0 or first.shape[0] == 0:
        raise ValueError(f"inputs must have a non-empty batch dimension, got shape {tuple(first.shape)}")
    return args, kwargs, int(first.shape[0])


# ------------------------------------------------------------------------------------------ helpers


def _model_device(model: nn.Module) -> torch.device:
    tensor = next(_iter_params_and_buffers(model), None)
    return torch.device("cpu") if tensor is None else tensor.device


def _to_device(args: tuple, kwargs: dict[str, Any], device: torch.device) -> tuple[tuple, dict[str, Any]]:
    def move(v: Any) -> Any:
        return v.to(device) if isinstance(v, torch.Tensor) and v.device != device else v

    return tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Puts `model` in eval mode and restores every submodule's own `training` flag on exit."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in flags:
            module.training = training


@contextmanager
def _num_threads(threads: int | None) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or previous)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type != "cpu" and torch.accelerator.is_available():
        torch.accelerator.synchronize()


def _grad_free_mode(model: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """`torch.inference_mode`, or `torch.no_grad` for a model whose forward cannot run under it.

    Probes with one forward (it counts as a warm-up). optimum-quanto's 4-bit weights, for one, fail under
    inference mode ("Cannot set version_counter for inference tensor").
    """
    try:
        with torch.inference_mode():
            model(*args, **kwargs)
    except RuntimeError as error:
        if "inference tensor" not in str(error):
            raise
        return torch.no_grad
    return torch.inference_mode


def _iter_params_and_buffers(model: nn.Module) -> Iterator[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()


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


# ------------------------------------------------------------------------------------------ latency


@dataclass(frozen=True)
class LatencyStats:
    """Wall-clock seconds of single forwards (`time.perf_counter`, device synchronized around each call).

    `p50` and `p99` interpolate linearly between samples (`numpy.percentile`); with fewer than 100 repeats
    `p99` lies between the two slowest runs. `times` keeps the raw samples in run order.
    """

    p50: float
    p99: float
    mean: float
    min: float
    n: int
    batch_size: int
    times: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_times(cls, times: list[float] | tuple[float, ...], batch_size: int) -> LatencyStats:
        samples = np.asarray(times, dtype=np.float64)
        p50, p99 = (float(q) for q in np.percentile(samples, [50, 99]))
        return cls(p50, p99, float(samples.mean()), float(samples.min()), int(samples.size), int(batch_size),
                   tuple(float(t) for t in samples))

    @property
    def p50_per_image(self) -> float:
        return self.p50 / self.batch_size

    def as_dict(self) -> dict[str, float | int]:
        return {"p50_s": self.p50, "p99_s": self.p99, "mean_s": self.mean, "min_s": self.min,
                "p50_per_image_s": self.p50_per_image, "n": self.n, "batch_size": self.batch_size}


def compare_latency(
    models: Mapping[str, nn.Module], inputs: Inputs, *, warmup: int = 3, repeats: int = 30, threads: int | None = None
) -> dict[str, LatencyStats]:
    """Times several models side by side, interleaved, so that machine noise hits all of them alike.

    Each round runs every model once; round `r` starts at model `r % len(models)` (rotation removes any
    systematic advantage of going first or of following a given model). `warmup` untimed rounds come first.
    Every forward runs under `torch.inference_mode()` (`torch.no_grad()` for a model that cannot run under
    it, found by one untimed probe forward) with the models in eval mode (modes restored after),
    and with `torch.set_num_threads(threads)` when `threads` is given (restored after). Inputs are moved to
    each model's device once, outside the timed region.

    Returns:
        `dict[str, LatencyStats]` in the order of `models`.
    """
    _check_models(models)
    warmup = _check_int("warmup", warmup, 0)
    repeats = _check_int("repeats", repeats, 1)
    if threads is not None:
        threads = _check_int("threads", threads, 1)
    args, kwargs, batch = _check_inputs(inputs)

    names = list(models)
    calls = {}
    for name in names:
        device = _model_device(models[name])
        calls[name] = (models[name], device, *_to_device(args, kwargs, device))
    times: dict[str, list[float]] = {name: [] for name in names}
    modes: dict[str, Callable[[], Any]] = {}

    def run(name: str) -> float:
        model, device, a, kw = calls[name]
        with modes[name]():
            _synchronize(device)
            start = time.perf_counter()
            out = model(*a, **kw)
            _synchronize(device)
            elapsed = time.perf_counter() - start
            del out
        return elapsed

    with ExitStack() as stack:
        stack.enter_context(_num_threads(threads))
        for name in names:
            stack.enter_context(_eval_mode(models[name]))
        for name, (model, _, a, kw) in calls.items():
            modes[name] = _grad_free_mode(model, a, kw)  # one untimed probe forward each
        for _ in range(warmup):
            for name in names:
                run(name)
        for r in range(repeats):
            offset = r % len(names)
            for name in names[offset:] + names[:offset]:
                times[name].append(run(name))
    return {name: LatencyStats.from_times(times[name], batch) for name in names}


def measure_latency(
    model: nn.Module, inputs: Inputs, *, warmup: int = 3, repeats: int = 30, threads: int | None = None
) -> LatencyStats:
    """Latency of `model` alone: [`compare_latency`] with one model. To compare models, use `compare_latency`."""
    _check_model(model)
    return compare_latency({"model": model}, inputs, warmup=warmup, repeats=repeats, threads=threads)["model"]


# ------------------------------------------------------------------------------------------ peak memory


@dataclass(frozen=True)
class MemoryStats:
    """Memory of one forward, in bytes.

    `weights` is [`weight_bytes`]; `inputs` the bytes of the input tensors; `activations_peak` the highest
    amount of memory allocated during the forward above what was live when it started (activations, the
    output, kernel workspaces taken from PyTorch's allocator); `total_peak = weights + inputs +
    activations_peak`. `method` names how `activations_peak` was measured (see [`peak_memory`]).
    """

    weights: int
    inputs: int
    activations_peak: int
    total_peak: int
    method: str


def _walk(nodes) -> Iterator[Any]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _cpu_activation_peak(forward: Callable[[], Any]) -> tuple[int, str]:
    """Peak of CPU-allocator bytes allocated by `forward` above its starting point, from profiler memory events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        forward()
    try:
        from torch._C._profiler import _EventType

        allocations = [
            node
            for node in _walk(prof.profiler.kineto_results.experimental_event_tree())
            if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu"
        ]
    except (AttributeError, ImportError, RuntimeError):
        allocations = None
    if allocations is not None:
        live: dict[int, int] = {}  # ptr -> bytes, for blocks allocated inside the forward
        running = peak = 0
        for node in sorted(allocations, key=lambda node: node.start_time_ns):
            ptr, size = node.extra_fields.ptr, node.extra_fields.alloc_size
            if size > 0:
                live[ptr] = size
                running += size
                peak = max(peak, running)
            elif ptr in live:  # frees of memory that predates the forward do not lower the baseline
                running -= live.pop(ptr)
        return int(peak), "profiler-allocator"
    # Fallback on the public API: running sum of each event's self memory (op granularity, so transients inside
    # one op are netted out and the peak can be underestimated).
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    running = peak = 0
    for event in events:
        running += event.self_cpu_memory_usage
        peak = max(peak, running)
    return int(peak), "profiler-op-events"


def peak_memory(model: nn.Module, inputs: Inputs, *, warmup: int = 1) -> MemoryStats:
    """Peak memory of one forward (eval mode, `torch.inference_mode()`), weights and activations separately.

    How `activations_peak` is measured:

    - CPU: the forward runs under `torch.profiler.profile(profile_memory=True)`, which makes PyTorch's CPU
      allocator report every allocation and free (pointer, bytes) as a profiler event, on every intra-op
      thread; replaying them in time order gives the running total of bytes allocated inside the forward and
      still live, and `activations_peak` is its maximum. It includes activations, the output and workspaces
      that kernels take from PyTorch's allocator; frees of memory allocated before the forward are ignored.
    - CUDA / other accelerators: `max_memory_allocated() - memory_allocated()` around the forward after
      `reset_peak_memory_stats()`.

    Caveats: memory that a library allocates outside PyTorch's allocator (oneDNN or BLAS scratch buffers,
    OpenMP stacks) is invisible, as are allocator caching and fragmentation (this is allocated, not resident,
    memory); the profiler's internal private API is used, with a coarser public-API fallback (op-level
    running sum, `method="profiler-op-events"`). `warmup` (>= 1) unmeasured forwards run first so that lazy
    one-time work (e.g. bitsandbytes quantizing on first call) is not counted. Runs under
    `torch.inference_mode()`, or `torch.no_grad()` for a model that cannot. The profiler prints kineto status
    lines to stderr.
    """
    _check_model(model)
    warmup = _check_int("warmup", warmup, 1)
    device = _model_device(model)
    args, kwargs = _to_device(*_check_inputs(inputs)[:2], device)

    def forward() -> None:
        out = model(*args, **kwargs)
        _synchronize(device)
        del out

    with _eval_mode(model):
        grad_free = _grad_free_mode(model, args, kwargs)  # also the first warm-up forward
        with grad_free():
            for _ in range(warmup - 1):
                forward()
            if device.type == "cpu":
                activations, method = _cpu_activation_peak(forward)
            else:
                backend = torch.cuda if device.type == "cuda" else torch.accelerator
                _synchronize(device)
                backend.reset_peak_memory_stats(device)
                start = backend.memory_allocated(device)
                forward()
                activations = max(int(backend.max_memory_allocated(device) - start), 0)
                method = f"{device.type}-allocator"
    weights = weight_bytes(model)
    inputs_bytes = _unique_storage_bytes(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))
    return MemoryStats(weights, inputs_bytes, activations, weights + inputs_bytes + activations, method)


# ------------------------------------------------------------------------------------------ reports


def _batch_of(example: Inputs, batch_size: int) -> Inputs:
    """`batch_size` samples cycled from `example` along dim 0 (a fresh contiguous batch)."""
    n = _check_inputs(example)[2]
    index = torch.arange(batch_size) % n

    def take(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.ndim > 0 and v.shape[0] == n:
            return v[index.to(v.device)].contiguous()
        return v

    if isinstance(example, torch.Tensor):
        return take(example)
    return {k: take(v) for k, v in example.items()}


def compare_budgets(
    models: Mapping[str, nn.Module], example_pixel_values: Inputs, *, batch_sizes: tuple[int, ...] = (1, 32),
    warmup: int = 3, repeats: int = 30, threads: int | None = None,
) -> dict[str, dict[str, Any]]:
    """[`budget_report`] for several models, with latencies measured interleaved ([`compare_latency`]).

    Batches of each size are built by cycling the samples of `example_pixel_values`.
    """
    _check_models(models)
    _check_inputs(example_pixel_values)
    if isinstance(batch_sizes, int) or not batch_sizes:
        raise ValueError(f"batch_sizes must be a non-empty sequence of positive integers, got {batch_sizes!r}")
    batch_sizes = tuple(_check_int("each batch size", b, 1) for b in batch_sizes)

    reports: dict[str, dict[str, Any]] = {
        name: {
            "parameters": count_parameters(model),
            "weight_bytes": weight_bytes(model),
            "flops_per_image": flops_per_image(model, example_pixel_values),
            "device": str(_model_device(model)),
            "threads": threads if threads is not None else torch.get_num_threads(),
            "per_batch": {},
        }
        for name, model in models.items()
    }
    for batch in batch_sizes:
        inputs = _batch_of(example_pixel_values, batch)
        latencies = compare_latency(models, inputs, warmup=warmup, repeats=repeats, threads=threads)
        for name, model in models.items():
            with _num_threads(threads):
                memory = peak_memory(model, inputs)
            lat = latencies[name]
            reports[name]["per_batch"][batch] = {
                **{f"latency_{k}": v for k, v in lat.as_dict().items() if k.endswith("_s")},
                "activations_peak_bytes": memory.activations_peak,
                "peak_memory_bytes": memory.total_peak,
            }
    return reports


def budget_report(
    model: nn.Module, example_pixel_values: Inputs, *, batch_sizes: tuple[int, ...] = (1, 32),
    warmup: int = 3, repeats: int = 30, threads: int | None = None,
) -> dict[str, Any]:
    """Everything the budget side of a comparison needs, for one model.

    Returns:
        `dict` with `parameters` ([`count_parameters`]), `weight_bytes` ([`weight_bytes`]),
        `flops_per_image` ([`flops_per_image`] on `example_pixel_values`), `device`, `threads`, and
        `per_batch[batch_size]` = {`latency_p50_s`, `latency_p99_s`, `latency_mean_s`, `latency_min_s`,
        `latency_p50_per_image_s`, `activations_peak_bytes`, `peak_memory_bytes`} ([`peak_memory`]'s
        `total_peak`). To compare models, use [`compare_budgets`] (interleaved latencies), then
        [`relative_budget`].
    """
    _check_model(model)
    return compare_budgets({"model": model}, example_pixel_values, batch_sizes=batch_sizes, warmup=warmup,
                           repeats=repeats, threads=threads)["model"]


_NOT_RATIOS = frozenset({"threads", "n", "batch_size"})


def _ratios(value: Any, reference: Any) -> Any:
    if isinstance(value, Mapping) and isinstance(reference, Mapping):
        out = {}
        for key, sub in value.items():
            if key in _NOT_RATIOS or key not in reference:
                continue
            ratio = _ratios(sub, reference[key])
            if ratio is not None:
                out[key] = ratio
        return out
    numeric = (int, float, np.integer, np.floating)
    if isinstance(value, numeric) and isinstance(reference, numeric) and not isinstance(value, bool):
        if reference == 0:
            return float("nan") if value == 0 else math.copysign(math.inf, value)
        return float(value) / float(reference)
    return None


def relative_budget(reports: Mapping[str, Mapping[str, Any]], reference: str = "single") -> dict[str, dict[str, Any]]:
    """Ratios of every numeric entry of each report to the same entry of `reports[reference]`.

    The structure of the reports is kept (`per_batch[b][...]` included); non-numeric entries and counts that
    are settings rather than costs (`threads`) are dropped. x / 0 gives inf, 0 / 0 NaN. The reference
    maps to ratios of 1.0.
    """
    if not isinstance(reports, Mapping) or not reports:
        raise ValueError("reports must be a non-empty mapping of name -> budget report")
    if reference not in reports:
        raise ValueError(f"reference {reference!r} is not among the reports {sorted(reports)}")
    for name, report in reports.items():
        if not isinstance(report, Mapping):
            raise ValueError(f"reports[{name!r}] must be a budget report dict, got {type(report).__name__}")
    return {name: _ratios(report, reports[reference]) for name, report in reports.items()}
