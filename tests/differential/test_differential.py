"""Differential tests across every problem feature.

Seeded random problems of six drafters and draft lengths up to 16 (fronts of 10 points
or more), one family per feature: pass-cost curves (increasing, flat, and falling past
the last measured point), parallel drafting, token cost, a hosting cap, workloads,
measured ensembles, longest-chain pooling and every error model. On each:

* pruned exact search equals unpruned exact search (the pruning screen is only allowed
  where it is provably valid);
* the exact front equals the brute-force front of the independent reference
  (``tests/reference.py``: ``Model``), and every metric of every front point equals the
  reference's value for that configuration;
* the knapsack strategy equals exact enumeration where it applies.

Hand-computed cases pin the bug classes down one by one (each was once a real mistake
or a deliberate mutation: see the module's report in the project history).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator import api
from allocator.core.problem import Problem
from allocator.core.space import iter_subsets
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.errors import ExchangeableErrors, IndependentErrors
from allocator.model.metrics import evaluate_subsets
from allocator.search.exact import ExactStrategy
from allocator.search.knapsack import KnapsackStrategy, knapsack_blocker
from tests.support import reference

FEATURES = (
    "plain",
    "curve-increasing",
    "curve-flat",
    "curve-falling",
    "parallel",
    "token-cost",
    "hosting-cap",
    "workloads",
    "ensembles",
    "longest-chain",
    "exchangeable",
    "factor",
    "gaussian",
    "empirical",
)
METRIC_KEYS = (
    "throughput",
    "expected_accepted",
    "pooled_acceptance",
    "round_time",
    "draft_cost_per_round",
    "draft_cost_per_token",
    "hosting_cost",
)
SEEDS = range(3)
N = 6
K_MAX = 20


def _write_log(rng: np.random.Generator, path, n: int, rows: int = 3000) -> list[float]:
    """A correlated outcome log (one shared factor); returns each drafter's success rate."""
    shared = rng.standard_normal(rows)
    load = rng.uniform(0.2, 0.8, n)
    cut = rng.uniform(-1.5, 0.0, n)
    latent = load[None, :] * shared[:, None] + np.sqrt(1 - load**2)[None, :] * (
        rng.standard_normal((rows, n))
    )
    ok = (latent > cut[None, :]).astype(int)
    lines = [",".join(f"d{i}" for i in range(n))]
    lines += [",".join(str(v) for v in row) for row in ok]
    path.write_text("\n".join(lines) + "\n")
    return [float(x) for x in ok.mean(axis=0)]


def make(feature: str, seed: int, folder, lists: bool = True) -> dict:
    """A random problem (the file format, as a dict) exercising ``feature``."""
    rng = np.random.default_rng([seed, FEATURES.index(feature)])
    drafters = []
    for i in range(N):
        if lists and feature != "ensembles" and rng.random() < 0.4:
            acc: float | list[float] = [
                float(x) for x in np.round(rng.uniform(0.3, 0.95, rng.integers(2, 4)), 3)
            ]
        else:
            acc = float(np.round(rng.uniform(0.3, 0.9), 3))
        drafters.append(
            {
                "name": f"d{i}",
                "acceptance": acc,
                "unit_cost": float(np.round(rng.uniform(0.01, 0.15), 3)),
                "hosting_cost": float(rng.integers(1, 5)),
            }
        )
    p: dict = {
        "name": f"{feature}-{seed}",
        "convention": str(rng.choice(["paper", "bonus"])),
        "drafters": drafters,
        "verifier": {"pass_cost": 2.0},
        "search": {"k": {"max": K_MAX}},
        "cost_metric": "draft_cost_per_round",
    }
    if feature == "curve-increasing":
        # nearly free drafters: pooling them costs little to draft but more to verify
        drafters[4]["unit_cost"], drafters[5]["unit_cost"] = 0.002, 0.003
    if feature == "curve-increasing":
        tokens = [1.0, 4.0, 16.0, 48.0]
        c = float(rng.uniform(0.02, 0.08))
        p["verifier"] = {
            "pass_cost_curve": {"tokens": tokens, "cost": [4 + c * t**1.5 for t in tokens]}
        }
    elif feature == "curve-flat":
        p["verifier"] = {"pass_cost_curve": {"tokens": [1, 8, 32], "cost": [1.2, 1.2, 1.2]}}
    elif feature == "curve-falling":
        # rises, then falls over its last segment: past 16 tokens the cost must stay at 1.4
        p["verifier"] = {"pass_cost_curve": {"tokens": [1, 8, 16], "cost": [1.0, 1.6, 1.4]}}
    elif feature == "parallel":
        p["drafting"] = "parallel"
        # a wide spread of unit costs: the slowest member, not the sum, sets the round
        for d in drafters:
            d["unit_cost"] = float(np.round(rng.uniform(0.005, 0.5), 3))
    elif feature == "token-cost":
        p["verifier"] = {"pass_cost": 2.0, "token_cost": float(rng.choice([0.01, 0.03]))}
    elif feature == "hosting-cap":
        p["budget"] = {"hosting_cost": 7.0}
    elif feature == "workloads":
        p["workloads"] = [
            {"name": "chat", "weight": 3.0, "acceptance": {"d0": 0.95, "d2": [0.9, 0.4]}},
            {"name": "code", "weight": 1.0, "acceptance": {"d1": 0.2}},
            {"name": "rest", "weight": 2.0},
        ]
    elif feature == "ensembles":
        a0, a1 = drafters[0]["acceptance"], drafters[1]["acceptance"]
        low, high = max(a0, a1), min(1.0, a0 + a1)
        p["ensembles"] = [{"members": ["d0", "d1"], "acceptance": low + 0.7 * (high - low)}]
    elif feature == "longest-chain":
        p["pooling"] = "longest-chain"
    elif feature == "exchangeable":
        p["errors"] = {"model": "exchangeable", "correlation": float(rng.uniform(0.1, 0.8))}
    elif feature == "factor":
        p["errors"] = {
            "model": "factor",
            "loadings": {d["name"]: float(rng.uniform(-0.5, 0.9)) for d in drafters},
        }
    elif feature == "gaussian":
        a = rng.standard_normal((N, N + 2))
        cov = a @ a.T
        s = np.sqrt(np.diag(cov))
        corr = cov / np.outer(s, s)
        np.fill_diagonal(corr, 1.0)
        p["errors"] = {"model": "gaussian", "matrix": [[float(x) for x in r] for r in corr]}
    elif feature == "empirical":
        rates = _write_log(rng, folder / f"log-{seed}.csv", N)
        for d, r in zip(drafters, rates, strict=True):
            d["acceptance"] = r
        p["errors"] = {"model": "empirical", "outcomes": f"log-{seed}.csv"}
    return p


def build(raw: dict, folder) -> Problem:
    return problem_from_spec(parse_problem(raw), base_dir=folder)


def pairs(result) -> list[tuple[float, float]]:
    return [(p["cost"], p["throughput"]) for p in result.points()]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("feature", FEATURES)
def test_pruned_search_equals_unpruned(feature, seed, tmp_path):
    problem = build(make(feature, seed, tmp_path), tmp_path)
    plain = ExactStrategy(prune=False).solve(problem)
    pruned = ExactStrategy().solve(problem)
    assert len(plain.front) >= 10
    assert len(pruned.front) == len(plain.front)
    np.testing.assert_allclose(pruned.front.cost, plain.front.cost, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pruned.front.throughput, plain.front.throughput, rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("feature", FEATURES)
def test_exact_front_and_every_metric_equal_the_reference(feature, seed, tmp_path):
    raw = make(feature, seed, tmp_path)
    problem = build(raw, tmp_path)
    model = reference.Model(raw, tmp_path)
    ref = model.front()
    assert len(ref) >= 10
    result = api.solve(problem, "exact")
    # the gaussian model integrates numerically (~1e-7); everything else is closed form
    # or one quadrature, compared to 1e-9
    tol = 1e-5 if feature == "gaussian" else 1e-9
    assert reference.same_front(pairs(result), [(c, t) for c, t, _, _ in ref], tol=tol)
    names = [d["name"] for d in raw["drafters"]]
    for point in result.points():
        subset = tuple(sorted(names.index(n) for n in point["drafters"]))
        want = model.metrics(subset, point["k"])
        for key in METRIC_KEYS:
            assert math.isclose(point[key], want[key], rel_tol=tol, abs_tol=tol), (key, point)
        assert point["m"] == len(subset)
        assert point["cost"] == point[raw["cost_metric"]]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("feature", ["plain", "token-cost", "hosting-cap"])
def test_knapsack_equals_exact(feature, seed, tmp_path):
    raw = make(feature, seed, tmp_path, lists=False)
    problem = build(raw, tmp_path)
    assert knapsack_blocker(problem) is None
    exact = ExactStrategy(prune=False).solve(problem)
    knap = KnapsackStrategy().solve(problem)
    assert len(exact.front) >= 10
    assert reference.same_front(pairs(knap), pairs(exact), tol=1e-12)


@pytest.mark.parametrize("feature", FEATURES)
def test_no_configuration_has_a_negative_or_infinite_time(feature, tmp_path):
    problem = build(make(feature, 0, tmp_path), tmp_path)
    for members in iter_subsets(problem, 64):
        met = evaluate_subsets(problem, members)
        assert np.all(met["round_time"] > 0)
        assert np.all(np.isfinite(met["throughput"])) and np.all(met["throughput"] > 0)


# ------------------------------------------------------------ hand-computed cases


def _problem(drafters, **extra) -> Problem:
    return problem_from_spec(parse_problem({"name": "hand", "drafters": drafters, **extra}))


def test_pass_cost_curve_keeps_the_cheaper_single_drafter():
    """Two free drafters; verifying 1 token costs 1, verifying 2 costs 10. At k = 1 one
    round yields 1 unit (paper), so {a} runs at 1/1 = 1.0 and {a, b} at 1/10 = 0.1:
    the front is one drafter at 1.0 (a pooled pair's higher acceptance does not pay for
    its pass)."""
    p = _problem(
        [
            {"name": "a", "acceptance": 0.5, "unit_cost": 0.0},
            {"name": "b", "acceptance": 0.5, "unit_cost": 0.0},
        ],
        verifier={"pass_cost_curve": {"tokens": [1, 2], "cost": [1, 10]}},
        search={"k": {"max": 1}},
    )
    for strategy in (ExactStrategy(), ExactStrategy(prune=False)):
        points = strategy.solve(p).points()
        assert [(pt["m"], pt["throughput"]) for pt in points] == [(1, 1.0)]


def test_parallel_drafting_front_counts_the_slowest_member():
    """Parallel drafting: a round takes k * max rho + 1. With a: (0.5, 0.1),
    b: (0.5, 0.1), c: (0.8, 0.2), paper convention, k = 2: {a, b} pools 0.75, E = 1.75,
    round 1.2, throughput 1.458333 at draft cost 0.4; {c}: E = 1.8, round 1.4, 1.285714
    at the same cost 0.4; {a}: E = 1.5, round 1.2, 1.25 at 0.2. Front: {a}, {a, b}.
    ({c} has the higher acceptance and no larger sum of unit costs than {a, b}: a
    screen that ignores max rho would wrongly drop the pair.)"""
    p = _problem(
        [
            {"name": "a", "acceptance": 0.5, "unit_cost": 0.1},
            {"name": "b", "acceptance": 0.5, "unit_cost": 0.1},
            {"name": "c", "acceptance": 0.8, "unit_cost": 0.2},
        ],
        drafting="parallel",
        search={"k": {"min": 2, "max": 2}},
    )
    pair = api.evaluate(p, ["a", "b"], 2)
    assert pair["round_time"] == pytest.approx(1.2, rel=1e-15)
    assert pair["throughput"] == pytest.approx(1.75 / 1.2, rel=1e-15)
    assert api.evaluate(p, ["c"], 2)["throughput"] == pytest.approx(1.8 / 1.4, rel=1e-15)
    for strategy in (ExactStrategy(), ExactStrategy(prune=False)):
        points = strategy.solve(p).points()
        assert [pt["drafters"] for pt in points] == [["a"], ["a", "b"]]
        np.testing.assert_allclose(
            [pt["throughput"] for pt in points], [1.5 / 1.2, 1.75 / 1.2], rtol=1e-15
        )


def test_pooled_acceptance_is_the_mean_over_the_positions_drafted():
    """Acceptance by position [0.9, 0.1] (the last repeats): the mean over positions
    1..k is 0.9 at k = 1, 0.5 at k = 2 and 0.3 at k = 4, whatever search.k.max is."""
    p = _problem(
        [{"name": "a", "acceptance": [0.9, 0.1], "unit_cost": 0.1}], search={"k": {"max": 8}}
    )
    for k, want in ((1, 0.9), (2, 0.5), (4, 0.3), (8, 0.2)):
        assert api.evaluate(p, ["a"], k)["pooled_acceptance"] == pytest.approx(want, rel=1e-14)
    by_k = {pt["k"]: pt["pooled_acceptance"] for pt in api.solve(p, "exact").points()}
    assert by_k[1] == pytest.approx(0.9, rel=1e-14)


def test_a_falling_curve_is_clamped_past_its_last_point():
    """Curve through (1, 1.0), (8, 1.6), (16, 1.4): a falling last segment. Inside, the
    cost is interpolated (12 tokens: 1.5); past 16 tokens it stays at 1.4 (extrapolating
    the fall would give 1.4 - 0.025 * 64 = -0.2 at 80 tokens: a negative round)."""
    p = _problem(
        [
            {"name": "a", "acceptance": 0.9, "unit_cost": 0.0},
            {"name": "b", "acceptance": 0.9, "unit_cost": 0.0},
        ],
        verifier={"pass_cost_curve": {"tokens": [1, 8, 16], "cost": [1.0, 1.6, 1.4]}},
        search={"k": {"max": 64}},
    )
    assert api.evaluate(p, ["a"], 12)["round_time"] == pytest.approx(1.5, rel=1e-15)
    assert api.evaluate(p, ["a", "b"], 40)["round_time"] == pytest.approx(1.4, rel=1e-15)
    assert api.evaluate(p, ["a"], 64)["round_time"] == pytest.approx(1.4, rel=1e-15)


# ------------------------------------------------------------ one source of truth


UNCERTAIN = {
    "name": "truth",
    "convention": "bonus",
    "errors": {"model": "exchangeable", "correlation": 0.9},
    "drafters": [
        {"name": "a", "acceptance": 0.7, "unit_cost": 0.05, "acceptance_interval": [0.6, 0.8]},
        {"name": "b", "acceptance": 0.6, "unit_cost": 0.05, "acceptance_interval": [0.5, 0.7]},
    ],
    "search": {"k": {"max": 6}},
}


def test_uncertainty_samples_under_the_problems_error_model_not_the_files():
    from allocator.analysis.uncertainty import draw_problems

    file_problem = problem_from_spec(parse_problem(UNCERTAIN))
    assert file_problem.errors.name == "exchangeable"
    independent = file_problem.with_errors(IndependentErrors())
    draws, _ = draw_problems(independent, 4, seed=1)
    assert [d.errors.name for d in draws] == ["independent"] * 4
    # and the draws' pooled acceptance is the independent one: 1 - (1 - a)(1 - b)
    for d in draws:
        pair = api.evaluate(d, ["a", "b"], 1)
        a, b = d.acceptance[:, 0]
        assert pair["pooled_acceptance"] == pytest.approx(1 - (1 - a) * (1 - b), rel=1e-12)


def test_uncertainty_keeps_an_error_model_swapped_in_after_loading():
    from allocator.analysis.uncertainty import analyse, draw_problems

    raw = {**UNCERTAIN, "errors": {"model": "independent"}}
    swapped = problem_from_spec(parse_problem(raw)).with_errors(ExchangeableErrors(0.5, None))
    draws, _ = draw_problems(swapped, 3, seed=2)
    assert [d.errors.name for d in draws] == ["exchangeable"] * 3
    front = api.solve(swapped, "exact").front
    report = analyse(swapped, front, 20, seed=3)
    plain = analyse(problem_from_spec(parse_problem(raw)), front, 20, seed=3)
    # the same draws of acceptance, under r = 0.5 instead of independence: the pair
    # pools less, so its median throughput falls
    pair = [i for i in range(len(front)) if front.members[i].all()]
    assert pair
    i = pair[0]
    assert report.percentiles["throughput_p50"][i] < plain.percentiles["throughput_p50"][i]
