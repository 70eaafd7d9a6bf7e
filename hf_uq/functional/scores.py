"""Per-sample uncertainty scores, higher = less trustworthy.

Written once in torch so models call them inside ``forward``; numpy arrays and lists are
accepted too (zero-copy through ``torch.from_numpy``) and get numpy arrays back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._validation import PROB_ATOL


def as_tensor(x: Any, name: str, ndim: int, shape_hint: str) -> tuple[torch.Tensor, bool]:
    """Return ``(tensor, was_torch)`` after shape and finiteness checks.

    Half precision is computed in float32. The finiteness check sums the last axis first
    (NaN/inf propagate through a sum) and only scans every entry when a sum is not finite.
    """
    was_torch = isinstance(x, torch.Tensor)
    if not was_torch:
        arr = np.asarray(x)
        if not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"`{name}` must be numeric, got dtype {arr.dtype}")
        x = torch.from_numpy(np.ascontiguousarray(arr))
    if x.ndim != ndim:
        raise ValueError(f"`{name}` must have {ndim} dimensions {shape_hint}, got shape {tuple(x.shape)}")
    if x.shape[-1] < 2:
        raise ValueError(f"`{name}` must have at least 2 classes (last dimension), got {x.shape[-1]}")
    if x.numel() == 0:
        raise ValueError(f"`{name}` is empty: at least one sample is required")
    if not torch.is_floating_point(x) or x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    check = x.detach()
    if not bool(torch.isfinite(check.sum(-1)).all()) and not bool(torch.isfinite(check).all()):
        raise ValueError(f"`{name}` contains NaN or inf")
    return x, was_torch


def check_prob_tensor(p: torch.Tensor, name: str) -> None:
    """Probabilities must be non-negative and sum to 1 along the last axis (atol 1e-4)."""
    p = p.detach()
    if float(p.min()) < 0:
        raise ValueError(f"`{name}` contains a negative probability ({float(p.min())})")
    deviation = (p.sum(-1) - 1).abs()
    if float(deviation.max()) > PROB_ATOL:
        where = np.unravel_index(int(deviation.argmax()), tuple(deviation.shape))
        row = tuple(int(i) for i in where) if len(where) > 1 else int(where[0])
        raise ValueError(
            f"rows of `{name}` must sum to 1 (atol {PROB_ATOL}); worst is row {row}, "
            f"off by {float(deviation.max()):.6g}"
        )


def _probs(x: Any, name: str = "probs") -> tuple[torch.Tensor, bool]:
    p, was_torch = as_tensor(x, name, 2, "(n_samples, n_classes)")
    check_prob_tensor(p, name)
    return p, was_torch


def _out(t: torch.Tensor, was_torch: bool) -> Any:
    return t if was_torch else t.numpy()


def entropy_of(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats along ``dim`` with 0 log 0 = 0 (no validation)."""
    return torch.special.entr(p).sum(dim)


def msp(probs: Any) -> Any:
    """1 - max probability (maximum softmax probability score), in [0, 1 - 1/C]."""
    p, was_torch = _probs(probs)
    return _out(1.0 - p.max(dim=-1).values, was_torch)


def entropy(probs: Any) -> Any:
    """Predictive entropy -sum_c p_c log p_c in nats, in [0, log C]."""
    p, was_torch = _probs(probs)
    return _out(entropy_of(p), was_torch)


def margin(probs: Any) -> Any:
    """1 - (p_top1 - p_top2), in [0, 1]: small top-2 margins are uncertain."""
    p, was_torch = _probs(probs)
    top2 = p.topk(2, dim=-1).values
    return _out(1.0 - (top2[..., 0] - top2[..., 1]), was_torch)


def max_logit(logits: Any) -> Any:
    """Negative maximum logit (Hendrycks et al. 2022), unbounded."""
    z, was_torch = as_tensor(logits, "logits", 2, "(n_samples, n_classes)")
    return _out(-z.max(dim=-1).values, was_torch)


def energy(logits: Any, temperature: float = 1.0) -> Any:
    """Energy score -T logsumexp(z / T) (Liu et al. 2020), unbounded; higher = more OOD."""
    if temperature <= 0:
        raise ValueError(f"`temperature` must be positive, got {temperature}")
    z, was_torch = as_tensor(logits, "logits", 2, "(n_samples, n_classes)")
    return _out(-temperature * torch.logsumexp(z / temperature, dim=-1), was_torch)


SCORES = {"msp": msp, "entropy": entropy, "margin": margin}
LOGIT_SCORES = {"max_logit": max_logit, "energy": energy}
