"""The break-even correlation, recomputed by an independent bisection."""

import json
import math

import numpy as np
import pytest
import yaml
from scipy.stats import multivariate_normal, norm
from typer.testing import CliRunner

from allocator.analysis.breakeven import breakeven, gain_curve
from allocator.cli import app
from allocator.io.build import problem_from_file, problem_from_spec
from allocator.io.spec import parse_problem

runner = CliRunner()


def bisect(f, lo, hi, tol=1e-13):
    flo = f(lo)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if (f(mid) > 0) == (flo > 0):
            lo, flo = mid, f(mid)
        else:
            hi = mid
    return 0.5 * (lo + hi)


def r2_pair_best(r):
    """R2's pair at latent correlation r: P(both fail) = 1/4 + asin(r)/(2π) (orthant
    probability of two standard normals); S = max_k E_k / (1 + 0.2 k), paper convention."""
    a = 1.0 - (0.25 + math.asin(r) / (2 * math.pi))
    return max((1 - a**k) / (1 - a) / (1 + 0.2 * k) for k in range(1, 65))


def test_r2_breakeven_by_bisection(problems_dir):
    single = max((1 - 0.5**k) / 0.5 / (1 + 0.1 * k) for k in range(1, 65))
    r_star = bisect(lambda r: r2_pair_best(r) - single, 0.0, 1.0)
    p = problem_from_file(problems_dir / "paper-r2.yaml")
    got = breakeven(p, ["weak-a", "weak-b"], ["weak-a"])
    assert got.latent_correlation == pytest.approx(r_star, abs=1e-9)
    # equal marginals at 0.5: error correlation (2/π) asin(r)
    assert got.error_correlation == pytest.approx(2 / math.pi * math.asin(r_star), abs=1e-9)
    assert got.gain_at_independence == pytest.approx(r2_pair_best(0.0) / single - 1, rel=1e-12)
    assert got.never is False
    # the correlated R2 shares the answer (its own error model is set aside)
    q = problem_from_file(problems_dir / "paper-r2-correlated.yaml")
    assert breakeven(q, ["weak-a", "weak-b"], ["weak-a"]).latent_correlation == pytest.approx(
        r_star, abs=1e-9
    )


def test_unequal_drafters_by_bisection():
    spec = {
        "name": "uneq",
        "drafters": [
            {"name": "x", "acceptance": 0.6, "unit_cost": 0.05},
            {"name": "y", "acceptance": 0.45, "unit_cost": 0.03},
        ],
        "verifier": {"pass_cost": 1.0, "token_cost": 0.01},
        "search": {"k": {"max": 30}},
    }
    p = problem_from_spec(parse_problem(spec))
    tx, ty = norm.ppf(0.4), norm.ppf(0.55)

    def pair_best(r):
        both = multivariate_normal.cdf([tx, ty], cov=[[1, r], [r, 1]])
        a = 1 - both
        return max((1 - a**k) / (1 - a) / (1 + 0.08 * k + 0.02 * k) for k in range(1, 31))

    single = max((1 - 0.6**k) / 0.4 / (1 + 0.05 * k + 0.01 * k) for k in range(1, 31))
    r_star = bisect(lambda r: pair_best(r) - single, 0.0, 1.0, tol=1e-10)
    got = breakeven(p, ["x", "y"], ["x"])
    assert got.latent_correlation == pytest.approx(r_star, abs=1e-7)
    joint = multivariate_normal.cdf([tx, ty], cov=[[1, r_star], [r_star, 1]])
    phi = (joint - 0.4 * 0.55) / math.sqrt(0.4 * 0.6 * 0.55 * 0.45)
    assert got.error_correlation == pytest.approx(phi, abs=1e-7)
    curve = gain_curve(p, ["x", "y"], ["x"], np.linspace(0, 1, 11))
    assert np.all(np.diff(curve) <= 1e-12)  # the gain falls with correlation
    assert curve[0] > 0 > curve[-1]


def test_never_and_no_gain():
    spec = {
        "name": "n",
        "drafters": [
            {"name": "weak", "acceptance": 0.5, "unit_cost": 0.01},
            {"name": "strong", "acceptance": 0.9, "unit_cost": 0.01},
        ],
    }
    p = problem_from_spec(parse_problem(spec))
    never = breakeven(p, ["weak", "strong"], ["weak"])
    assert never.never is True and never.latent_correlation is None
    assert never.gain_at_identical > 0
    costly = problem_from_spec(
        parse_problem(
            {**spec, "drafters": [{**spec["drafters"][0], "unit_cost": 0.5}, spec["drafters"][1]]}
        )
    )
    none = breakeven(costly, ["weak", "strong"], ["strong"])
    assert none.gain_at_independence <= 0 and none.latent_correlation == 0.0


def test_cli_breakeven_json(tmp_path, problems_dir):
    r = runner.invoke(
        app,
        [
            "breakeven",
            str(problems_dir / "paper-r2.yaml"),
            "--ensemble",
            "weak-a,weak-b",
            "--baseline",
            "weak-a",
            "--json",
            "-",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {"latent_correlation", "error_correlation", "gain_at_independence", "never"} <= set(doc)
    bad = runner.invoke(
        app,
        [
            "breakeven",
            str(problems_dir / "paper-r2.yaml"),
            "--ensemble",
            "weak-a",
            "--baseline",
            "weak-b",
        ],
    )
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --ensemble:")
    path = tmp_path / "chain.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **yaml.safe_load((problems_dir / "paper-r2.yaml").read_text()),
                "pooling": "longest-chain",
            }
        )
    )
    bad = runner.invoke(
        app, ["breakeven", str(path), "-e", "weak-a,weak-b", "--baseline", "weak-a"]
    )
    assert bad.exit_code == 2 and bad.stderr.startswith("error: pooling:")
