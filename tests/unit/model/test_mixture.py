"""Workload mixtures, measured ensembles, longest-chain pooling and pass-cost curves,
against plain re-computations written out here (loops, no allocator.model code)."""

import itertools

import numpy as np
import pytest

from allocator.io.build import problem_from_file, problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.metrics import evaluate_configs, evaluate_subsets
from tests.support.reference import acc_at

BASE = {
    "name": "mix",
    "drafters": [
        {"name": "a", "acceptance": [0.7, 0.6, 0.5], "unit_cost": 0.05, "hosting_cost": 1},
        {"name": "b", "acceptance": 0.55, "unit_cost": 0.1},
        {"name": "c", "acceptance": [0.4, 0.8], "unit_cost": 0.02},
    ],
    "search": {"k": {"max": 7}},
}


def build(**extra):
    return problem_from_spec(parse_problem({**BASE, **extra}))


def e_any(accs, subset, k, convention):
    """E_k of any-correct pooling, independent errors, by loops."""

    def pooled(j):
        fail = 1.0
        for i in subset:
            fail *= 1.0 - acc_at(accs[i], j)
        return 1.0 - fail

    if convention == "paper":
        return sum(np.prod([pooled(j) for j in range(1, i)]) for i in range(1, k + 1))
    return 1.0 + sum(np.prod([pooled(j) for j in range(1, i + 1)]) for i in range(1, k + 1))


def e_chain(accs, subset, k, convention):
    """docs/design.md §2.1's longest-chain formula, by loops."""

    def surv(d, i, paper):
        return np.prod([acc_at(accs[d], j) for j in range(1, i + (0 if paper else 1))])

    paper = convention == "paper"
    idx = range(1, k + 1) if paper else range(0, k + 1)
    return sum(1.0 - np.prod([1.0 - surv(d, i, paper) for d in subset]) for i in idx)


def subsets(n):
    for m in range(1, n + 1):
        yield from itertools.combinations(range(n), m)


def members_of(subset, n=3):
    row = np.zeros(n, bool)
    row[list(subset)] = True
    return row


@pytest.mark.parametrize("convention", ["paper", "bonus"])
def test_workload_mixture_is_renewal_reward(convention):
    workloads = [
        {"name": "chat", "weight": 3, "acceptance": {"a": 0.9, "c": [0.2, 0.3]}},
        {"name": "code", "weight": 1, "acceptance": {"b": [0.95, 0.9]}},
    ]
    p = build(workloads=workloads, convention=convention)
    base = [d["acceptance"] for d in BASE["drafters"]]
    per = []
    for w in workloads:
        accs = list(base)
        for name, v in w["acceptance"].items():
            accs["abc".index(name)] = v
        per.append(accs)
    weights = np.array([0.75, 0.25])
    strictly_below = 0
    for subset in subsets(3):
        row = members_of(subset)
        for k in range(1, 8):
            got = evaluate_configs(p, row[None], np.array([k]))
            rho = sum(BASE["drafters"][i]["unit_cost"] for i in subset)
            t = 1.0 + k * rho
            s_w = np.array([e_any(accs, subset, k, convention) / t for accs in per])
            expect = 1.0 / np.sum(weights / s_w)
            assert got["throughput"][0] == pytest.approx(expect, rel=1e-12)
            assert got["expected_accepted"][0] == pytest.approx(expect * t, rel=1e-12)
            assert got["draft_cost_per_token"][0] == pytest.approx(k * rho / (expect * t))
            # and it is not the arithmetic mean of the throughputs (equal only when
            # the workloads' throughputs are equal)
            assert got["throughput"][0] <= weights @ s_w * (1 + 1e-12)
            strictly_below += got["throughput"][0] < weights @ s_w * (1 - 1e-6)
    assert strictly_below > 40


def test_workload_view_and_the_mixture_agree_for_one_workload():
    p = build(workloads=[{"name": "only", "weight": 2, "acceptance": {"b": 0.3}}])
    single = p.workload_view(0)
    mem = np.ones((1, 3), bool)
    a = evaluate_subsets(p, mem)
    b = evaluate_subsets(single, mem)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-13)


def test_ensemble_overrides_exactly_its_subset():
    p = build(ensembles=[{"members": ["c", "a"], "acceptance": [0.75, 0.85]}])
    indep = build()
    for subset in subsets(3):
        row = members_of(subset)[None]
        got = evaluate_subsets(p, row)["expected_accepted"][0]
        if set(subset) == {0, 2}:
            accs = [[0.75, 0.85]]
            expect = [e_any(accs, (0,), k, "paper") for k in range(1, 8)]
            np.testing.assert_allclose(got, expect, rtol=1e-13)
        else:
            np.testing.assert_array_equal(got, evaluate_subsets(indep, row)["expected_accepted"][0])


@pytest.mark.parametrize("convention", ["paper", "bonus"])
def test_longest_chain_matches_design_formula(convention):
    p = build(pooling="longest-chain", convention=convention)
    accs = [d["acceptance"] for d in BASE["drafters"]]
    for subset in subsets(3):
        got = evaluate_subsets(p, members_of(subset)[None])["expected_accepted"][0]
        expect = [e_chain(accs, subset, k, convention) for k in range(1, 8)]
        np.testing.assert_allclose(got, expect, rtol=1e-12)
    # one drafter: longest-chain and any-correct coincide
    one = evaluate_subsets(build(convention=convention), members_of((1,))[None])
    np.testing.assert_allclose(
        evaluate_subsets(p, members_of((1,))[None])["expected_accepted"], one["expected_accepted"]
    )


def test_pass_cost_curve_piecewise_linear():
    curve = {"tokens": [2, 4, 10], "cost": [1.0, 1.2, 2.4]}
    p = build(verifier={"pass_cost_curve": curve}, search={"k": {"max": 8}})
    row = members_of((0, 1))[None]  # m = 2: verified tokens 2k
    t = evaluate_subsets(p, row)["round_time"][0]
    draft = 0.15 * np.arange(1, 9)
    # by hand: 2 -> 1.0, 4 -> 1.2, 6 -> 1.6, 8 -> 2.0, 10 -> 2.4, beyond: slope 0.2 per token
    verify = [1.0, 1.2, 1.6, 2.0, 2.4, 2.8, 3.2, 3.6]
    np.testing.assert_allclose(t - draft, verify, rtol=1e-12)
    # below the first point a pass costs the first measured cost
    single = evaluate_subsets(p, members_of((2,))[None])["round_time"][0]
    assert single[0] - 0.02 == pytest.approx(1.0)


def test_outcome_log_workloads_use_their_own_rows(problems_dir):
    import csv

    from allocator.model.metrics import pooled_acceptance

    p = problem_from_file(problems_dir / "outcome-log" / "problem.yaml")
    with (problems_dir / "outcome-log" / "outcomes.csv").open() as f:
        rows = list(csv.DictReader(f))
    pair = ("distil-1b", "ngram")
    members = np.isin(p.names, pair)[None]
    for i, w in enumerate(p.workloads):
        got = pooled_acceptance(p.workload_view(i), members, 8)[0]
        for pos in range(1, 9):
            mine = [r for r in rows if r["workload"] == w.name and int(r["position"]) == pos]
            both_fail = sum(all(r[n] == "0" for n in pair) for r in mine)
            assert got[pos - 1] == pytest.approx(1 - both_fail / len(mine), abs=1e-15)


def test_with_errors_replaces_the_workloads_own_log_models_too():
    from pathlib import Path

    from allocator.model.errors import IndependentErrors
    from allocator.model.metrics import pooled_acceptance

    path = Path(__file__).resolve().parents[3] / "problems" / "outcome-log" / "problem.yaml"
    logged = problem_from_file(path)
    assert any(w.errors is not None for w in logged.workloads)
    indep = logged.with_errors(IndependentErrors())
    members = np.array(list(itertools.product([False, True], repeat=logged.n))[1:])
    for i, w in enumerate(indep.workloads):
        got = pooled_acceptance(indep.workload_view(i), members)
        # independence, by hand: 1 - prod over members of (1 - a_i(j))
        want = 1.0 - np.prod(np.where(members[:, :, None], 1.0 - w.acceptance[None], 1.0), axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
