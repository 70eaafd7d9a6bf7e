"""Temperature-scaled fusion of member logits, its NLL and the NLL's gradient.

Definitions (DESIGN.md §3, "Duo uncertainty"; §6 "Temperature fitting"):

* K >= 1 members give logits ``z_k`` of shape (N, C) for the same N samples.
* With positive temperatures ``T_k`` the **fused logits** are ``s = sum_k z_k / T_k``.
  K = 1 is classic temperature scaling, K = 2 the Asymmetric Duo fusion
  ``z_large / T_large + z_small / T_small``.
* The **tempered NLL** is ``L(T) = (1/N) sum_i [logsumexp_c s_ic - s_{i,y_i}]``, the mean
  negative log-likelihood of softmax(s) at the labels.
* Its gradient is taken w.r.t. the **log-temperatures** ``u_k = log T_k`` (positive
  temperatures by construction). With ``beta_k = 1/T_k`` and ``p = softmax(s)``:
  ``dL/dbeta_k = (1/N) sum_i (E_p[z_k]_i - z_{k,i,y_i})`` and ``dL/du_k = -beta_k dL/dbeta_k``.

``L`` is convex in the inverse temperatures ``beta`` (a log-sum-exp of a linear function of
beta minus a linear term), so on a box of temperatures it has no spurious local minima.

Nothing here imports transformers or any other part of hf_uq.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

__all__ = ["TemperedNLL", "fuse_logits", "tempered_nll", "tempered_nll_grad"]

# Rows whose sum of exponentials falls below this after the shared per-chunk shift are
# recomputed with their own row maximum (float32 keeps ~7 digits for terms down to ~1e-38).
_UNDERFLOW = 1e-20
# Elements per work chunk: two float32 buffers of this size stay in a core's L2 cache.
_CHUNK_ELEMENTS = 1 << 18
# Below this many logits (all members together) threads cost more than they save.
_MIN_PARALLEL_ELEMENTS = 1 << 21


# --------------------------------------------------------------------------- validation
def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.is_floating_point() and x.dtype != torch.float64:
            x = x.float()
        return x.cpu().resolve_conj().resolve_neg().numpy()
    try:
        arr = np.asarray(x)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"`{name}` could not be converted to an array: {err}") from None
    if arr.dtype == object:
        raise ValueError(f"`{name}` must be numeric, got ragged or non-numeric values")
    return arr


def _split_members(logits_list: Any) -> list[Any]:
    """A list of member arrays from a sequence of members or a stacked (K, ..., C) array."""
    if isinstance(logits_list, (torch.Tensor, np.ndarray)):
        if logits_list.ndim == 2:  # one member's (N, C) logits: classic temperature scaling
            return [logits_list]
        if logits_list.ndim < 2:
            raise ValueError(
                "`logits_list` must be a sequence of (n_samples, n_classes) member logits or a "
                f"stacked (n_members, n_samples, n_classes) array, got shape {tuple(logits_list.shape)}"
            )
        return list(logits_list)
    if isinstance(logits_list, (str, bytes)) or not isinstance(logits_list, Sequence):
        raise ValueError(
            "`logits_list` must be a sequence of member logits (lists, numpy arrays or torch "
            f"tensors), got {type(logits_list).__name__}"
        )
    return list(logits_list)


def check_member_logits(logits_list: Any) -> list[np.ndarray]:
    """Validate member logits; return them as C-contiguous float32 numpy arrays.

    Each member must be a 2-D (n_samples, n_classes) array of finite real numbers, all members
    of the same shape, with at least one sample and two classes. Float32 inputs (numpy or CPU
    torch) are used without a copy; other dtypes are converted to float32.
    """
    return _validated_members(logits_list)[0]


def _validated_members(logits_list: Any) -> tuple[list[np.ndarray], np.ndarray, float]:
    """(float32 members, (K, N) float64 row maxima, largest |logit|) after validation."""
    members = _split_members(logits_list)
    if not members:
        raise ValueError("`logits_list` is empty: at least one member's logits are required")
    out: list[np.ndarray] = []
    row_max, max_abs = [], 0.0
    for k, member in enumerate(members):
        name = f"logits_list[{k}]"
        arr = _to_numpy(member, name)
        if arr.ndim != 2:
            hint = " (to fit one member, pass [logits])" if arr.ndim == 1 else ""
            raise ValueError(
                f"`{name}` must be 2-D (n_samples, n_classes), got shape {tuple(arr.shape)}{hint}"
            )
        if arr.dtype.kind not in "iuf":
            raise ValueError(f"`{name}` must be real numbers, got dtype {arr.dtype}")
        if out and arr.shape != out[0].shape:
            raise ValueError(
                f"all members must have the same shape: `logits_list[0]` has shape "
                f"{out[0].shape} but `{name}` has shape {arr.shape}"
            )
        if arr.shape[0] == 0:
            raise ValueError(f"`{name}` is empty: at least one sample is required")
        if arr.shape[1] < 2:
            raise ValueError(f"`{name}` must have at least 2 classes (columns), got {arr.shape[1]}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        highs, lows = arr.max(axis=1), arr.min(axis=1)  # NaN propagates; +-inf shows up here
        if not (np.isfinite(highs).all() and np.isfinite(lows).all()):
            flat = int(np.flatnonzero(~np.isfinite(arr.reshape(-1)))[0])
            row, col = divmod(flat, arr.shape[1])
            raise ValueError(
                f"`{name}` contains a non-finite value ({arr[row, col]}) at index ({row}, {col})"
            )
        out.append(arr)
        row_max.append(highs.astype(np.float64))
        max_abs = max(max_abs, float(highs.max()), -float(lows.min()))
    return out, np.stack(row_max), max_abs


def check_class_labels(labels: Any, n_samples: int, n_classes: int) -> np.ndarray:
    """Validate labels: 1-D integers in [0, n_classes), one per sample; returned as int64."""
    arr = _to_numpy(labels, "labels")
    if arr.ndim != 1:
        raise ValueError(f"`labels` must be 1-D (n_samples,), got shape {tuple(arr.shape)}")
    if arr.size == 0:
        raise ValueError("`labels` is empty: at least one sample is required")
    if arr.dtype.kind not in "iu":
        integral = arr.dtype.kind == "f" and np.isfinite(arr).all() and (arr == np.round(arr)).all()
        if not integral:
            raise ValueError(f"`labels` must be integer class indices, got dtype {arr.dtype}")
    if len(arr) != n_samples:
        raise ValueError(
            f"length mismatch: `labels` has {len(arr)} entries but the logits have "
            f"{n_samples} samples"
        )
    arr = arr.astype(np.int64, copy=False)
    bad = np.flatnonzero((arr < 0) | (arr >= n_classes))
    if bad.size:
        raise ValueError(
            f"`labels` contains label {arr[bad[0]]} at index {int(bad[0])}, outside "
            f"[0, {n_classes}) for {n_classes} classes"
        )
    return arr


def _temperature_floats(temperatures: Any, n_members: int) -> list[float]:
    """One positive, finite temperature per member, as Python floats. A list or tuple of Python numbers (a model
    config's temperatures) is read without numpy, so that a forward calling this traces under torch.compile."""
    if isinstance(temperatures, (list, tuple)) and all(
        isinstance(t, (int, float)) and not isinstance(t, bool) for t in temperatures
    ):
        values = [float(t) for t in temperatures]
    else:
        values = np.asarray(_to_numpy(temperatures, "temperatures"), dtype=np.float64).reshape(-1).tolist()
    if len(values) != n_members:
        raise ValueError(
            f"`temperatures` must have one value per member ({n_members}), got {len(values)}"
        )
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"`temperatures` must be finite and positive, got {values}")
    return values


def _check_temperatures(temperatures: Any, n_members: int) -> np.ndarray:
    return np.asarray(_temperature_floats(temperatures, n_members), dtype=np.float64)


# --------------------------------------------------------------------------- fusion
def fuse_logits(logits_list: Any, temperatures: Any) -> Any:
    """Fused logits ``sum_k z_k / T_k`` of K members (any leading shape, classes last).

    ``logits_list`` is a sequence of K same-shaped arrays/tensors or one stacked (K, ..., C)
    array/tensor; ``temperatures`` holds K positive values (sequence, numpy array or tensor).
    When any input is a torch tensor the result is a tensor on the members' device and dtype,
    differentiable w.r.t. the logits and a tensor of temperatures (positivity of a tensor of
    temperatures is checked on CPU only, to avoid a device sync inside a forward pass).
    Otherwise the result is a numpy array in the members' floating dtype.
    """
    if isinstance(logits_list, (torch.Tensor, np.ndarray)):
        if logits_list.ndim < 1:
            raise ValueError("`logits_list` must hold at least one member")
        members = list(
            logits_list.unbind(0) if isinstance(logits_list, torch.Tensor) else logits_list
        )
    else:
        members = list(logits_list)
    if not members:
        raise ValueError("`logits_list` is empty: at least one member's logits are required")
    use_torch = isinstance(temperatures, torch.Tensor) or any(
        isinstance(m, torch.Tensor) for m in members
    )
    if not use_torch:
        arrays = [np.asarray(m) for m in members]
        temps = _check_temperatures(temperatures, len(arrays))
        for k, arr in enumerate(arrays[1:], start=1):
            if arr.shape != arrays[0].shape:
                raise ValueError(
                    f"all members must have the same shape: member 0 has {arrays[0].shape}, "
                    f"member {k} has {arr.shape}"
                )
        dtype = np.result_type(*arrays, np.float32)
        fused = arrays[0] / dtype.type(temps[0])
        for arr, temp in zip(arrays[1:], temps[1:], strict=True):
            fused = fused + arr / dtype.type(temp)
        return fused.astype(dtype, copy=False)

    ref = next((m for m in members if isinstance(m, torch.Tensor)), None)
    device = ref.device if ref is not None else temperatures.device
    tensors = [torch.as_tensor(m, device=device) for m in members]
    dtype = tensors[0].dtype if tensors[0].is_floating_point() else torch.get_default_dtype()
    for k, t in enumerate(tensors[1:], start=1):
        if t.shape != tensors[0].shape:
            raise ValueError(
                f"all members must have the same shape: member 0 has {tuple(tensors[0].shape)}, "
                f"member {k} has {tuple(t.shape)}"
            )
    if isinstance(temperatures, torch.Tensor):
        temps = temperatures.to(device=device, dtype=dtype).reshape(-1)
        if temps.numel() != len(tensors):
            raise ValueError(
                f"`temperatures` must have one value per member ({len(tensors)}), "
                f"got {temps.numel()}"
            )
        if temps.device.type == "cpu" and not bool((temps > 0).all()):
            raise ValueError(f"`temperatures` must be positive, got {temps.tolist()}")
    else:  # Python floats: no numpy inside a forward, so that torch.compile can trace it
        temps = _temperature_floats(temperatures, len(tensors))
    fused = tensors[0].to(dtype) / temps[0]
    for k in range(1, len(tensors)):
        fused = fused + tensors[k].to(dtype) / temps[k]
    return fused


# --------------------------------------------------------------------------- evaluator
def _aligned_empty(shape: tuple[int, int]) -> np.ndarray:
    """A float32 buffer whose start is 64-byte aligned, so that row-wise reductions round
    identically whichever worker's buffer a chunk lands in (runs are bit-reproducible)."""
    n = shape[0] * shape[1]
    raw = np.empty(n + 16, dtype=np.float32)
    start = (-raw.ctypes.data % 64) // 4
    return raw[start : start + n].reshape(shape)


class TemperedNLL:
    """Reusable evaluator of the tempered NLL and its gradient w.r.t. log-temperatures.

    Validates and prepares the data once (float32 logits without copying when possible, the
    label logits ``z_k[i, y_i]`` and row maxima in float64), then each call
    ``evaluator(log_temperatures) -> (nll, grad)`` makes one pass over the logits in
    cache-sized row chunks with reused buffers: elementwise work in float32, per-row sums in
    float32 (BLAS dot products), everything summed over samples in float64. Chunks are handed
    out to ``num_threads`` threads (numpy releases the GIL; default: ``torch.get_num_threads()``
    for large data, 1 below ~2M logits); per-row results land in fixed slots and are reduced
    once, so results are bit-identical across runs and thread counts.

    Numerical stability: a chunk whose fused logits could come near float32 overflow is
    shifted by its largest row upper bound ``sum_k beta_k max_c z_k[i, c]`` (otherwise no
    shift is needed, saving a pass); rows whose sum of exponentials underflows below 1e-20
    are recomputed with their own row maximum.
    """

    def __init__(
        self,
        logits_list: Any,
        labels: Any,
        *,
        num_threads: int | None = None,
        chunk_rows: int | None = None,
    ) -> None:
        self.members, self._row_max, max_abs = _validated_members(logits_list)
        n, c = self.members[0].shape
        self.labels = check_class_labels(labels, n, c)
        self.n_samples, self.n_classes, self.n_members = n, c, len(self.members)
        rows = np.arange(n)
        self._label_logits = np.stack([z[rows, self.labels] for z in self.members]).astype(
            np.float64
        )  # (K, N)
        # a chunk needs no shift when even its largest fused logit c keeps C * e^c * max|z|
        # (the sums of exponentials and of their products with logits) far from float32 overflow
        self._no_shift_below = 80.0 - math.log(c) - math.log(max(1.0, max_abs))
        self.chunk_rows = int(chunk_rows or max(1, min(n, _CHUNK_ELEMENTS // c)))
        self._n_chunks = -(-n // self.chunk_rows)
        if num_threads is None:  # automatic: torch's intra-op thread count, 1 for small data
            num_threads = torch.get_num_threads() or os.cpu_count() or 1
            if n * c * self.n_members < _MIN_PARALLEL_ELEMENTS:
                num_threads = 1
        self.num_threads = max(1, min(int(num_threads), self._n_chunks))
        self._ones = np.ones(c, dtype=np.float32)
        self._buffers = [
            (_aligned_empty((self.chunk_rows, c)), _aligned_empty((self.chunk_rows, c)))
            for _ in range(self.num_threads)
        ]
        # per-row results of one evaluation (float32 sums from the chunks, reduced in float64)
        self._bound = np.empty(n, dtype=np.float64)
        self._shift = np.empty(n, dtype=np.float32)
        self._sum_exp = np.empty(n, dtype=np.float32)
        self._dots = np.empty((self.n_members, n), dtype=np.float32)
        self.n_evals = 0

    # ---- one chunk: per-row sums of exponentials and of exponential-weighted member logits
    def _chunk(self, index: int, worker: int, beta32: np.ndarray) -> None:
        r0 = index * self.chunk_rows
        r1 = min(r0 + self.chunk_rows, self.n_samples)
        buf_s, buf_t = self._buffers[worker]
        s, t = buf_s[: r1 - r0], buf_t[: r1 - r0]
        zs = [z[r0:r1] for z in self.members]
        np.multiply(zs[0], beta32[0], out=s)
        for k in range(1, self.n_members):
            np.multiply(zs[k], beta32[k], out=t)
            np.add(s, t, out=s)
        shift = self._shift[r0:r1]
        top = self._bound[r0:r1].max()
        if top > self._no_shift_below:
            shift.fill(top)  # float32 value: the shift actually applied
            np.subtract(s, shift[0], out=s)
        else:
            shift.fill(0.0)
        np.exp(s, out=s)  # s now holds exp(s_ic - shift)
        sum_exp = self._sum_exp[r0:r1]
        np.vecdot(s, self._ones, out=sum_exp)
        for k, z in enumerate(zs):
            np.vecdot(s, z, out=self._dots[k, r0:r1])
        if sum_exp.min() < _UNDERFLOW:  # recompute these rows with their own maximum
            small = np.flatnonzero(sum_exp < _UNDERFLOW)
            sub = zs[0][small] * beta32[0]
            for k in range(1, self.n_members):
                sub += zs[k][small] * beta32[k]
            m = sub.max(axis=1, keepdims=True)
            e = np.exp(sub - m)
            sum_exp[small] = np.vecdot(e, self._ones)
            for k, z in enumerate(zs):
                self._dots[k, r0 + small] = np.vecdot(e, z[small])
            shift[small] = m[:, 0]

    def _run(self, beta32: np.ndarray) -> np.ndarray:
        """Mean loss and mean of E_p[z_k] - z_k[y] (k = 1..K), in float64."""
        # an upper bound of every fused row maximum, so exp(s - shift) cannot overflow
        np.matmul(beta32.astype(np.float64), self._row_max, out=self._bound)
        if self.num_threads == 1:
            for index in range(self._n_chunks):
                self._chunk(index, 0, beta32)
        else:
            lock = threading.Lock()
            next_index = [0]

            def work(worker: int) -> None:
                while True:
                    with lock:
                        index = next_index[0]
                        next_index[0] += 1
                    if index >= self._n_chunks:
                        return
                    self._chunk(index, worker, beta32)

            with ThreadPoolExecutor(self.num_threads) as pool:
                for future in [pool.submit(work, w) for w in range(self.num_threads)]:
                    future.result()
        self.n_evals += 1
        sum_exp = self._sum_exp.astype(np.float64)
        fused_label = beta32.astype(np.float64) @ self._label_logits
        totals = np.empty(1 + self.n_members)
        totals[0] = np.sum(np.log(sum_exp) + self._shift - fused_label)
        totals[1:] = np.sum(self._dots / sum_exp - self._label_logits, axis=1)
        return totals / self.n_samples

    def __call__(self, log_temperatures: Any) -> tuple[float, np.ndarray]:
        """NLL and its gradient w.r.t. the log-temperatures, both in float64."""
        u = np.asarray(log_temperatures, dtype=np.float64).reshape(-1)
        if u.size != self.n_members or not np.isfinite(u).all():
            raise ValueError(f"expected {self.n_members} finite log-temperatures, got {u.tolist()}")
        beta32 = np.exp(-u).astype(np.float32)
        totals = self._run(beta32)
        # chain rule through beta_k = exp(-u_k), with the float32 beta actually used
        grad = -beta32.astype(np.float64) * totals[1:]
        return float(totals[0]), grad

    def nll(self, temperatures: Any) -> float:
        """The tempered NLL at the given (positive) temperatures."""
        temps = _check_temperatures(temperatures, self.n_members)
        return self(np.log(temps))[0]


def tempered_nll(logits_list: Any, labels: Any, temperatures: Any) -> float:
    """Mean NLL of ``softmax(sum_k z_k / T_k)`` at ``labels`` (natural log)."""
    return TemperedNLL(logits_list, labels).nll(temperatures)


def tempered_nll_grad(logits_list: Any, labels: Any, temperatures: Any) -> tuple[float, np.ndarray]:
    """The tempered NLL and its gradient w.r.t. ``log T_k`` (shape (K,), float64)."""
    evaluator = TemperedNLL(logits_list, labels)
    temps = _check_temperatures(temperatures, evaluator.n_members)
    return evaluator(np.log(temps))
