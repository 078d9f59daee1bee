"""Bad correlated-error, ensemble, workload and timing input: one line naming the field,
exit status 2, no output file."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from allocator.cli import app

runner = CliRunner()

DRAFTERS = [
    {"name": "a", "acceptance": 0.5, "unit_cost": 0.1},
    {"name": "b", "acceptance": [0.9, 0.8], "unit_cost": 0.1},
    {"name": "c", "acceptance": 0.6, "unit_cost": 0.2},
]
LOG = "a,b,c,position\n" + "".join(
    f"{x},{y},{z},{p}\n"
    for p in (1, 2)
    for x, y, z in [(1, 1, 1), (0, 1, 1), (1, 1, 0), (0, 1, 0), (1, 0, 1)] * 40
)


def solve(tmp_path, extra, log=None):
    problem = {"name": "bad", "drafters": DRAFTERS, "search": {"k": {"max": 6}}, **extra}
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(problem))
    if log is not None:
        (tmp_path / "log.csv").write_text(log)
    out = tmp_path / "front.json"
    r = runner.invoke(app, ["solve", str(p), "--json", str(out)])
    assert not out.exists()
    return r


def wrong(text, old, new):
    assert old in text
    return text.replace(old, new)


# LOG: a is right in 0.6 of rows, b in 0.8 and c in 0.6, at both positions (200 rows each).
CASES = [
    ({"errors": {"model": "exchangeable", "correlation": 1.2}}, None, "errors.correlation"),
    (
        {"errors": {"model": "exchangeable", "error_correlation": -0.1}},
        None,
        "errors.error_correlation",
    ),
    (
        {"errors": {"model": "exchangeable", "correlation": 0.2, "error_correlation": 0.1}},
        None,
        "errors.correlation",
    ),
    # a = 0.5 and b = 0.9: the error correlation is at most (0.1 - 0.05)/sqrt(.25*.09) = 1/3
    (
        {"errors": {"model": "exchangeable", "error_correlation": 0.5}},
        None,
        "errors.error_correlation",
    ),
    ({"errors": {"model": "independent", "matrix": [[1]]}}, None, "errors.matrix"),
    ({"errors": {"model": "factor", "loadings": {"a": 0.5, "b": 0.2}}}, None, "errors.loadings"),
    (
        {"errors": {"model": "factor", "loadings": {"a": 0.5, "b": 0.2, "c": 0.1, "z": 0.3}}},
        None,
        "errors.loadings",
    ),
    (
        {"errors": {"model": "factor", "loadings": {"a": 1.0, "b": 0, "c": 0}}},
        None,
        "errors.loadings.a",
    ),
    ({"errors": {"model": "gaussian", "matrix": [[1, 0.2], [0.2, 1]]}}, None, "errors.matrix"),
    (
        {"errors": {"model": "gaussian", "matrix": [[1, 0.2, 0], [0.3, 1, 0], [0, 0, 1]]}},
        None,
        "errors.matrix",
    ),
    (
        {"errors": {"model": "gaussian", "matrix": [[2, 0.2, 0], [0.2, 1, 0], [0, 0, 1]]}},
        None,
        "errors.matrix",
    ),
    (
        {
            "errors": {
                "model": "gaussian",
                "matrix": [[1, 0.9, -0.9], [0.9, 1, 0.9], [-0.9, 0.9, 1]],
            }
        },
        None,
        "errors.matrix",
    ),
    ({"errors": {"model": "empirical", "outcomes": "nope.csv"}}, None, "errors.outcomes"),
    (
        {"errors": {"model": "empirical", "outcomes": "log.csv"}},
        wrong(LOG, "a,b,c", "a,b,x"),
        "errors.outcomes",
    ),
    (
        {"errors": {"model": "empirical", "outcomes": "log.csv"}},
        wrong(LOG, "1,0,1,1", "1,0,2,1"),
        "errors.outcomes",
    ),
    (
        {"errors": {"model": "empirical", "outcomes": "log.csv"}},
        wrong(LOG, ",2\n", ",3\n"),
        "errors.outcomes",
    ),
    # marginals contradicting the stated acceptance (the log's b is right 0.8 of the time)
    (
        {"errors": {"model": "empirical", "outcomes": "log.csv"}},
        LOG.replace("0,1,1,", "0,0,1,"),
        "errors.outcomes",
    ),
    ({"ensembles": [{"members": ["a", "c"], "acceptance": 0.55}]}, None, "ensembles.0.acceptance"),
    (
        {"ensembles": [{"members": ["a", "b"], "acceptance": [0.95, 0.7]}]},
        None,
        "ensembles.0.acceptance",
    ),
    (
        {
            "ensembles": [
                {"members": ["a", "c"], "acceptance": 0.7},
                {"members": ["c", "a"], "acceptance": 0.75},
            ]
        },
        None,
        "ensembles.1.members",
    ),
    (
        {
            "ensembles": [{"members": ["a", "c"], "acceptance": 0.7}],
            "workloads": [{"name": "w", "weight": 1}],
        },
        None,
        "ensembles",
    ),
    (
        {
            "pooling": "longest-chain",
            "errors": {"model": "factor", "loadings": {"a": 0.1, "b": 0.1, "c": 0.1}},
        },
        None,
        "pooling",
    ),
    (
        {"pooling": "longest-chain", "ensembles": [{"members": ["a", "c"], "acceptance": 0.7}]},
        None,
        "ensembles",
    ),
    (
        {"verifier": {"pass_cost": 2, "pass_cost_curve": {"tokens": [1, 4], "cost": [1, 2]}}},
        None,
        "verifier.pass_cost",
    ),
    (
        {"verifier": {"pass_cost_curve": {"tokens": [1, 4], "cost": [0, 2]}}},
        None,
        "verifier.pass_cost_curve.cost",
    ),
    (
        {"verifier": {"pass_cost_curve": {"tokens": [1, 4, 8], "cost": [1, 2]}}},
        None,
        "verifier.pass_cost_curve",
    ),
    (
        {"workloads": [{"name": "w", "weight": 1, "acceptance": {"a": 1.5}}]},
        None,
        "workloads[w].acceptance.a",
    ),
    (
        {
            "errors": {"model": "empirical", "outcomes": "log.csv"},
            "workloads": [{"name": "w", "weight": 1}],
        },
        None,
        "errors.outcomes",
    ),
]


NEEDLES = {
    "a,b,x": "no column for drafter(s) c",
    "1,0,2,1": "must hold 0 or 1",
    ",3\n": "no rows for position 2",
    "0,0,1,": "disagree beyond sampling error",
}


@pytest.mark.parametrize("extra,log,field", CASES)
def test_bad_input(tmp_path, extra, log, field):
    needle = next((v for k, v in NEEDLES.items() if log is not None and k in log), "")
    if log is None and extra.get("errors", {}).get("outcomes") == "log.csv":
        log = LOG
    r = solve(tmp_path, extra, log)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {field}:"), lines[0]
    assert needle in lines[0]
    assert "Traceback" not in r.output


def test_the_valid_log_is_accepted(tmp_path):
    # the same log and drafters as the bad cases: a right in 0.6, b 0.8, c 0.6 of rows
    drafters = [
        {"name": "a", "acceptance": 0.6, "unit_cost": 0.1},
        {"name": "b", "acceptance": 0.8, "unit_cost": 0.1},
        {"name": "c", "acceptance": 0.6, "unit_cost": 0.2},
    ]
    problem = {
        "name": "ok",
        "drafters": drafters,
        "errors": {"model": "empirical", "outcomes": "log.csv"},
        "search": {"k": {"max": 6}},
    }
    (tmp_path / "log.csv").write_text(LOG)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(problem))
    r = runner.invoke(
        app, ["evaluate", str(tmp_path / "p.yaml"), "-d", "a,b", "--k", "2", "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    # rows where a and b both fail: none of the five patterns -> pooled acceptance 1
    assert json.loads(r.stdout)["pooled_acceptance"] == 1.0


def test_gaussian_subset_too_large(tmp_path):
    n = 13
    problem = {
        "name": "big",
        "drafters": [{"name": f"d{i}", "acceptance": 0.5, "unit_cost": 0.01} for i in range(n)],
        "errors": {
            "model": "gaussian",
            "matrix": [[1.0 if i == j else 0.1 for j in range(n)] for i in range(n)],
        },
    }
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(problem))
    names = ",".join(f"d{i}" for i in range(n))
    r = runner.invoke(app, ["evaluate", str(p), "-d", names, "--k", "2"])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: errors.matrix: a subset of 13 drafters is too large")


def test_gaussian_refuses_hours_of_integration():
    import numpy as np

    from allocator.core.space import combinations
    from allocator.exceptions import InputError
    from allocator.model.errors import GaussianErrors

    n = 40  # every triple of 40 drafters at 6 distinct positions: 59,280 integrations
    triples = combinations(n, 3)
    members = np.zeros((triples.shape[0], n), bool)
    np.put_along_axis(members, triples, True, axis=1)
    q = np.tile(np.linspace(0.2, 0.7, 6), (n, 1))
    with pytest.raises(InputError) as info:
        GaussianErrors(np.eye(n)).fail_prob(members, q)
    assert info.value.field == "errors.matrix"
    assert "multivariate normal integrations" in info.value.message
