"""The exact strategy against the brute-force reference on many random small problems."""

import numpy as np
import pytest

from allocator import solve
from allocator.exceptions import InputError
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from tests.support import reference
from tests.support.random_problems import random_problem


@pytest.mark.parametrize("seed", range(60))
def test_exact_front_equals_brute_force(seed):
    raw = random_problem(seed)
    problem = problem_from_spec(parse_problem(raw))
    ref, n_points = reference.brute_front(raw)
    if not ref:
        with pytest.raises(InputError) as info:
            solve(problem, "exact")
        assert info.value.field.startswith("budget")
        return
    result = solve(problem, "exact")
    assert result.exact
    pts = result.points()
    ours = [(p["cost"], p["throughput"]) for p in pts]
    assert reference.same_front(ours, [(c, t) for c, t, _, _ in ref])
    # no point dominated by another, sorted by cost
    costs = [c for c, _ in ours]
    assert costs == sorted(costs)
    thr = [t for _, t in ours]
    assert all(b > a for a, b in zip(thr, thr[1:], strict=False))
    # every configuration re-evaluated by the reference gives the reported metrics
    names = [d["name"] for d in raw["drafters"]]
    for p in pts:
        subset = tuple(names.index(n) for n in p["drafters"])
        met = reference.metrics(raw, subset, p["k"])
        for key in (
            "throughput",
            "expected_accepted",
            "round_time",
            "draft_cost_per_round",
            "draft_cost_per_token",
            "hosting_cost",
        ):
            assert reference.isclose(p[key], met[key], rel=1e-10), key
        assert p["m"] == len(subset)
    assert result.evaluated == n_points or "budget" in raw  # every config counted


def test_identical_drafters_collapse_to_one_point():
    raw = {
        "name": "t",
        "drafters": [
            {"name": "a", "acceptance": 0.5, "unit_cost": 0.1},
            {"name": "b", "acceptance": 0.5, "unit_cost": 0.1},
        ],
        "search": {"k": {"max": 3}, "m": {"max": 1}},
    }
    res = solve(problem_from_spec(parse_problem(raw)), "exact")
    assert [p["drafters"] for p in res.points()] == [["a"]] * 3


def test_budget_nothing_meets_names_the_budget():
    raw = {
        "name": "t",
        "drafters": [{"name": "a", "acceptance": 0.5, "unit_cost": 0.1}],
        "budget": {"draft_cost_per_round": 0.05},
    }
    with pytest.raises(InputError) as info:
        solve(problem_from_spec(parse_problem(raw)), "exact")
    assert info.value.field == "budget.draft_cost_per_round"
    assert "0.1" in info.value.message


def test_budget_combination_is_reported_as_such():
    raw = {
        "name": "t",
        "drafters": [
            {"name": "a", "acceptance": 0.5, "unit_cost": 0.1, "hosting_cost": 5},
            {"name": "b", "acceptance": 0.5, "unit_cost": 1.0, "hosting_cost": 1},
        ],
        "search": {"k": {"max": 2}},
        "budget": {"draft_cost_per_round": 0.3, "hosting_cost": 2},
    }
    with pytest.raises(InputError) as info:
        solve(problem_from_spec(parse_problem(raw)), "exact")
    assert info.value.field == "budget"


def test_fifty_drafters_with_small_m_and_long_k():
    rng = np.random.default_rng(3)
    raw = {
        "name": "big",
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": float(rng.uniform(0.3, 0.95)),
                "unit_cost": float(rng.uniform(0.01, 0.2)),
            }
            for i in range(50)
        ],
        "search": {"k": {"max": 2000}, "m": {"max": 2}},
    }
    res = solve(problem_from_spec(parse_problem(raw)), "exact")
    assert res.evaluated == (50 + 50 * 49 // 2) * 2000
    assert np.all(np.isfinite(res.front.throughput))


def test_acceptance_one_gives_linear_throughput():
    raw = {
        "name": "t",
        "drafters": [{"name": "a", "acceptance": 1.0, "unit_cost": 0.1}],
        "search": {"k": {"max": 1000}},
    }
    res = solve(problem_from_spec(parse_problem(raw)), "exact")
    best = res.points()[-1]
    assert best["k"] == 1000
    assert best["throughput"] == pytest.approx(1000 / (0.1 * 1000 + 1))
