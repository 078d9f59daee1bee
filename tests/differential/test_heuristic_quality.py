"""A quality floor for the heuristic (``optuna``) strategy, as Optuna's own sampler tests
judge convergence: the hypervolume of its front over the exact front's, on seeded
problems small enough to enumerate.

The hypervolume is computed here (a 2-D staircase, cost minimised, throughput
maximised, reference point at 1.1 x the largest cost and zero throughput), and the exact
front comes from enumeration. Correlated error models keep the seed points (the
independence front) from being the answer already. The ``search.m.min`` cases catch a
constraint that rejects larger ensembles: their fronts reach m = 4..5, which such a bug
cuts off (hypervolume ratio ~0.7-0.94 instead of >= 0.985).
"""

import numpy as np
import pytest

from allocator.core.problem import Problem
from allocator.io.build import problem_from_spec
from allocator.io.spec import ProblemSpec
from allocator.search.exact import ExactStrategy
from allocator.search.study import OptunaStrategy

FLOOR = 0.98


def hypervolume(cost: np.ndarray, throughput: np.ndarray, ref_cost: float) -> float:
    """Area dominated by points ``(cost, throughput)`` within ``cost <= ref_cost``,
    ``throughput >= 0``."""
    order = np.argsort(cost, kind="stable")
    edges = np.append(cost[order], ref_cost)
    best = np.maximum.accumulate(throughput[order])
    return float(np.sum(np.diff(edges) * best))


def test_hypervolume_by_hand():
    # two points: (1, 2) and (2, 3), reference cost 4: 1*2 + 2*3 = 8
    assert hypervolume(np.array([2.0, 1.0]), np.array([3.0, 2.0]), 4.0) == 8.0
    # a dominated point adds nothing
    assert hypervolume(np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 1.0]), 4.0) == 8.0


def make_problem(seed: int, errors: dict, m: dict | None = None, n: int = 10) -> Problem:
    rng = np.random.default_rng(seed)
    raw: dict = {
        "name": f"quality-{seed}",
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": round(float(rng.uniform(0.3, 0.6)), 3),
                "unit_cost": round(float(rng.uniform(0.005, 0.03)), 3),
            }
            for i in range(n)
        ],
        "search": {"k": {"max": 12}},
        "errors": errors,
    }
    if m is not None:
        raw["search"]["m"] = m
    return problem_from_spec(ProblemSpec.model_validate(raw))


def ratio(problem: Problem, heuristic) -> float:
    exact = ExactStrategy().solve(problem).front
    cm = problem.cost_metric
    ref = 1.1 * max(exact.metrics[cm].max(), heuristic.metrics[cm].max())
    return hypervolume(heuristic.metrics[cm], heuristic.metrics["throughput"], ref) / hypervolume(
        exact.metrics[cm], exact.metrics["throughput"], ref
    )


EXCH = {"model": "exchangeable", "correlation": 0.05}
FACTOR = {"model": "factor", "loadings": {f"d{i}": round(0.2 + 0.05 * i, 2) for i in range(10)}}


@pytest.mark.parametrize(
    "seed, errors, m",
    [
        (0, EXCH, {"min": 2}),  # the front holds m = 2..5
        (2, EXCH, {"min": 3}),  # the front holds m = 3..5
        (1, FACTOR, None),
        (3, EXCH, {"max": 4}),
    ],
)
def test_heuristic_reaches_the_exact_hypervolume(seed, errors, m):
    problem = make_problem(seed, errors, m)
    front = OptunaStrategy(trials=400, seed=0).solve(problem).front
    sizes = front.members.sum(axis=1)
    assert sizes.min() >= problem.m_min and sizes.max() <= problem.m_max
    assert ratio(problem, front) >= FLOOR


def test_search_alone_converges_without_seed_points():
    """The sampler itself, not only the seed points, climbs towards the exact front."""
    problem = make_problem(0, EXCH, {"min": 2})
    few = OptunaStrategy(trials=50, seed=0, seed_front=False).solve(problem).front
    many = OptunaStrategy(trials=1000, seed=0, seed_front=False).solve(problem).front
    assert ratio(problem, many) >= 0.95
    assert ratio(problem, many) > ratio(problem, few)
