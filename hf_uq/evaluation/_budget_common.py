"""Validation and model-mode helpers shared by the budget modules."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

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


# ------------------------------------------------------------------------------------------ native noise


NOISE: tuple[str, ...] = (
    "USDT:", "profiler_start", "profiler_stop", "gpuGetDeviceCount", "No CUDA runtime is found",
)


@contextlib.contextmanager
def filtered_stderr(noise: Sequence[str] = NOISE) -> Iterator[None]:
    """Hold back the lines that native code (the torch profiler's kineto, torch's C++ extension loader) writes to
    file descriptor 2 while the block runs, and pass every other line on afterwards."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable descriptor 2
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(True) if not any(n in line for n in noise))
            if kept:
                os.write(2, kept.encode("utf-8"))
