"""Input conversion and validation shared by every functional metric.

Every public metric accepts numpy arrays, torch tensors and (nested) lists. They are turned
into numpy arrays here, checked, and a ``ValueError`` that names the problem (which argument,
which shape, which row) is raised for anything a metric cannot give a correct answer for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PROB_ATOL = 1e-4


def to_numpy(x: Any, name: str) -> np.ndarray:
    """Convert an array-like (numpy, torch, list) to a numpy array without copying when possible."""
    if x is None:
        raise ValueError(f"`{name}` is required, got None")
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu()
        if str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return x.numpy()
    try:
        arr = np.asarray(x)
    except ValueError as err:  # ragged lists
        raise ValueError(f"`{name}` could not be converted to an array: {err}") from None
    if arr.dtype == object:
        raise ValueError(f"`{name}` must be numeric, got ragged or non-numeric values")
    return arr


def _check_ndim(arr: np.ndarray, ndim: int, name: str, shape_hint: str) -> None:
    if arr.ndim != ndim:
        raise ValueError(
            f"`{name}` must have {ndim} dimension(s) {shape_hint}, got shape {tuple(arr.shape)}"
        )


def _check_numeric(arr: np.ndarray, name: str) -> None:
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"`{name}` must be numeric, got dtype {arr.dtype}")


def _check_finite(arr: np.ndarray, name: str) -> None:
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr.reshape(-1)))[0]
        index = np.unravel_index(bad, arr.shape)
        value = arr[index]
        where = index[0] if len(index) == 1 else tuple(int(i) for i in index)
        raise ValueError(f"`{name}` contains a non-finite value ({value}) at index {where}")


def check_scores(x: Any, name: str, *, allow_empty: bool = False) -> np.ndarray:
    """A 1-D array of finite real scores.

    float32 and float64 keep their dtype (sorting float32 is faster and loses nothing: only
    the order matters); every other numeric dtype becomes float64.
    """
    arr = to_numpy(x, name)
    _check_ndim(arr, 1, name, "(n_samples,)")
    _check_numeric(arr, name)
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"`{name}` is empty: at least one sample is required")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    _check_finite(arr, name)
    return arr


def check_correct(x: Any, name: str = "correct") -> np.ndarray:
    """A 1-D boolean array (booleans, or integers that are all 0 or 1)."""
    arr = to_numpy(x, name)
    _check_ndim(arr, 1, name, "(n_samples,)")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty: at least one sample is required")
    if arr.dtype == np.bool_:
        return arr
    _check_numeric(arr, name)
    _check_finite(arr, name)
    as_bool = arr != 0
    if not np.array_equal(as_bool, arr == 1):
        bad = np.flatnonzero((arr != 0) & (arr != 1))[0]
        raise ValueError(f"`{name}` must be boolean or 0/1, got {arr[bad]} at index {bad}")
    return as_bool


def check_same_length(*pairs: tuple[str, np.ndarray]) -> None:
    lengths = {name: len(arr) for name, arr in pairs}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"length mismatch: {desc} samples")


def check_probs(x: Any, name: str = "probs", hint: str = "") -> np.ndarray:
    """A (n_samples, n_classes) array of probabilities whose rows sum to 1 (atol 1e-4).

    Returned in its own floating dtype (float32 stays float32: reductions upcast later).
    """
    arr = to_numpy(x, name)
    _check_ndim(arr, 2, name, "(n_samples, n_classes)")
    _check_numeric(arr, name)
    if arr.shape[0] == 0:
        raise ValueError(f"`{name}` is empty: at least one sample is required")
    if arr.shape[1] < 2:
        raise ValueError(f"`{name}` must have at least 2 classes (columns), got {arr.shape[1]}")
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    elif arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    # a matrix-vector product is the fastest row sum; any NaN/inf entry makes its row sum
    # non-finite, so this one pass also screens for non-finite values
    row_sums = arr @ np.ones(arr.shape[1], dtype=arr.dtype)
    sum_low, sum_high = float(row_sums.min()), float(row_sums.max())  # NaN if any row is NaN
    if not np.isfinite(sum_low + sum_high):
        _check_finite(arr, name)  # names the exact entry
        raise ValueError(f"rows of `{name}` overflow when summed")
    low = arr.min()
    if low < 0:
        row = int(np.flatnonzero((arr < 0).any(axis=1))[0])
        raise ValueError(f"`{name}` contains a negative probability ({low}) in row {row}")
    if sum_low >= 1.0 - PROB_ATOL and sum_high <= 1.0 + PROB_ATOL:
        return arr  # the common case, settled by the two reductions above
    deviation = np.abs(row_sums.astype(np.float64) - 1.0)
    worst = int(deviation.argmax())
    if deviation[worst] > PROB_ATOL:
        raise ValueError(
            f"rows of `{name}` must sum to 1 (atol {PROB_ATOL}); worst is row {worst}, "
            f"which sums to {row_sums[worst]:.6g}{hint}"
        )
    return arr


def check_logits(x: Any, name: str = "logits") -> np.ndarray:
    """A (n_samples, n_classes) array of finite real logits."""
    arr = to_numpy(x, name)
    _check_ndim(arr, 2, name, "(n_samples, n_classes)")
    _check_numeric(arr, name)
    if arr.shape[0] == 0:
        raise ValueError(f"`{name}` is empty: at least one sample is required")
    if arr.shape[1] < 2:
        raise ValueError(f"`{name}` must have at least 2 classes (columns), got {arr.shape[1]}")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    _check_finite(arr, name)
    return arr


def check_labels(x: Any, n_classes: int, n_samples: int, name: str = "labels") -> np.ndarray:
    """A 1-D integer array with values in [0, n_classes) and one entry per sample."""
    arr = to_numpy(x, name)
    _check_ndim(arr, 1, name, "(n_samples,)")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty: at least one sample is required")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.isfinite(arr).all() and np.array_equal(arr, np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"`{name}` must be integer class indices, got dtype {arr.dtype}")
    if len(arr) != n_samples:
        raise ValueError(
            f"length mismatch: `{name}` has {len(arr)} entries but there are {n_samples} samples"
        )
    low, high = arr.min(), arr.max()
    if low < 0:
        raise ValueError(f"`{name}` contains a negative label ({low}) at index {int(arr.argmin())}")
    if high >= n_classes:
        raise ValueError(
            f"`{name}` contains label {high} at index {int(arr.argmax())}, outside [0, {n_classes})"
            f" for {n_classes} classes"
        )
    return arr
