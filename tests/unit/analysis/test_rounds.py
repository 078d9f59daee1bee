"""The closed forms against the simulator, which draws outcomes from the error model
itself (several seeds); the model's distribution of accepted units; the CLI."""

import json

import numpy as np
import pytest
import yaml
from scipy.stats import chi2, multivariate_normal, norm
from typer.testing import CliRunner

from allocator.analysis.rounds import simulate, simulate_rounds, workload_rounds
from allocator.cli import app
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.accepted_pmf import accepted_distribution
from allocator.model.errors import (
    EmpiricalErrors,
    ExchangeableErrors,
    FactorErrors,
    GaussianErrors,
)

runner = CliRunner()

SPEC = {
    "name": "sim",
    "drafters": [
        {"name": "a", "acceptance": [0.7, 0.6, 0.5], "unit_cost": 0.05},
        {"name": "b", "acceptance": 0.55, "unit_cost": 0.1},
        {"name": "c", "acceptance": [0.4, 0.8], "unit_cost": 0.02},
    ],
    "search": {"k": {"max": 8}},
}


def problem(**extra):
    return problem_from_spec(parse_problem({**SPEC, **extra}), simulation=True)


def log_model():
    rng = np.random.default_rng(9)
    z = 0.6 * rng.standard_normal((6000, 1)) + 0.8 * rng.standard_normal((6000, 3))
    fail = z < np.array([-0.3, 0.0, 0.2])
    return EmpiricalErrors.from_failures(fail, rng.integers(1, 4, 6000))


def cases():
    matrix = np.array([[1.0, 0.6, 0.2], [0.6, 1.0, -0.3], [0.2, -0.3, 1.0]])
    for convention in ("paper", "bonus"):
        yield convention, {}, None
        yield convention, {}, ExchangeableErrors(correlation=0.5)
        yield convention, {}, ExchangeableErrors(error_correlation=0.15)
        yield convention, {}, FactorErrors(np.array([0.9, -0.4, 0.6]))
        yield convention, {}, GaussianErrors(matrix)
        yield convention, {"pooling": "longest-chain"}, None
        yield convention, {"ensembles": [{"members": ["a", "b", "c"], "acceptance": 0.9}]}, None
        yield (
            convention,
            {
                "workloads": [
                    {"name": "x", "weight": 1, "acceptance": {"b": 0.9}},
                    {"name": "y", "weight": 2},
                ]
            },
            None,
        )
    yield "paper", {}, log_model()


def test_closed_forms_inside_the_simulated_interval():
    """Every closed form against the simulator, three seeds each. At 99% a few of the
    ~150 intervals may miss by chance: the misses must stay within what chance allows
    (binomial 99.99% bound) and none may be far off (5 standard errors)."""
    checks, misses = 0, 0
    for convention, extra, errors in cases():
        p = problem(convention=convention, **extra)
        if errors is not None:
            p = p.replace(errors=errors)
        for k in (1, 3, 6):
            for seed in range(3):
                s = simulate(p, ["a", "b", "c"], k, 20_000, seed)
                se = (s.ci_high - s.ci_low) / (2 * norm.ppf(0.995))
                checks += 1
                inside = s.ci_low <= s.model_accepted <= s.ci_high
                misses += not inside
                assert abs(s.mean_accepted - s.model_accepted) <= 5 * se + 1e-12, (
                    convention,
                    extra,
                    k,
                )
                assert s.throughput == pytest.approx(s.mean_accepted / s.round_time)
    from scipy.stats import binom

    assert misses <= binom.ppf(0.9999, checks, 0.01), (misses, checks)


def test_simulation_is_reproducible_and_seed_dependent():
    p = problem().replace(errors=ExchangeableErrors(correlation=0.3))
    a = simulate_rounds(p, np.ones(3, bool), 5, 1000, seed=4)
    b = simulate_rounds(p, np.ones(3, bool), 5, 1000, seed=4)
    c = simulate_rounds(p, np.ones(3, bool), 5, 1000, seed=5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


MIXTURE = [
    {"name": "x", "weight": 1, "acceptance": {"a": 0.9, "b": [0.3, 0.2]}},
    {"name": "y", "weight": 2},
]


@pytest.mark.parametrize(
    "convention,mixture", [("paper", False), ("bonus", False), ("bonus", True)]
)
def test_histogram_matches_model_distribution(convention, mixture):
    p = problem(convention=convention, **({"workloads": MIXTURE} if mixture else {}))
    p = p.replace(errors=FactorErrors(np.array([0.7, 0.5, 0.3])))
    k = 4
    members = np.array([True, True, False])
    dist = accepted_distribution(p, members, k)
    assert dist.sum() == pytest.approx(1.0)
    assert dist @ np.arange(k + 2) == pytest.approx(
        simulate(p, ["a", "b"], k, 2, 0).model_accepted, rel=1e-12
    )
    if mixture:  # each workload's rounds against that workload's own distribution
        played = workload_rounds(p, members, k, 50_000, seed=1)
        views = [p.workload_view(i) for i in range(len(p.workloads))]
    else:
        played, views = [simulate_rounds(p, members, k, 50_000, seed=1)], [p]
    for units, view in zip(played, views, strict=True):
        want = accepted_distribution(view, members, k)
        observed = np.bincount(units, minlength=k + 2)
        live = want > 0
        assert observed[~live].sum() == 0
        stat = np.sum((observed[live] - 50_000 * want[live]) ** 2 / (50_000 * want[live]))
        assert chi2.sf(stat, live.sum() - 1) > 1e-4


def test_correlated_chains_only_by_simulation():
    p = problem(pooling="longest-chain")
    same = p.replace(acceptance=np.full((3, 1), 0.6), errors=ExchangeableErrors(correlation=1.0))
    # identical errors: every chain is the same chain, so three drafters act as one
    s = simulate(same, ["a", "b", "c"], 5, 30_000, 2)
    assert s.model_accepted is None
    one = simulate(same.replace(errors=problem().errors), ["a"], 5, 2, 0).model_accepted
    assert s.ci_low <= one <= s.ci_high


def test_cli_simulate_json(tmp_path):
    path = tmp_path / "p.yaml"
    spec = {**SPEC, "errors": {"model": "exchangeable", "correlation": 0.4}}
    path.write_text(yaml.safe_dump(spec))

    def run(drafters_flag):
        return runner.invoke(
            app,
            [
                "simulate",
                str(path),
                drafters_flag,
                "a,b",
                "--k",
                "4",
                "--rounds",
                "5000",
                "--seed",
                "3",
                "--json",
                "-",
            ],
        )

    r = run("--drafters")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {
        "mean_accepted",
        "ci_low",
        "ci_high",
        "model_accepted",
        "throughput",
        "model_throughput",
    } <= set(doc)
    # by hand: a and b fail together with the bivariate normal orthant at latent 0.4;
    # paper E_4 = sum_{i=1..4} prod_{j<i} a_S(j); round time 1 + 4 * (0.05 + 0.1)
    both = [
        multivariate_normal.cdf(
            norm.ppf([qa, 0.45]), cov=[[1, 0.4], [0.4, 1]], abseps=1e-10, releps=0
        )
        for qa in (0.3, 0.4, 0.5)
    ]
    pooled = [1.0 - both[min(j, 3) - 1] for j in range(1, 4)]
    expect = sum(np.prod(pooled[: i - 1]) for i in range(1, 5))
    assert doc["model_accepted"] == pytest.approx(expect, abs=1e-8)
    assert doc["model_throughput"] == pytest.approx(expect / 1.6, abs=1e-8)
    assert doc["round_time"] == pytest.approx(1.6, rel=1e-15)
    assert doc["ci_low"] <= expect <= doc["ci_high"]
    # the same seed through the short option gives the same document
    assert json.loads(run("-d").stdout) == doc
    bad = runner.invoke(app, ["simulate", str(path), "-d", "a,zed", "--k", "4", "--rounds", "10"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --drafters: unknown drafter")
