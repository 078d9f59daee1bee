"""Gaussian-matrix problems of 11-12 drafters: exact search when the integrals are cheap
enough, a refusal naming the way out (or optuna under ``auto``) when a timed sample says
they are not, and each subset integrated once however often a search meets it."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

from allocator.core.problem import Problem
from allocator.exceptions import InputError
from allocator.io.build import problem_from_spec
from allocator.io.spec import ProblemSpec
from allocator.model.errors import gaussian
from allocator.search.auto import choose_strategy
from allocator.search.exact import ExactStrategy


def correlated_problem(n: int, seed: int = 1) -> Problem:
    rng = np.random.default_rng(seed)
    loadings = rng.uniform(0.3, 0.8, size=n)
    matrix = np.round(np.outer(loadings, loadings), 4)
    np.fill_diagonal(matrix, 1.0)
    raw = {
        "name": f"gaussian-{n}",
        "drafters": [
            {"name": f"d{i}", "acceptance": round(float(a), 3), "unit_cost": 0.02}
            for i, a in enumerate(rng.uniform(0.4, 0.8, size=n))
        ],
        "search": {"k": {"max": 8}},
        "errors": {"model": "gaussian", "matrix": matrix.tolist()},
    }
    return problem_from_spec(ProblemSpec.model_validate(raw))


def test_each_subset_is_integrated_once_and_matches_scipy(monkeypatch):
    problem = correlated_problem(5)
    q = 1.0 - problem.acceptance
    calls = []
    orthant = gaussian._orthant
    monkeypatch.setattr(
        gaussian, "_orthant", lambda *a: calls.append(a[0].tobytes()) or orthant(*a)
    )
    members = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=bool)
    first = problem.errors.fail_prob(members, q)
    again = problem.errors.fail_prob(members[::-1], q)
    assert len(calls) == 2  # two distinct subsets of 3+ drafters, one position
    np.testing.assert_array_equal(again, first[::-1])
    # against SciPy called here, at its default (looser) tolerance
    matrix = np.asarray(problem.errors.matrix)
    idx = np.flatnonzero(members[1])
    want = multivariate_normal(np.zeros(5), matrix[np.ix_(idx, idx)]).cdf(norm.ppf(q[idx, 0]))
    assert abs(first[1, 0] - want) < 1e-4


def test_exact_refuses_when_the_timed_sample_projects_too_long(monkeypatch):
    problem = correlated_problem(11)
    monkeypatch.setattr(gaussian, "MAX_SECONDS", 1e-6)
    with pytest.raises(InputError) as info:
        ExactStrategy().solve(problem)
    assert info.value.field == "errors.matrix"
    assert "1,981 multivariate normal integrations" in info.value.message  # C(11, >=3)
    assert "--strategy optuna" in info.value.message


def test_auto_weighs_the_integration_time(monkeypatch):
    problem = correlated_problem(12)
    monkeypatch.setattr(gaussian, "MAX_SECONDS", 1e-6)
    name, reason = choose_strategy(problem)
    assert name == "optuna" and "4,017 multivariate normal integrals" in reason  # 2^12-1-12-66
    monkeypatch.setattr(gaussian, "MAX_SECONDS", 1e9)
    assert choose_strategy(problem)[0] == "exact"
