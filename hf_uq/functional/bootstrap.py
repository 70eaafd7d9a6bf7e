"""Percentile bootstrap confidence intervals, optionally stratified by group (e.g. by training seed).

Small test sets are noisy (DESIGN.md §4): every number a report prints comes with an interval from
[`bootstrap_interval`]. Rows are resampled with replacement, jointly across the arrays passed in (row i of
every array moves together). With ``groups``, each group is resampled separately and keeps its size, so
intervals over results pooled from several seeds (or from an in-distribution and an OOD set) reflect the
sampling noise of each part without mixing them.

Resample indices are drawn from ``numpy.random.default_rng([seed, group])`` in a fixed order, so the same
inputs and seed give the same interval, whether the statistic is called once per resample or on a batch of
resamples (``vectorized=True``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ._validation import to_numpy

__all__ = ["BootstrapInterval", "bootstrap_indices", "bootstrap_interval"]

# resamples drawn per batch; fixed so that the index stream never depends on memory or on `vectorized`
_RESAMPLES_PER_DRAW = 64
# upper bound on the elements of one batch of resampled arrays handed to a vectorized statistic
_VECTORIZED_ELEMENTS = 2**24


class BootstrapInterval(NamedTuple):
    """A point estimate and its percentile bootstrap interval.

    Each field is a float, or an array of the shape the statistic returns when it returns several values.
    ``low`` and ``high`` are NaN when the interval could not be computed (no resamples requested, or the
    statistic was NaN on every resample).

    Attributes:
        estimate: the statistic on the original data.
        low: the ``(1 - confidence) / 2`` percentile of the resampled statistics.
        high: the ``(1 + confidence) / 2`` percentile of the resampled statistics.
    """

    estimate: Any
    low: Any
    high: Any

    def contains(self, value: Any) -> Any:
        """Whether ``value`` lies in [low, high] (element-wise for array intervals)."""
        return (np.asarray(self.low) <= value) & (value <= np.asarray(self.high))


def _check_groups(groups: Any, n: int) -> list[np.ndarray]:
    """Positions of each group's rows, groups in sorted order of their labels."""
    g = to_numpy(groups, "groups")
    if g.ndim != 1:
        raise ValueError(f"`groups` must have shape (n_samples,), got shape {tuple(g.shape)}")
    if len(g) != n:
        raise ValueError(f"length mismatch: `groups` has {len(g)} entries but the arrays have {n} rows")
    _, inverse = np.unique(g, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse)
    return np.split(order, np.cumsum(counts)[:-1])


def bootstrap_indices(
    n_samples: int, n_resamples: int = 1000, seed: int = 0, groups: Any = None
) -> Iterator[np.ndarray]:
    """Yield batches of bootstrap resample indices, each of shape (batch, n_samples).

    Row ``r`` of a batch lists the original rows making up one resample. Without ``groups`` the rows are drawn
    uniformly with replacement from all ``n_samples``; with ``groups`` position ``i`` always draws from the
    group of row ``i`` (``groups[idx] == groups`` for every resample ``idx``), so each group keeps its size
    and its positions. Each group (in sorted order of the labels) draws from its own random stream, seeded by
    ``(seed, group position)``, so the resamples of the first groups do not change when later groups are added.
    Batches hold at most 64 resamples; the concatenation of all batches does not depend on how the caller
    consumes them.

    Args:
        n_samples: number of rows N.
        n_resamples: total number of resamples R.
        seed: non-negative seed of the random streams.
        groups: optional (N,) labels (ints or strings) of the strata to resample within.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise ValueError(f"`n_samples` must be a positive integer, got {n_samples!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 0:
        raise ValueError(f"`n_resamples` must be a non-negative integer, got {n_resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer, got {seed!r}")
    parts = [np.arange(n_samples)] if groups is None else _check_groups(groups, n_samples)
    # one stream per group: a group's resamples do not depend on which other groups are present
    rngs = [np.random.default_rng([int(seed), j]) for j in range(len(parts))]
    done = 0
    while done < n_resamples:
        batch = min(_RESAMPLES_PER_DRAW, n_resamples - done)
        idx = np.empty((batch, n_samples), dtype=np.intp)
        for positions, rng in zip(parts, rngs, strict=True):
            draws = rng.integers(0, len(positions), size=(batch, len(positions)))
            first, last = positions[0], positions[-1]
            if last - first == len(positions) - 1:  # a contiguous block (sorted positions): shift, no gather
                np.add(draws, first, out=idx[:, first : last + 1])
            else:
                idx[:, positions] = positions[draws]
        done += batch
        yield idx


def _as_statistic_array(value: Any, what: str, batched: bool = False) -> np.ndarray:
    arr = np.asarray(to_numpy(value, "statistic"), dtype=np.float64)
    if arr.ndim > 1 + batched:
        expected = "(B,) or (B, K) array" if batched else "scalar or a 1-D array"
        raise ValueError(f"`statistic` must return a {expected}, got shape {arr.shape} {what}")
    return arr


def bootstrap_interval(
    statistic: Callable[..., Any],
    *arrays: Any,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    groups: Any = None,
    vectorized: bool = False,
) -> BootstrapInterval:
    """Percentile bootstrap interval of ``statistic(*arrays)``, resampling rows jointly across ``arrays``.

    Each resample draws N rows with replacement (stratified by ``groups`` when given: every group keeps its
    size and its positions, see [`bootstrap_indices`]) and evaluates the statistic on the arrays indexed with
    the same rows. The interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles
    (linear interpolation) of the resampled statistics. Resamples where the statistic is NaN (e.g. a
    correctness AUROC on a resample without errors) are left out of the percentiles; a warning says how many
    when there are any.

    The statistic may return several values at once (a 1-D array): every value is then resampled with the
    same rows, which is cheaper and keeps the intervals of related metrics consistent.

    Args:
        statistic (`Callable`):
            Called as ``statistic(*arrays)``; returns a float or a 1-D array of K floats. With
            ``vectorized=True`` it receives every array with a leading batch axis, ``(B, N, ...)``, and returns
            ``(B,)`` or ``(B, K)``.
        arrays (array-likes):
            One or more arrays (numpy, torch, lists) sharing their first dimension N.
        n_resamples (`int`, *optional*, defaults to 1000):
            Number of bootstrap resamples R; 0 returns the estimate with NaN bounds.
        confidence (`float`, *optional*, defaults to 0.95):
            Coverage of the interval, in (0, 1).
        seed (`int`, *optional*, defaults to 0):
            Seed of the resampling; the result is deterministic given it.
        groups (array-like, *optional*):
            (N,) stratum labels, e.g. the training seed that produced each row when results of several seeds
            are pooled, so the pooled interval is not widened or narrowed by seeds trading rows.
        vectorized (`bool`, *optional*, defaults to `False`):
            Whether ``statistic`` accepts batches of resamples (see above). Same result, fewer Python calls.

    Returns:
        [`BootstrapInterval`]: ``(estimate, low, high)``.

    Example:

    ```python
    >>> import numpy as np
    >>> from hf_uq.functional import bootstrap_interval
    >>> x = np.random.default_rng(0).normal(size=200)
    >>> est, low, high = bootstrap_interval(np.mean, x)
    >>> bool(low < est < high)
    True
    ```
    """
    if not callable(statistic):
        raise ValueError(f"`statistic` must be callable, got {type(statistic).__name__}")
    if not arrays:
        raise ValueError("at least one array is required")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence}")
    data = [to_numpy(a, f"arrays[{i}]") for i, a in enumerate(arrays)]
    for i, a in enumerate(data):
        if a.ndim == 0:
            raise ValueError(f"`arrays[{i}]` must have at least one dimension (rows), got a scalar")
    n = len(data[0])
    if n == 0:
        raise ValueError("the arrays are empty: at least one row is required")
    lengths = [len(a) for a in data]
    if len(set(lengths)) > 1:
        raise ValueError(f"length mismatch: the arrays have {lengths} rows; they must share their first dimension")

    if vectorized:
        estimate = _as_statistic_array(statistic(*[a[None] for a in data]), "(vectorized, on the data)", True)
        if estimate.ndim == 0 or len(estimate) != 1:
            raise ValueError(
                "a vectorized `statistic` must return one value (or one row) per resample in the batch, "
                f"got shape {estimate.shape} for a batch of 1"
            )
        estimate = estimate[0]
    else:
        estimate = _as_statistic_array(statistic(*data), "on the data")

    nan = np.full(estimate.shape, np.nan)
    if n_resamples == 0:
        return _pack(estimate, nan, nan)

    row_elements = max(1, sum(a[:1].size for a in data))
    chunk = max(1, _VECTORIZED_ELEMENTS // row_elements)
    # the row positions 0..n-1 themselves (a statistic that indexes its own data): indexing them with a
    # resample's indices gives those indices, so they are passed without a gather
    positions = [a.ndim == 1 and a.dtype == np.intp and np.array_equal(a, np.arange(n)) for a in data]

    def rows_of(index: np.ndarray) -> list[np.ndarray]:
        return [index if same else a[index] for a, same in zip(data, positions, strict=True)]

    results = []
    for idx in bootstrap_indices(n, n_resamples, seed, groups):
        if vectorized:
            for start in range(0, len(idx), chunk):
                part = idx[start : start + chunk]
                values = _as_statistic_array(statistic(*rows_of(part)), "(vectorized, on a batch)", True)
                results.append(values.reshape((len(part),) + estimate.shape))
        else:
            for row in idx:
                value = _as_statistic_array(statistic(*rows_of(row)), "on a resample")
                results.append(value.reshape((1,) + estimate.shape))
    stats = np.concatenate(results)
    if stats.shape[1:] != estimate.shape:
        raise ValueError(f"`statistic` returned shape {stats.shape[1:]} on resamples but {estimate.shape} on the data")

    bad = np.isnan(stats)
    if bad.any():
        worst = int(bad.reshape(len(stats), -1).sum(axis=0).max())
        if worst == len(stats):
            warnings.warn("the statistic is NaN on every resample; the interval is NaN", RuntimeWarning, stacklevel=2)
        else:
            warnings.warn(
                f"the statistic is NaN on {worst} of {len(stats)} resamples; they are left out of the interval",
                RuntimeWarning,
                stacklevel=2,
            )
    alpha = (1.0 - confidence) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices -> NaN bounds
        low, high = np.nanquantile(stats, [alpha, 1.0 - alpha], axis=0)
    return _pack(estimate, low, high)


def _pack(estimate: np.ndarray, low: np.ndarray, high: np.ndarray) -> BootstrapInterval:
    if estimate.ndim == 0:
        return BootstrapInterval(float(estimate), float(low), float(high))
    return BootstrapInterval(estimate, np.asarray(low), np.asarray(high))
