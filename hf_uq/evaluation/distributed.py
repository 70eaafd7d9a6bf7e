"""Data-parallel prediction under `accelerate launch`: contiguous shards per process, gathered on rank 0 in order.

Every process predicts a contiguous block of each split ([`shard_bounds`]); the per-sample arrays are gathered
with `accelerate.utils.gather_object` and joined in rank order, which is the original row order (no padding, so
uneven shards need no trimming). A single process (a plain `hf-uq ...` call) predicts everything itself.

On a machine without GPUs, `accelerate launch --multi_gpu --num_processes N` starts N CPU processes (gloo);
`accelerate launch --cpu --num_processes N` starts a single process unless an MPI hostfile is given
(`--mpirun_hostfile`), as accelerate only launches multi-CPU jobs through mpirun.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from datasets import Dataset

from .predict import Predictions

__all__ = ["distributed_state", "gather_predictions", "predict_sharded", "shard_bounds", "shard_dataset"]


def distributed_state(cpu: bool = False) -> Any:
    """The process's `accelerate.PartialState`.

    Args:
        cpu (`bool`, *optional*, defaults to `False`):
            Run on the CPU even when GPUs are visible. Without GPUs the CPU is always used, and a job started with
            several processes then communicates over gloo.

    Returns:
        `accelerate.PartialState`: `process_index`, `num_processes`, `device`, `is_main_process`.
    """
    from accelerate import PartialState

    return PartialState(cpu=cpu or not torch.cuda.is_available())


def shard_bounds(num_rows: int, num_shards: int, index: int) -> tuple[int, int]:
    """`[start, stop)` of the contiguous block of `num_rows` rows that shard `index` of `num_shards` holds.

    The first `num_rows % num_shards` shards hold one row more than the others (as `numpy.array_split`); shards
    may be empty when there are fewer rows than shards. Concatenating the shards in order gives every row once.
    """
    if num_shards < 1 or not 0 <= index < num_shards:
        raise ValueError(f"shard index {index} out of range for {num_shards} shards")
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    size, extra = divmod(num_rows, num_shards)
    start = index * size + min(index, extra)
    return start, start + size + (index < extra)


def shard_dataset(dataset: Dataset, num_shards: int, index: int) -> Dataset:
    """The contiguous shard `index` of `num_shards` of `dataset` (see [`shard_bounds`])."""
    start, stop = shard_bounds(len(dataset), num_shards, index)
    return dataset.select(range(start, stop))


def gather_predictions(
    local: Mapping[str, Mapping[str, Predictions | None]], state: Any
) -> dict[str, dict[str, Predictions]]:
    """Joins every process's `{route: {split: Predictions}}` in rank order (every process gets the result).

    A process whose shard of a split was empty contributes `None` for it.
    """
    if state.num_processes == 1:
        return {route: {split: p for split, p in splits.items() if p is not None} for route, splits in local.items()}
    from accelerate.utils import gather_object

    parts: list[Mapping[str, Mapping[str, Predictions | None]]] = gather_object([dict(local)])
    joined: dict[str, dict[str, Predictions]] = {}
    for route, splits in local.items():
        joined[route] = {}
        for split in splits:
            pieces = [part[route][split] for part in parts if part[route][split] is not None]
            joined[route][split] = Predictions.concatenate(pieces)
    return joined


def predict_sharded(
    predict_fn: Callable[..., Mapping[str, Mapping[str, Predictions]]],
    routes: list[Any],
    splits: Mapping[str, Dataset],
    state: Any,
    **kwargs: Any,
) -> dict[str, dict[str, Predictions]]:
    """Predicts this process's shard of every split with `predict_fn`, then gathers every shard in order.

    Args:
        predict_fn (`Callable`):
            Called as `predict_fn(routes, {split: shard}, **kwargs)` and returning `{route name: {split:
            Predictions}}` (e.g. `hf_uq.evaluation.protocol.predict_routes`).
        routes (`list`):
            Passed through to `predict_fn`; each has a `name`.
        splits (`Mapping[str, datasets.Dataset]`):
            The whole splits; each process takes its contiguous shard.
        state (`accelerate.PartialState`):
            From [`distributed_state`].
        kwargs:
            Passed to `predict_fn` (batch size, progress, threads).

    Returns:
        `dict[str, dict[str, Predictions]]`: every route's predictions of every whole split, rows in the original
        order, on every process.
    """
    shards = {name: shard_dataset(split, state.num_processes, state.process_index) for name, split in splits.items()}
    present = {name: shard for name, shard in shards.items() if len(shard)}
    predicted = predict_fn(routes, present, **kwargs) if present else {}
    local = {
        route.name: {name: predicted.get(route.name, {}).get(name) for name in splits} for route in routes
    }
    return gather_predictions(local, state)
