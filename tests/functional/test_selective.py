"""Risk-coverage, AURC, E-AURC, SAC: hand-worked, brute force over tie orders, properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_uq import functional as F


def _curve_for_order(correct_in_order):
    errors = np.cumsum(~correct_in_order)
    k = np.arange(1, len(correct_in_order) + 1)
    return errors / k


def _brute_force(u, correct, n_orders, seed, accuracy=0.98):
    """Average AURC and SAC over random orders that break the ties of ``u`` at random."""
    rng = np.random.default_rng(seed)
    n = len(u)
    aurcs, sacs = [], []
    for _ in range(n_orders):
        order = np.lexsort((rng.random(n), u))  # sort by u, ties in random order
        risk = _curve_for_order(correct[order])
        aurcs.append(risk.mean())
        su = u[order]
        boundary = np.append(su[1:] != su[:-1], True)  # deployable cut points
        k = np.arange(1, n + 1)
        ok = boundary & (1 - risk >= accuracy - 1e-12)
        sacs.append(k[ok].max() / n if ok.any() else 0.0)
    return np.mean(aurcs), np.mean(sacs)


def test_hand_worked_no_ties():
    # order by u: right, wrong, right, right -> risks 0, 1/2, 1/3, 1/4
    u = [0.1, 0.2, 0.3, 0.4]
    correct = [True, False, True, True]
    coverage, risk = F.risk_coverage_curve(u, correct)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0, 1 / 2, 1 / 3, 1 / 4])
    assert F.aurc(u, correct) == pytest.approx((0 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    # oracle: right, right, right, wrong -> risks 0, 0, 0, 1/4
    assert F.e_aurc(u, correct) == pytest.approx((1 / 2 + 1 / 3) / 4)
    assert F.sac(u, correct, accuracy=0.98) == 0.25
    assert F.sac(u, correct, accuracy=0.75) == 1.0
    assert F.sac(u, correct, accuracy=0.5) == 1.0


def test_hand_worked_ties():
    # one tie group of 2 holding one error, then a right one:
    # expected errors at k=1: 0.5, k=2: 1, k=3: 1 -> risks .5, .5, 1/3
    u = [0.0, 0.0, 1.0]
    correct = [True, False, True]
    _, risk = F.risk_coverage_curve(u, correct)
    np.testing.assert_allclose(risk, [0.5, 0.5, 1 / 3])
    assert F.aurc(u, correct) == pytest.approx((0.5 + 0.5 + 1 / 3) / 3)
    # the first deployable cut is after the tie group (acc 1/2), then all (2/3)
    assert F.sac(u, correct, accuracy=0.6) == 1.0
    assert F.sac(u, correct, accuracy=0.7) == 0.0


def test_all_tied_is_random_ordering():
    correct = np.array([True] * 7 + [False] * 3)
    u = np.zeros(10)
    _, risk = F.risk_coverage_curve(u, correct)
    np.testing.assert_allclose(risk, 0.3)
    assert F.aurc(u, correct) == pytest.approx(0.3)


@pytest.mark.parametrize("seed", range(3))
def test_equals_brute_force_over_tie_orders(seed):
    rng = np.random.default_rng(seed)
    n = 300
    u = rng.integers(0, 25, n).astype(float)  # heavy ties
    correct = rng.random(n) < 0.85
    bf_aurc, bf_sac = _brute_force(u, correct, n_orders=2000, seed=seed, accuracy=0.9)
    # the tie-exact AURC is the expectation; 2000 orders give ~1e-4 Monte Carlo error
    assert F.aurc(u, correct) == pytest.approx(bf_aurc, abs=5e-4)
    # SAC at group boundaries does not depend on the order at all
    assert F.sac(u, correct, accuracy=0.9) == pytest.approx(bf_sac, abs=1e-12)


def test_aurc_exact_expectation_small_case():
    # enumerate every order of a tie group exactly (4! = 24 orders)
    from itertools import permutations

    correct = np.array([True, False, True, False, True])
    u = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
    values = []
    for perm in permutations(range(1, 5)):
        order = np.array((0, *perm))
        values.append(_curve_for_order(correct[order]).mean())
    assert F.aurc(u, correct) == pytest.approx(np.mean(values), abs=1e-15)


def test_result_independent_of_input_order():
    rng = np.random.default_rng(0)
    u = rng.integers(0, 10, 500).astype(float)
    correct = rng.random(500) < 0.7
    perm = rng.permutation(500)
    assert F.aurc(u, correct) == F.aurc(u[perm], correct[perm])
    assert F.sac(u, correct, 0.8) == F.sac(u[perm], correct[perm], 0.8)


def test_selective_metrics_bundle_equals_individual():
    rng = np.random.default_rng(1)
    u = rng.random(1000)
    correct = rng.random(1000) < 0.9
    bundle = F.selective_metrics(u, correct, accuracy=0.95)
    assert bundle == {
        "aurc": F.aurc(u, correct),
        "e_aurc": F.e_aurc(u, correct),
        "sac": F.sac(u, correct, accuracy=0.95),
    }


def test_no_errors_and_all_errors():
    assert F.aurc([0.1, 0.2], [True, True]) == 0.0
    assert F.e_aurc([0.1, 0.2], [True, True]) == 0.0
    assert F.sac([0.1, 0.2], [True, True]) == 1.0
    assert F.aurc([0.1, 0.2], [False, False]) == 1.0
    assert F.e_aurc([0.1, 0.2], [False, False]) == 0.0
    assert F.sac([0.1, 0.2], [False, False]) == 0.0


def test_sac_rejects_bad_target():
    with pytest.raises(ValueError, match="accuracy"):
        F.sac([0.1], [True], accuracy=1.5)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=60),
    st.randoms(use_true_random=False),
)
def test_properties(pairs, rnd):
    u = np.array([p[0] for p in pairs], dtype=float)
    correct = np.array([p[1] for p in pairs])
    area = F.aurc(u, correct)
    assert 0.0 <= area <= 1.0
    assert F.e_aurc(u, correct) >= -1e-12
    assert 0.0 <= F.sac(u, correct) <= 1.0
    perm = list(range(len(u)))
    rnd.shuffle(perm)
    assert F.aurc(u[perm], correct[perm]) == pytest.approx(area, abs=1e-12)
