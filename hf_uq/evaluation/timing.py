"""Latency and peak memory of a model, measured (see `budget` for the definitions)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ._budget_common import (
    Inputs,
    _check_inputs,
    _check_int,
    _check_model,
    _check_models,
    _eval_mode,
    _grad_free_mode,
    _model_device,
    _num_threads,
    _synchronize,
    _to_device,
    filtered_stderr,
)
from .counting import _unique_storage_bytes, weight_bytes

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

    with filtered_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        forward()  # the profiler's native code prints status lines on stderr: held back
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
    `torch.inference_mode()`, or `torch.no_grad()` for a model that cannot. The status lines the profiler's
    native code prints on stderr are held back ([`filtered_stderr`]).
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


