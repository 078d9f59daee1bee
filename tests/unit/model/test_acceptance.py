"""Closed forms and conventions of the expected number of accepted units."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.core.problem import Problem
from allocator.model import evaluate_configs
from allocator.model.acceptance import expected_accepted, position_matrix


def direct_paper(a, k):
    return sum(math.prod(a[j] for j in range(i)) for i in range(k))


def direct_bonus(a, k):
    return 1 + sum(math.prod(a[j] for j in range(i + 1)) for i in range(k))


@given(st.floats(0.01, 0.999), st.integers(1, 60))
def test_constant_acceptance_matches_closed_forms(a, k):
    e = expected_accepted(np.array([[a]]), k, "paper")[0]
    b = expected_accepted(np.array([[a]]), k, "bonus")[0]
    for kk in range(1, k + 1):
        assert e[kk - 1] == pytest.approx((1 - a**kk) / (1 - a), rel=1e-12)
        assert b[kk - 1] == pytest.approx((1 - a ** (kk + 1)) / (1 - a), rel=1e-12)


@settings(max_examples=50)
@given(st.lists(st.floats(0.05, 1.0), min_size=1, max_size=6), st.integers(1, 12))
def test_per_position_matches_direct_sums(values, k):
    full = [values[min(j, len(values) - 1)] for j in range(k)]
    a = np.array([values])
    assert expected_accepted(a, k, "paper")[0, k - 1] == pytest.approx(direct_paper(full, k))
    assert expected_accepted(a, k, "bonus")[0, k - 1] == pytest.approx(direct_bonus(full, k))


def test_per_position_hand_worked():
    # a = [0.8, 0.5], last repeats: positions 0.8, 0.5, 0.5, ...
    a = np.array([[0.8, 0.5]])
    # paper, k=3: 1 + 0.8 + 0.8*0.5 = 2.2 ; bonus, k=3: 1 + 0.8 + 0.4 + 0.2 = 2.4
    assert expected_accepted(a, 3, "paper")[0, 2] == pytest.approx(2.2, abs=1e-15)
    assert expected_accepted(a, 3, "bonus")[0, 2] == pytest.approx(2.4, abs=1e-15)
    # paper k=1 is always exactly 1 unit; bonus k=0 would be 1, k=1 is 1 + a(1)
    assert expected_accepted(a, 1, "paper")[0, 0] == 1.0
    assert expected_accepted(a, 1, "bonus")[0, 0] == pytest.approx(1.8)


@pytest.mark.parametrize("k", [1, 2, 7, 64, 3000])
def test_acceptance_one_is_the_limit_not_nan(k):
    e = expected_accepted(np.array([[1.0]]), k, "paper")[0]
    b = expected_accepted(np.array([[1.0]]), k, "bonus")[0]
    assert e[-1] == k and b[-1] == k + 1
    assert np.all(np.isfinite(e)) and np.all(np.isfinite(b))


def test_position_matrix_pads_with_last_value():
    m = position_matrix([0.5, [0.9, 0.7, 0.6], [0.8]])
    np.testing.assert_array_equal(m, [[0.5] * 3, [0.9, 0.7, 0.6], [0.8] * 3])


@pytest.mark.parametrize(
    "alpha,gamma,c", [(0.6, 3, 0.05), (0.8, 5, 0.1), (0.9, 8, 0.02), (0.5, 1, 0.3), (0.75, 12, 0.0)]
)
def test_bonus_matches_leviathan_walltime_improvement(alpha, gamma, c):
    """Leviathan et al. 2023, Thm 3.8: (1 - a^(g+1)) / ((1 - a)(g c + 1))."""
    p = Problem(
        name="t",
        names=("d",),
        acceptance=[[alpha]],
        unit_cost=[c],
        hosting_cost=[0],
        convention="bonus",
        pass_cost=1.0,
    )
    s = evaluate_configs(p, np.array([[True]]), np.array([gamma]))["throughput"][0]
    assert s == pytest.approx(
        (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1)), rel=1e-12
    )
