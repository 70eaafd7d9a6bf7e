"""Temperature fitting: gradient checks, recovery of known temperatures, guarantees, errors."""

import warnings

import numpy as np
import pytest
import torch

from hf_uq import functional as F
from hf_uq.calibration import (
    DEFAULT_TEMPERATURE_BOUNDS,
    fit_temperatures,
    fit_temperatures_result,
)
from hf_uq.functional.temperature import (
    TemperedNLL,
    fuse_logits,
    tempered_nll,
    tempered_nll_grad,
)


def _members(n, c, k, seed, scale=2.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, c)) * scale).astype(np.float32) for _ in range(k)]


def _tempered_data(n, c, temps, seed, signal=3.0):
    """Members with a shared noise part and labels drawn from softmax(sum_k z_k / T_k)."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, c, n)
    shared = rng.standard_normal((n, c))
    members = []
    for k in range(len(temps)):
        z = 0.6 * shared + 0.8 * rng.standard_normal((n, c))
        z[np.arange(n), true] += signal * (1.0 - 0.3 * k)
        members.append((1.5 * z).astype(np.float32))
    fused = sum(z.astype(np.float64) / t for z, t in zip(members, temps, strict=True))
    labels = np.argmax(fused + rng.gumbel(size=fused.shape), axis=1)
    return members, labels


def _torch_nll_and_grad(members, labels, log_temps):
    """Float64 autograd reference of the NLL and its gradient w.r.t. log-temperatures."""
    u = torch.tensor(log_temps, dtype=torch.float64, requires_grad=True)
    fused = sum(torch.from_numpy(z).double() * torch.exp(-u[k]) for k, z in enumerate(members))
    loss = torch.nn.functional.cross_entropy(fused, torch.from_numpy(np.asarray(labels)))
    loss.backward()
    return loss.item(), u.grad.numpy()


# --------------------------------------------------------------------------- the math
@pytest.mark.parametrize("k", [1, 2, 3])
def test_gradient_matches_autograd_and_finite_differences(k):
    members = _members(600, 7, k, seed=k)
    labels = np.random.default_rng(10 + k).integers(0, 7, 600)
    evaluator = TemperedNLL(members, labels)
    rng = np.random.default_rng(k)
    for _ in range(3):
        u = rng.uniform(-1.5, 1.5, k)
        f, g = evaluator(u)
        f_ref, g_ref = _torch_nll_and_grad(members, labels, u)
        assert f == pytest.approx(f_ref, rel=1e-6)
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-7)
        h = 1e-3
        for j in range(k):
            e = np.zeros(k)
            e[j] = h
            fd = (evaluator(u + e)[0] - evaluator(u - e)[0]) / (2 * h)
            assert fd == pytest.approx(g[j], rel=1e-3, abs=1e-5)


def test_chunks_threads_and_underflow_fallback_agree_with_autograd():
    # rows whose maxima differ by thousands force the per-row fallback after the chunk shift
    members = _members(500, 12, 2, seed=3)
    members[0] *= np.repeat(np.float32([1.0, 300.0]), 250)[:, None]
    labels = np.random.default_rng(4).integers(0, 12, 500)
    u = np.log([0.5, 2.0])
    f_ref, g_ref = _torch_nll_and_grad(members, labels, u)
    results = []
    for threads, rows in [(1, None), (1, 7), (2, 7), (3, 50)]:
        f, g = TemperedNLL(members, labels, num_threads=threads, chunk_rows=rows)(u)
        assert f == pytest.approx(f_ref, rel=1e-6)
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6)
        if rows == 7:
            results.append((f, g.tolist()))
    assert results[0] == results[1]  # bit-identical with 1 and 2 threads


def test_tempered_nll_matches_the_metric_nll_of_fused_logits():
    members = _members(300, 5, 2, seed=7)
    labels = np.random.default_rng(8).integers(0, 5, 300)
    temps = [1.7, 0.6]
    fused = fuse_logits(members, temps)
    assert fused.dtype == np.float32
    expected = F.nll(fused.astype(np.float64), labels, from_logits=True)
    assert tempered_nll(members, labels, temps) == pytest.approx(expected, rel=1e-6)
    f, g = tempered_nll_grad(members, labels, temps)
    assert f == pytest.approx(expected, rel=1e-6)
    assert g.shape == (2,)


def test_fuse_logits_torch_and_numpy():
    z1, z2 = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    temps = torch.tensor([2.0, 0.5], dtype=torch.float64, requires_grad=True)
    fused = fuse_logits([z1, z2], temps)
    torch.testing.assert_close(fused, z1 / 2.0 + z2 / 0.5)
    fused.sum().backward()  # differentiable w.r.t. the temperatures
    torch.testing.assert_close(temps.grad, -torch.stack([z1.sum() / 4.0, z2.sum() / 0.25]))
    stacked = fuse_logits(torch.stack([z1, z2]), [2.0, 0.5])
    torch.testing.assert_close(stacked, z1 / 2.0 + z2 / 0.5)
    np.testing.assert_allclose(fuse_logits([z1.numpy()], [4.0]), z1.numpy() / 4.0)
    with pytest.raises(ValueError, match="positive"):
        fuse_logits([z1, z2], [1.0, 0.0])
    with pytest.raises(ValueError, match="positive"):
        fuse_logits([z1, z2], torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="one value per member"):
        fuse_logits([z1, z2], [1.0])
    with pytest.raises(ValueError, match="same shape"):
        fuse_logits([z1, z2[:2]], [1.0, 1.0])


# --------------------------------------------------------------------------- the fit
@pytest.mark.parametrize("temps", [(1.6,), (1.5, 2.5), (2.5, 1.2)])
def test_recovers_known_temperatures(temps):
    members, labels = _tempered_data(20_000, 10, temps, seed=len(temps))
    fit = fit_temperatures_result(members, labels)
    assert fit.converged
    np.testing.assert_allclose(fit.temperatures, temps, rtol=0.05)
    assert fit.nll_after <= fit.nll_init <= fit.nll_before


def test_never_worse_than_any_grid_point_and_deterministic():
    members, labels = _tempered_data(2_000, 10, (1.2, 3.0), seed=11)
    fit = fit_temperatures_result(members, labels)
    assert fit.nll_after <= fit.nll_init <= fit.nll_before
    evaluator = TemperedNLL(members, labels)
    grid = np.geomspace(0.1, 10.0, 15)
    best_grid = min(evaluator.nll([a, b]) for a in grid for b in grid)
    assert fit.nll_after <= best_grid
    assert evaluator.nll(fit.temperatures) == fit.nll_after
    again = fit_temperatures_result(members, labels)
    assert again == fit  # bit-identical, every field
    one_thread = fit_temperatures_result(members, labels, num_threads=1)
    assert one_thread.temperatures == fit.temperatures
    assert fit_temperatures(members, labels) == list(fit.temperatures)


@pytest.mark.parametrize("init", ["grid", "ones", [0.3, 8.0]])
def test_every_start_reaches_the_same_optimum(init):
    members, labels = _tempered_data(4_000, 10, (1.5, 2.5), seed=5)
    fit = fit_temperatures_result(members, labels, init=init)
    assert fit.converged
    reference = fit_temperatures_result(members, labels)
    np.testing.assert_allclose(fit.temperatures, reference.temperatures, rtol=1e-3)
    assert fit.nll_after == pytest.approx(reference.nll_after, rel=1e-8)


def test_accepts_torch_lists_stacked_and_single_member():
    members, labels = _tempered_data(1_000, 5, (1.5, 2.5), seed=2)
    expected = fit_temperatures(members, labels)
    as_torch = fit_temperatures([torch.from_numpy(z) for z in members], torch.from_numpy(labels))
    assert as_torch == expected
    assert fit_temperatures(np.stack(members), labels.tolist()) == expected
    as_lists = fit_temperatures([z.tolist() for z in members], labels.astype(float))
    assert as_lists == expected
    single = fit_temperatures(torch.from_numpy(members[0]), labels)
    assert single == fit_temperatures([members[0]], labels)
    assert len(single) == 1


def test_separable_data_stops_at_the_lower_bound():
    z = _members(500, 4, 1, seed=1)[0]
    labels = z.argmax(1)  # perfectly separable: the NLL falls as T -> 0
    fit = fit_temperatures_result([z], labels)
    assert fit.temperatures == (DEFAULT_TEMPERATURE_BOUNDS[0],)
    assert fit.at_bound == (True,) and fit.converged
    assert np.isfinite(fit.nll_after)
    custom = fit_temperatures_result([z], labels, bounds=(0.5, 4.0))
    assert custom.temperatures == (0.5,)


def test_useless_member_goes_to_the_upper_bound_and_constant_logits_keep_the_start():
    members, labels = _tempered_data(3_000, 6, (1.2,), seed=9)
    noise = _members(3_000, 6, 1, seed=99, scale=3.0)[0]
    fit = fit_temperatures_result([members[0], noise], labels)
    assert fit.converged
    assert fit.temperatures[1] == DEFAULT_TEMPERATURE_BOUNDS[1] and fit.at_bound == (False, True)
    flat = np.zeros((50, 3), dtype=np.float32)
    constant = fit_temperatures_result([flat], np.arange(50) % 3)
    assert constant.temperatures == (1.0,) and constant.converged


def test_warns_when_not_converged():
    members, labels = _tempered_data(2_000, 10, (0.5, 4.0), seed=6)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        temps = fit_temperatures(members, labels, init="ones", max_iter=1)
    assert len(temps) == 2


# --------------------------------------------------------------------------- bad input
_Z = np.zeros((4, 3), dtype=np.float32)
_Y = np.array([0, 1, 2, 0])


@pytest.mark.parametrize(
    ("logits", "labels", "match"),
    [
        ([], _Y, "at least one member"),
        ("abc", _Y, "sequence of member logits"),
        ([_Z, np.zeros((4, 4))], _Y, "same shape"),
        ([_Z, np.zeros((5, 3))], _Y, "same shape"),
        ([_Z[0]], _Y, "must be 2-D"),
        ([np.zeros((2, 4, 3))], _Y, "must be 2-D"),
        (np.zeros(3), _Y, "stacked"),
        ([np.zeros((0, 3))], np.zeros(0, int), "empty"),
        ([np.zeros((4, 1))], np.zeros(4, int), "at least 2 classes"),
        (
            [np.where(np.eye(4, 3) > 0, np.nan, 0.0)],
            _Y,
            r"non-finite value \(nan\) at index \(0, 0\)",
        ),
        ([_Z, np.full((4, 3), -np.inf)], _Y, r"logits_list\[1\]` contains a non-finite"),
        ([[[1, 2], [3]]], _Y, "could not be converted|ragged"),
        ([np.array([["a", "b"]] * 4)], _Y, "real numbers"),
        ([_Z], _Y[:3], "length mismatch"),
        ([_Z], _Y[None], "labels` must be 1-D"),
        ([_Z], np.array([0, 1, 3, 0]), r"label 3 at index 2, outside \[0, 3\)"),
        ([_Z], np.array([0, -1, 2, 0]), "label -1 at index 1"),
        ([_Z], np.array([0.0, 1.5, 2.0, 0.0]), "integer class indices"),
        ([_Z], np.zeros(0, int), "labels` is empty"),
    ],
)
def test_bad_inputs_raise_value_error(logits, labels, match):
    with pytest.raises(ValueError, match=match):
        fit_temperatures(logits, labels)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"init": "random"}, "`init` must be"),
        ({"init": [1.0]}, "2 finite positive temperatures"),
        ({"init": [1.0, -2.0]}, "2 finite positive temperatures"),
        ({"bounds": (1.0, 0.5)}, "0 < low < high"),
        ({"bounds": (0.0, 10.0)}, "0 < low < high"),
        ({"bounds": 3.0}, "pair"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
    ],
)
def test_bad_options_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_temperatures([_Z, _Z], _Y, **kwargs)


def test_warns_when_the_calibration_set_has_almost_no_errors():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 300)
    logits = rng.normal(size=(300, 4))
    logits[np.arange(300), labels] += 8.0  # every sample right: the NLL falls as T -> 0
    with pytest.warns(RuntimeWarning, match="only 0 misclassified sample"):
        temps = fit_temperatures([logits, logits * 0.5], labels)
    assert max(temps) < 1.0  # the fit sharpened, which is what the warning is about
    # with enough errors the same call is quiet
    noisy = rng.normal(size=(300, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_temperatures([noisy, noisy], labels)
