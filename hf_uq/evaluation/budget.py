"""The cost side of every comparison: FLOPs, parameters, weight bytes, latency and peak memory, all measured.

from __future__ import annotations

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



import math
from collections.abc import Mapping
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
    _model_device,
    _num_threads,
)
from .counting import count_flops, count_parameters, flops_per_image, weight_bytes
from .timing import LatencyStats, MemoryStats, compare_latency, measure_latency, peak_memory

__all__ = [
    "count_flops", "flops_per_image", "count_parameters", "weight_bytes",
    "LatencyStats", "measure_latency", "compare_latency", "MemoryStats", "peak_memory",
    "budget_report", "compare_budgets", "relative_budget", "Inputs",
]

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

