"""The contract every search strategy keeps.

* Strategies claiming ``exact`` (exact, knapsack, and auto when it picks either)
  return the brute-force front of ``tests/reference.py`` on many small problems.
* Dominance pruning changes nothing: pruned and unpruned enumeration agree on
  every error model available.
* The knapsack front equals exhaustive enumeration on mid-size pools.
* Heuristic strategies return only real configurations (re-evaluated by the
  independent reference), within budget and mutually non-dominated, flag
  ``exact: false``, and are reproducible from their seed.
"""

import numpy as np
import pytest

from allocator import solve
from allocator.exceptions import InputError
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.search import STRATEGIES, make_strategy
from allocator.search.exact import ExactStrategy
from allocator.search.knapsack import KnapsackStrategy, knapsack_blocker
from tests.support import reference
from tests.support.random_problems import random_problem


def points(result):
    return [(p["cost"], p["throughput"]) for p in result.points()]


def assert_same_front(a, b):
    """Two results' fronts agree point by point (cost and throughput, to 1e-12)."""
    np.testing.assert_allclose(a.front.cost, b.front.cost, rtol=1e-12)
    np.testing.assert_allclose(a.front.throughput, b.front.throughput, rtol=1e-12)


def check_exact(raw, strategy, **params):
    problem = problem_from_spec(parse_problem(raw))
    ref, _ = reference.brute_front(raw)
    if not ref:
        with pytest.raises(InputError):
            solve(problem, strategy, **params)
        return None
    result = solve(problem, strategy, **params)
    assert result.exact
    assert reference.same_front(points(result), [(c, t) for c, t, _, _ in ref])
    return result


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("strategy", ["exact", "auto"])
def test_exact_claims_match_brute_force(seed, strategy):
    raw = random_problem(1000 + seed)
    check_exact(raw, strategy)


@pytest.mark.parametrize("seed", range(40))
def test_knapsack_matches_brute_force(seed):
    raw = random_problem(2000 + seed, knapsack=True)
    problem = problem_from_spec(parse_problem(raw))
    assert knapsack_blocker(problem) is None
    res = check_exact(raw, "knapsack")
    if res is not None:
        assert res.strategy == "knapsack"


@pytest.mark.parametrize("seed", range(6))
def test_knapsack_equals_enumeration_on_mid_size_pools(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(12, 16))
    raw = {
        "name": f"mid-{seed}",
        "convention": ["paper", "bonus"][seed % 2],
        "verifier": {"pass_cost": 1.0, "token_cost": [0.0, 0.02][seed % 2]},
        "drafters": [
            {
                "name": f"d{i}",
                # a few drafters near acceptance 1 drive sum log(1-a) to the floor
                "acceptance": float(rng.choice([rng.uniform(0.2, 0.95), 0.999999])),
                "unit_cost": float(rng.uniform(0.005, 0.2)),
            }
            for i in range(n)
        ],
        "search": {"k": {"max": 24}, "m": {"max": [None, 4, 6][seed % 3]}},
        "cost_metric": ["draft_cost_per_round", "draft_cost_per_token", "drafters"][seed % 3],
    }
    if seed >= 3:
        raw["budget"] = {"draft_cost_per_round": 1.5}
    problem = problem_from_spec(parse_problem(raw))
    exact = ExactStrategy(prune=False).solve(problem)
    knap = KnapsackStrategy().solve(problem)
    assert knap.exact
    assert_same_front(knap, exact)


def test_knapsack_refuses_what_it_cannot_solve_exactly():
    raw = random_problem(7, knapsack=True)
    raw["drafting"] = "parallel"
    with pytest.raises(InputError) as info:
        solve(problem_from_spec(parse_problem(raw)), "knapsack")
    assert info.value.field == "drafting"


ERROR_MODELS = [
    {"model": "independent"},
    {"model": "exchangeable", "correlation": 0.4},
    {"model": "factor", "loadings": None},
]


@pytest.mark.parametrize("errors", ERROR_MODELS, ids=lambda e: e["model"])
@pytest.mark.parametrize("seed", range(12))
def test_pruning_changes_nothing(errors, seed):
    raw = random_problem(3000 + seed, n_max=7)
    if errors["model"] == "factor":
        rng = np.random.default_rng(seed)
        errors = {
            "model": "factor",
            "loadings": {d["name"]: float(rng.uniform(-0.5, 0.9)) for d in raw["drafters"]},
        }
    raw["errors"] = errors
    problem = problem_from_spec(parse_problem(raw))
    try:
        plain = ExactStrategy(prune=False).solve(problem)
    except InputError:
        with pytest.raises(InputError):
            ExactStrategy().solve(problem)
        return
    pruned = ExactStrategy().solve(problem)
    assert pruned.evaluated == plain.evaluated  # both cover the whole space
    assert_same_front(pruned, plain)


def test_pruning_evaluates_far_fewer_configurations():
    rng = np.random.default_rng(0)
    raw = {
        "name": "prune",
        "drafters": [
            {"name": f"d{i}", "acceptance": float(rng.uniform(0.3, 0.9)), "unit_cost": 0.1}
            for i in range(12)
        ],
        "search": {"k": {"max": 16}},
    }
    res = ExactStrategy().solve(problem_from_spec(parse_problem(raw)))
    screened = int(res.notes[0].split("the model evaluated ")[1].split()[0].replace(",", ""))
    space = (2**12 - 1) * 16  # every non-empty subset of 12 drafters at k = 1..16
    assert res.evaluated == space  # reported as covering the whole space ...
    assert screened < space / 50  # ... while the model saw a small part of it


# ---------------------------------------------------------------- heuristics
HEURISTIC = [name for name, cls in STRATEGIES.items() if name not in ("exact", "knapsack")]


@pytest.mark.parametrize("name", HEURISTIC)
@pytest.mark.parametrize("seed", range(8))
def test_heuristic_returns_real_configurations(name, seed):
    raw = random_problem(4000 + seed, n_max=8)
    problem = problem_from_spec(parse_problem(raw))
    ref, _ = reference.brute_front(raw)
    if not ref:
        with pytest.raises(InputError):
            solve(problem, name, trials=60, seed=seed, population=20)
        return
    result = solve(problem, name, trials=60, seed=seed, population=20)
    assert result.exact is False
    names = [d["name"] for d in raw["drafters"]]
    budget = raw.get("budget", {})
    pts = result.points()
    assert pts
    for p in pts:
        subset = tuple(names.index(d) for d in p["drafters"])
        met = reference.metrics(raw, subset, p["k"])
        assert reference.isclose(p["throughput"], met["throughput"], rel=1e-10)
        assert reference.isclose(
            p["cost"], met[raw.get("cost_metric", "draft_cost_per_round")], rel=1e-10
        )
        for cap_name, cap in budget.items():
            assert met[cap_name] <= cap * (1 + 1e-9) + 1e-9
        mr = raw["search"]["m"]
        assert mr["min"] <= len(subset) <= mr["max"]
        k = raw["search"]["k"]
        assert k["min"] <= p["k"] <= k["max"]
        assert not set(raw["search"].get("exclude", [])) & set(p["drafters"])
        assert set(raw["search"].get("require", [])) <= set(p["drafters"])
    costs = [c for c, _ in points(result)]
    thr = [t for _, t in points(result)]
    assert costs == sorted(costs) and all(b > a for a, b in zip(thr, thr[1:], strict=False))
    # never better than the true front
    ref_pts = [(c, t) for c, t, _, _ in ref]
    for c, t in points(result):
        assert any(rc <= c + 1e-9 and rt >= t - 1e-9 for rc, rt in ref_pts)


@pytest.mark.parametrize("name", HEURISTIC)
def test_heuristic_is_reproducible_from_its_seed(name):
    rng = np.random.default_rng(5)
    raw = {
        "name": "repro",
        "drafters": [
            {"name": f"d{i}", "acceptance": float(rng.uniform(0.3, 0.9)), "unit_cost": 0.05}
            for i in range(10)
        ],
        "errors": {"model": "independent"},
        "search": {"k": {"max": 12}},
    }
    problem = problem_from_spec(parse_problem(raw))
    a = solve(problem, name, trials=120, seed=3, seed_front=False, population=20)
    b = solve(problem, name, trials=120, seed=3, seed_front=False, population=20)
    c = solve(problem, name, trials=120, seed=4, seed_front=False, population=20)
    assert np.array_equal(a.front.members, b.front.members) and np.array_equal(a.front.k, b.front.k)
    assert a.evaluated == b.evaluated == 120
    assert not (
        np.array_equal(a.front.members, c.front.members) and np.array_equal(a.front.k, c.front.k)
    )


def test_optuna_seeded_with_the_independence_front_reaches_it():
    """Under independence the seeds are the exact front, so the heuristic front equals it."""
    raw = random_problem(11, n_max=6)
    raw.pop("budget", None)
    problem = problem_from_spec(parse_problem(raw))
    ref, _ = reference.brute_front(raw)
    heur = solve(problem, "optuna", trials=len(ref) + 10, seed=0)
    assert not heur.exact
    assert reference.same_front(points(heur), [(c, t) for c, t, _, _ in ref])


def test_auto_is_honest_about_exactness():
    rng = np.random.default_rng(1)
    big = {
        "name": "big",
        "drafters": [
            {"name": f"d{i}", "acceptance": [float(rng.uniform(0.3, 0.9)), 0.5], "unit_cost": 0.05}
            for i in range(40)
        ],
        "search": {"k": {"max": 8}},
    }
    problem = problem_from_spec(parse_problem(big))
    strategy, notes = make_strategy("auto", problem, trials=40, seed=0)
    assert strategy.name == "optuna" and "beyond exact" in notes[0]
    result = solve(problem, "auto", trials=40, seed=0)
    assert result.exact is False and result.notes[0].startswith("auto picked optuna")
    single = dict(big, drafters=[dict(d, acceptance=0.6) for d in big["drafters"]])
    result = solve(problem_from_spec(parse_problem(single)), "auto")
    assert result.strategy == "knapsack" and result.exact is True


def test_progress_reports_work_and_front_size():
    raw = random_problem(21, n_max=6)
    raw.pop("budget", None)
    problem = problem_from_spec(parse_problem(raw))
    for name, params in [("exact", {}), ("optuna", {"trials": 40, "population": 10})]:
        calls = []
        solve(problem, name, progress=lambda d, t, f: calls.append((d, t, f)), **params)
        done = [c[0] for c in calls]
        assert done == sorted(done) and done[-1] == calls[-1][1]
        assert calls[-1][2] is not None and calls[-1][2] >= 1


def test_options_a_strategy_does_not_use_are_reported_not_silently_dropped():
    raw = random_problem(31, n_max=4)
    raw.pop("budget", None)
    res = solve(problem_from_spec(parse_problem(raw)), "exact", trials=5, storage="sqlite:///x.db")
    assert "--trials, --storage ignored" in res.notes[0]
    res = solve(problem_from_spec(parse_problem(raw)), "exact", seed=3)
    assert "ignored" not in " ".join(res.notes)


@pytest.mark.parametrize("seed", range(4))
def test_knapsack_with_unequal_hosting_costs_equals_enumeration(seed):
    rng = np.random.default_rng(50 + seed)
    n = 13
    raw = {
        "name": f"hosting-{seed}",
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": float(rng.uniform(0.2, 0.95)),
                "unit_cost": float(rng.uniform(0.005, 0.2)),
                "hosting_cost": float(rng.integers(1, 5)),
            }
            for i in range(n)
        ],
        "search": {"k": {"max": 16}},
        "cost_metric": ["hosting_cost", "draft_cost_per_round"][seed % 2],
    }
    if seed >= 2:
        raw["budget"] = {"hosting_cost": 7}
    problem = problem_from_spec(parse_problem(raw))
    assert knapsack_blocker(problem) is None
    exact = ExactStrategy(prune=False).solve(problem)
    knap = KnapsackStrategy().solve(problem)
    assert knap.exact
    assert_same_front(knap, exact)


def test_knapsack_refuses_hosting_costs_with_too_many_distinct_sums():
    rng = np.random.default_rng(0)
    raw = {
        "name": "real-hosting",
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": 0.5,
                "unit_cost": 0.1,
                "hosting_cost": float(rng.uniform(1, 2)),
            }
            for i in range(30)
        ],
        "cost_metric": "hosting_cost",
    }
    problem = problem_from_spec(parse_problem(raw))
    assert knapsack_blocker(problem)[0] == "drafters"
