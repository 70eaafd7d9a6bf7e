"""Temperature fitting: classic temperature scaling (K = 1) and multi-member fusion (K >= 2).

``fit_temperatures(logits_list, labels)`` returns the K positive temperatures ``T_k`` that
minimize the validation NLL of ``softmax(sum_k z_k / T_k)`` (definitions in
:mod:`hf_uq.functional.temperature`; DESIGN.md §3 and §6). K = 2 is the Asymmetric Duo
fusion ``z_large / T_large + z_small / T_small``.

How the fit works
-----------------
1. **1-D search ("grid").** All members share one temperature ``T``. Starting at ``T = 1``
   the search moves downhill (the sign of the derivative says which way) by factors of 4,
   16, 256, ... in ``T`` until the derivative changes sign, then refines that bracket by cubic
   interpolation of the values and derivatives at its ends (once for K >= 2, which only needs
   a start; to convergence for K = 1, where this is the whole fit). Every evaluated point is
   a grid point. The NLL is convex in the inverse temperatures ``1/T_k``, so a denser or
   K-dimensional grid would add passes over the data, not safety.
2. **L-BFGS-B on the log-temperatures** ``u_k = log T_k`` (positive by construction) with the
   analytic gradient, inside the box ``log(bounds)``, from the best grid point.
3. The returned point is never worse than the best grid point (nor than ``T = 1`` when it is
   inside the bounds): it is the first point meeting the stopping rule if its NLL is within
   float32 round-off (1e-8 relative) of the lowest NLL seen and not above the best grid
   point, else the lowest point seen.

Bounds and degenerate data
--------------------------
Temperatures are confined to ``bounds``, default ``[1e-2, 1e2]``. On perfectly separable
data the NLL keeps falling as ``T -> 0``; the fit then stops at the lower bound (0.01), where
the projected gradient vanishes, and reports ``converged=True`` with ``at_bound`` set. A
member that only hurts (e.g. anti-correlated logits) is pushed to the upper bound, where its
weight ``1/T`` is 0.01. Constant (uninformative) logits have zero gradient and keep the
starting temperature.

Stopping rule
-------------
The fit stops at the first evaluated point whose projected gradient of the mean NLL w.r.t.
the log-temperatures is at most ``tol`` in every coordinate (default ``1e-5``: the
temperatures are then within about ``1e-5`` relative of the optimum for well-conditioned
data; the float32 gradient noise is ~1e-7). A gradient component counts as zero when its
temperature sits on a bound and the gradient pushes outwards. L-BFGS-B also stops after
``max_iter`` iterations, or when a step no longer lowers the NLL (relative change below
1e-12); the fit is then reported as not converged unless such a point was met.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize

from hf_uq.functional.temperature import TemperedNLL

__all__ = [
    "DEFAULT_TEMPERATURE_BOUNDS",
    "TemperatureFit",
    "fit_temperatures",
    "fit_temperatures_result",
]

DEFAULT_TEMPERATURE_BOUNDS: tuple[float, float] = (1e-2, 1e2)

_GRID_FACTOR = math.log(4.0)  # first step of the 1-D search, in log-temperature
_SEARCH_STEPS = 12  # at most this many interpolation steps in the 1-D search
_ROUNDOFF = 1e-8  # relative NLL differences below this are float32 round-off
_FTOL = 1e-12  # L-BFGS-B's relative-reduction stop, a backstop behind the gradient test


@dataclass(frozen=True)
class TemperatureFit:
    """Result of :func:`fit_temperatures_result`.

    Attributes:
        temperatures: the fitted ``T_k``, one per member, in member order.
        nll_before: NLL of the untempered fusion (all ``T_k = 1``; plain logits for K = 1).
        nll_init: lowest NLL among the starting points: ``T = 1`` (if inside the bounds)
            and the grid points, or ``init``.
        nll_after: NLL at ``temperatures``; ``<= nll_init`` always.
        n_iter: completed L-BFGS-B iterations (0 when the 1-D search already converged).
        n_evals: loss-and-gradient evaluations in total (each one pass over the logits).
        converged: a point with projected gradient (w.r.t. ``log T``) at most ``tol`` in
            every coordinate was reached, and the returned NLL is no higher than there.
        at_bound: per member, whether ``T_k`` sits on a bound.
        message: the optimizer's message.
    """

    temperatures: tuple[float, ...]
    nll_before: float
    nll_init: float
    nll_after: float
    n_iter: int
    n_evals: int
    converged: bool
    at_bound: tuple[bool, ...]
    message: str


class _Converged(Exception):
    """Raised by the objective at the first point meeting the gradient tolerance."""


class _Objective:
    """Loss and gradient in log-temperatures, memoized, recording every point in the box.

    Stops the search (raises ``_Converged``) at the first in-box point whose projected
    gradient is at most ``tol`` in every coordinate.
    """

    def __init__(self, evaluator: TemperedNLL, u_lo: float, u_hi: float, tol: float) -> None:
        self.evaluator, self.u_lo, self.u_hi, self.tol = evaluator, u_lo, u_hi, tol
        self.cache: dict[bytes, tuple[float, np.ndarray]] = {}
        self.points: list[tuple[np.ndarray, float, float]] = []  # (u, f, |projected grad|)
        self.converged_at: int | None = None

    def __call__(self, u: Any) -> tuple[float, np.ndarray]:
        u = np.array(u, dtype=np.float64)
        key = u.tobytes()
        if key not in self.cache:
            f, g = self.evaluator(u)
            if not (math.isfinite(f) and np.isfinite(g).all()):
                raise FloatingPointError(
                    f"the NLL is not finite at temperatures {np.exp(u).tolist()}; the logits "
                    "may be too large for float32 at these temperatures"
                )
            self.cache[key] = (f, g)
            if np.all((u >= self.u_lo) & (u <= self.u_hi)):
                pg = _projected_gradient(u, g, self.u_lo, self.u_hi)
                self.points.append((u, f, float(np.abs(pg).max())))
                if self.points[-1][2] <= self.tol and self.converged_at is None:
                    self.converged_at = len(self.points) - 1
                    raise _Converged
        f, g = self.cache[key]
        return f, g.copy()

    def result(self, f_start: float) -> tuple[np.ndarray, float, bool]:
        """(u, NLL, converged) to return: the converged point when its NLL is within float32
        round-off of the lowest one seen and not above ``f_start``; else the lowest point."""
        low = min(range(len(self.points)), key=lambda i: self.points[i][1])
        if self.converged_at is None:
            return self.points[low][0], self.points[low][1], False
        f_conv, f_low = self.points[self.converged_at][1], self.points[low][1]
        if f_conv <= min(f_low + _ROUNDOFF * max(1.0, abs(f_low)), f_start):
            low = self.converged_at
        return self.points[low][0], self.points[low][1], True


def _check_options(
    init: Any, bounds: Any, max_iter: Any, tol: Any, n_members: int
) -> tuple[np.ndarray | str, float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"`bounds` must be a pair (low, high), got {bounds!r}") from None
    if not (0 < lo < hi < math.inf):
        raise ValueError(f"`bounds` must satisfy 0 < low < high < inf, got ({lo}, {hi})")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"`max_iter` must be a positive integer, got {max_iter!r}")
    if not (isinstance(tol, (int, float, np.floating)) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"`tol` must be a positive number, got {tol!r}")
    if isinstance(init, str):
        if init not in ("grid", "ones"):
            raise ValueError(
                f"`init` must be 'grid', 'ones' or {n_members} positive temperatures, got {init!r}"
            )
        return init, lo, hi
    if not isinstance(init, (Sequence, np.ndarray)) and not hasattr(init, "tolist"):
        raise ValueError(
            f"`init` must be 'grid', 'ones' or a sequence of temperatures, got {init!r}"
        )
    start = np.asarray(init.tolist() if hasattr(init, "tolist") else init, dtype=np.float64)
    start = start.reshape(-1)
    if start.size != n_members or not (np.isfinite(start).all() and (start > 0).all()):
        raise ValueError(
            f"`init` must hold {n_members} finite positive temperatures, got {start.tolist()}"
        )
    return np.clip(start, lo, hi), lo, hi


def _cubic_step(a: float, fa: float, da: float, b: float, fb: float, db: float) -> float:
    """Minimizer of the cubic matching values and derivatives at a and b (da < 0 < db when
    a < b), kept strictly inside the interval."""
    d1 = da + db - 3.0 * (fa - fb) / (a - b)
    d2 = math.copysign(math.sqrt(max(d1 * d1 - da * db, 0.0)), b - a)
    denom = db - da + 2.0 * d2
    x = b - (b - a) * (db + d2 - d1) / denom if denom != 0.0 else 0.5 * (a + b)
    lo, hi = min(a, b), max(a, b)
    margin = 1e-3 * (hi - lo)
    return min(max(x, lo + margin), hi - margin)


def _common_search(objective: _Objective, n_members: int, u_lo: float, u_hi: float) -> None:
    """Minimize the NLL over one log-temperature shared by all members (module docstring).

    The directional derivative ``d(u) = sum_k dL/du_k`` at ``u_k = u`` is negative below the
    best shared log-temperature and positive above it (convexity in ``1/T``), so once a sign
    change is bracketed, cubic interpolation of values and derivatives closes in on it.
    """

    def point(u: float) -> tuple[float, float, float]:
        f, g = objective(np.full(n_members, u))
        return u, f, float(g.sum())

    a = point(min(max(0.0, u_lo), u_hi))
    if a[2] == 0.0:
        return
    step = _GRID_FACTOR if a[2] < 0 else -_GRID_FACTOR
    while True:  # bracket the sign change, doubling the step each time
        u = min(max(a[0] + step, u_lo), u_hi)
        if u == a[0]:
            return  # the best shared temperature is on a bound
        b = point(u)
        if b[2] == 0.0:
            return
        if (b[2] > 0) != (a[2] > 0):
            break
        a, step = b, 2.0 * step
    left, right = (a, b) if a[0] < b[0] else (b, a)
    # K = 1: this is the whole fit (the objective stops it at the tolerance); K >= 2: one
    # interpolation gives L-BFGS-B a start, more would spend passes on the wrong problem
    for _ in range(_SEARCH_STEPS if n_members == 1 else 1):
        x = point(_cubic_step(*left, *right))
        if x[2] == 0.0:
            break
        if x[2] < 0:
            left = x
        else:
            right = x


def _projected_gradient(u: np.ndarray, g: np.ndarray, u_lo: float, u_hi: float) -> np.ndarray:
    pg = g.copy()
    pg[(u <= u_lo) & (g > 0)] = 0.0
    pg[(u >= u_hi) & (g < 0)] = 0.0
    return pg


def fit_temperatures_result(
    logits_list: Any,
    labels: Any,
    *,
    init: str | Sequence[float] = "grid",
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
    max_iter: int = 100,
    tol: float = 1e-5,
    num_threads: int | None = None,
) -> TemperatureFit:
    """Fit K temperatures by minimizing the NLL of ``softmax(sum_k z_k / T_k)``.

    Args:
        logits_list: K >= 1 members' validation logits, each (N, C) (numpy, torch or lists;
            float32 is used as is), or one stacked (K, N, C) array; a single (N, C)
            array/tensor means K = 1 (classic temperature scaling).
        labels: (N,) integer labels in [0, C).
        init: ``"grid"`` (1-D search over a shared temperature, then L-BFGS-B),
            ``"ones"`` (start L-BFGS-B at ``T_k = 1``) or K positive starting temperatures.
        bounds: ``(low, high)`` limits for every temperature, default ``(0.01, 100)``.
        max_iter: the most L-BFGS-B iterations.
        tol: convergence tolerance on the projected gradient w.r.t. ``log T``.
        num_threads: threads for the loss evaluation (default ``torch.get_num_threads()``);
            the result does not depend on it.

    Returns:
        A :class:`TemperatureFit`. Deterministic: identical inputs give identical results.

    Raises:
        ValueError: for malformed logits or labels (naming the problem) or bad options.
    """
    evaluator = TemperedNLL(logits_list, labels, num_threads=num_threads)
    k = evaluator.n_members
    start, lo, hi = _check_options(init, bounds, max_iter, tol, k)
    u_lo, u_hi = math.log(lo), math.log(hi)
    objective = _Objective(evaluator, u_lo, u_hi, float(tol))
    ones = np.zeros(k)
    n_start = 0
    try:
        objective(ones)
        if isinstance(start, str):
            if start == "grid":
                _common_search(objective, k, u_lo, u_hi)
                u0 = min(objective.points, key=lambda p: p[1])[0]
            else:
                u0 = np.clip(ones, u_lo, u_hi)
        else:
            u0 = np.log(start)
        objective(u0)
        n_start = len(objective.points)
        n_iter, message = _lbfgsb(objective, u0, int(max_iter))
    except _Converged:
        n_iter, message = 0, f"projected gradient <= tol ({tol:g})"
    nll_before = objective.cache[ones.tobytes()][0]
    if not n_start:  # converged during the start phase: the earlier points were the grid
        n_start = max(objective.converged_at or 0, 1)
    nll_init = min(p[1] for p in objective.points[:n_start])
    u_best, nll_after, converged = objective.result(nll_init)
    temps = np.where(u_best <= u_lo, lo, np.where(u_best >= u_hi, hi, np.exp(u_best)))
    return TemperatureFit(
        temperatures=tuple(float(t) for t in temps),
        nll_before=float(nll_before),
        nll_init=float(nll_init),
        nll_after=float(nll_after),
        n_iter=n_iter,
        n_evals=int(evaluator.n_evals),
        converged=bool(converged),
        at_bound=tuple(bool(u <= u_lo or u >= u_hi) for u in u_best),
        message=message,
    )


def _lbfgsb(objective: _Objective, u0: np.ndarray, max_iter: int) -> tuple[int, str]:
    """L-BFGS-B on log-temperatures from u0; returns (iterations, message)."""
    n_iter = 0

    def count(intermediate_result: Any) -> None:
        nonlocal n_iter
        n_iter += 1

    try:
        result = minimize(
            objective,
            u0,
            jac=True,
            method="L-BFGS-B",
            bounds=[(objective.u_lo, objective.u_hi)] * len(u0),
            callback=count,
            options={"maxiter": max_iter, "gtol": objective.tol, "ftol": _FTOL},
        )
    except _Converged:
        return n_iter, f"projected gradient <= tol ({objective.tol:g})"
    return n_iter, str(result.message)


def fit_temperatures(
    logits_list: Any,
    labels: Any,
    *,
    init: str | Sequence[float] = "grid",
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
    max_iter: int = 100,
    tol: float = 1e-5,
    num_threads: int | None = None,
) -> list[float]:
    """The K temperatures minimizing the NLL of ``softmax(sum_k z_k / T_k)`` on validation data.

    ``fit_temperatures([logits], labels)`` is classic temperature scaling;
    ``fit_temperatures([z_large, z_small], labels)`` fits the Asymmetric Duo fusion. See
    :func:`fit_temperatures_result` for the arguments and the full result (NLL before/after,
    iterations, convergence). Warns (``RuntimeWarning``) when the fit has not converged.
    """
    fit = fit_temperatures_result(
        logits_list,
        labels,
        init=init,
        bounds=bounds,
        max_iter=max_iter,
        tol=tol,
        num_threads=num_threads,
    )
    if not fit.converged:
        warnings.warn(
            f"temperature fit did not converge ({fit.message}); returning the best point found "
            f"(NLL {fit.nll_after:.6g})",
            RuntimeWarning,
            stacklevel=2,
        )
    _warn_if_degenerate(logits_list, labels, fit, bounds, stacklevel=3)
    return list(fit.temperatures)


MIN_CALIBRATION_ERRORS = 5
"""Below this many misclassified calibration samples the NLL optimum sharpens without limit."""


def _warn_if_degenerate(
    logits_list: Any, labels: Any, fit: TemperatureFit, bounds: tuple[float, float], stacklevel: int
) -> None:
    """Warn when the calibration set has (almost) no errors: the NLL then keeps falling as every
    temperature shrinks, so the fit sharpens the logits toward its lower bound and says nothing
    about how the model behaves on data it gets wrong."""
    members = [np.asarray(m.detach().cpu() if isinstance(m, torch.Tensor) else m) for m in (
        list(logits_list.unbind(0)) if isinstance(logits_list, torch.Tensor) and logits_list.ndim == 3
        else [logits_list] if np.ndim(logits_list) == 2 else list(logits_list)
    )]
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    errors = int(np.sum(np.argmax(sum(m.astype(np.float64) for m in members), axis=1) != y))
    if errors < MIN_CALIBRATION_ERRORS:
        advice = (" or bounds=(1.0, 100.0) to forbid sharpening" if bounds[0] < 1.0
                  else f" (bounds={tuple(bounds)} already forbid sharpening)")
        warnings.warn(
            f"the calibration data has only {errors} misclassified sample(s) of {len(y)}: its NLL "
            f"keeps falling as the temperatures shrink, so the fitted {fit.temperatures} say little "
            f"about how the model behaves when it is wrong. Use a larger or harder calibration split{advice}.",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
